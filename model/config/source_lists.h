// Internal to fs_model_config: lookups over the sorted layer lists of a ModelConfig
// (kv_source_layers, index_source_layers, engram_layer_ids, dspark_target_layer_ids).
#pragma once

#include <algorithm>
#include <vector>

namespace flashserve::model::config_internal {

// Whether `layer` is in `layers` (any order).
inline bool Contains(const std::vector<int>& layers, int layer) {
  return std::find(layers.begin(), layers.end(), layer) != layers.end();
}

// The position of `layer` in `layers`, or -1.
inline int IndexOf(const std::vector<int>& layers, int layer) {
  auto it = std::find(layers.begin(), layers.end(), layer);
  return it == layers.end() ? -1 : static_cast<int>(it - layers.begin());
}

// The largest entry <= `layer`, or -1 when there is none. `layers` must be sorted ascending.
inline int MostRecentAtOrBefore(const std::vector<int>& layers, int layer) {
  auto it = std::upper_bound(layers.begin(), layers.end(), layer);
  return it == layers.begin() ? -1 : *(it - 1);
}

}  // namespace flashserve::model::config_internal
