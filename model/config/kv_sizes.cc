#include "model/config/kv_sizes.h"

#include <algorithm>

namespace flashserve::model {

int64_t GlobalKvBytesPerBlock(const ModelConfig& config) {
  int64_t bytes = 0;
  for (int layer : config.kv_source_layers) {
    const int ratio = config.compress_ratios[layer];
    const bool owns_index_keys =
        std::find(config.index_source_layers.begin(), config.index_source_layers.end(), layer) !=
        config.index_source_layers.end();
    int64_t row = formats::MainKvRowBytes(config.head_dim);
    if (owns_index_keys) row += formats::IndexKRowBytes(config.index_head_dim);
    bytes += RowsPerCacheBlock(ratio) * row;
  }
  return bytes;
}

double GlobalKvBytesPerToken(const ModelConfig& config) {
  return static_cast<double>(GlobalKvBytesPerBlock(config)) / kCacheBlockTokens;
}

int64_t SwaBytesPerTokenPerLayer(const ModelConfig& config) {
  return formats::SwaKvRowBytes(config.head_dim);
}

int64_t SwaBytesPerSession(const ModelConfig& config) {
  return formats::SwaKvRowBytes(config.head_dim) * config.window_size * config.n_layers;
}

int64_t DSparkWindowBytesPerSession(const ModelConfig& config) {
  if (!config.dspark_enabled()) return 0;
  return formats::SwaKvRowBytes(config.head_dim) * config.window_size * config.n_mtp_layers;
}

}  // namespace flashserve::model
