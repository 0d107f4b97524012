#include "model/weights/synthetic_checkpoint.h"

#include <cmath>
#include <filesystem>
#include <random>
#include <string_view>
#include <vector>

#include "absl/strings/str_cat.h"
#include "common/base/status_macros.h"
#include "common/formats/bf16.h"
#include "common/formats/weight_quant.h"
#include "common/safetensors/writer.h"
#include "model/config/config_parser.h"
#include "model/config/validate.h"
#include "model/weights/loader.h"

namespace flashserve::model {
namespace {

bool EndsWith(std::string_view s, std::string_view suffix) {
  return s.size() >= suffix.size() && s.substr(s.size() - suffix.size()) == suffix;
}
bool Contains(std::string_view s, std::string_view part) {
  return s.find(part) != std::string_view::npos;
}

// Standard deviation of a Linear's weight: 1/√in, with the output projections of each sublayer
// small so that the residual stream dominates.
double WeightStd(std::string_view name, int64_t in) {
  double g = 1.0 / std::sqrt(static_cast<double>(in));
  if (Contains(name, "wo_b") || Contains(name, ".w2.")) g *= 0.12;
  return g;
}

}  // namespace

absl::Status WriteSyntheticCheckpoint(const ModelConfig& config, const std::string& dir,
                                      uint64_t seed) {
  RETURN_IF_ERROR(Validate(config));
  if (!config.engram_layer_ids.empty()) {
    return absl::InvalidArgumentError("synthetic checkpoints do not support Engram layers");
  }
  std::error_code ec;
  std::filesystem::create_directories(dir, ec);
  if (ec) return absl::InternalError(absl::StrCat("cannot create ", dir, ": ", ec.message()));
  std::mt19937_64 rng(seed);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  safetensors::SafetensorsWriter w;
  auto bytes = [](const auto& v) {
    return std::span<const uint8_t>(reinterpret_cast<const uint8_t*>(v.data()),
                                    v.size() * sizeof(v[0]));
  };
  const std::vector<TensorSpec> specs = ExpectedTensors(config);
  for (const TensorSpec& spec : specs) {
    if (spec.role == TensorRole::kScales) continue;  // written with their weight
    const std::string_view name = spec.name;
    int64_t numel = 1;
    for (int64_t d : spec.shape) numel *= d;
    const std::string base = EndsWith(name, ".weight")
                                 ? std::string(name.substr(0, name.size() - 7))
                                 : std::string(name);
    switch (spec.dtype) {
      case safetensors::DType::kF8E4M3:
      case safetensors::DType::kI8: {
        const bool fp4 = spec.dtype == safetensors::DType::kI8;
        const int64_t out = spec.shape[0], in = fp4 ? spec.shape[1] * 2 : spec.shape[1];
        std::vector<uint16_t> wbf(static_cast<size_t>(out * in));
        const double g = WeightStd(name, in);
        for (uint16_t& v : wbf) v = formats::FloatToBf16Bits(static_cast<float>(normal(rng) * g));
        std::vector<uint8_t> codes, scales;
        if (fp4) {
          codes.resize(static_cast<size_t>(out * in / 2));
          scales.resize(static_cast<size_t>(out * formats::Fp4WeightScaleCols(in)));
          RETURN_IF_ERROR(formats::QuantizeFp4Weight(wbf, out, in, codes, scales)) << name;
          RETURN_IF_ERROR(w.Add(std::string(name), safetensors::DType::kI8, spec.shape,
                                bytes(codes)));
          RETURN_IF_ERROR(w.Add(base + ".scale", safetensors::DType::kF8E8M0,
                                {out, formats::Fp4WeightScaleCols(in)}, bytes(scales)));
        } else {
          codes.resize(static_cast<size_t>(out * in));
          scales.resize(static_cast<size_t>(formats::Fp8WeightScaleRows(out) *
                                            formats::Fp8WeightScaleCols(in)));
          RETURN_IF_ERROR(formats::QuantizeFp8Weight(wbf, out, in, codes, scales)) << name;
          RETURN_IF_ERROR(w.Add(std::string(name), safetensors::DType::kF8E4M3, spec.shape,
                                bytes(codes)));
          RETURN_IF_ERROR(w.Add(base + ".scale", safetensors::DType::kF8E8M0,
                                {formats::Fp8WeightScaleRows(out), formats::Fp8WeightScaleCols(in)},
                                bytes(scales)));
        }
        break;
      }
      case safetensors::DType::kBF16: {
        std::vector<uint16_t> v(static_cast<size_t>(numel));
        const bool norm = EndsWith(name, "norm.weight") || EndsWith(name, "_norm.weight");
        const int64_t in = spec.shape.size() == 2 ? spec.shape[1] : 1;
        const double g = name == "embed.weight" ? 1.0 : WeightStd(name, in);
        for (uint16_t& x : v) {
          x = formats::FloatToBf16Bits(norm ? 1.0f : static_cast<float>(normal(rng) * g));
        }
        RETURN_IF_ERROR(w.Add(std::string(name), safetensors::DType::kBF16, spec.shape, bytes(v)));
        break;
      }
      case safetensors::DType::kF32: {
        std::vector<float> v(static_cast<size_t>(numel), 0.0f);
        if (EndsWith(name, "_fn")) {
          const double g = 0.1 / std::sqrt(static_cast<double>(spec.shape[1]));
          for (float& x : v) x = static_cast<float>(normal(rng) * g);
        } else if (EndsWith(name, "_scale") || EndsWith(name, "norm.weight")) {
          std::fill(v.begin(), v.end(), 1.0f);
        }  // bases, sinks, gate biases: 0
        RETURN_IF_ERROR(w.Add(std::string(name), safetensors::DType::kF32, spec.shape, bytes(v)));
        break;
      }
      default:
        return absl::InvalidArgumentError(absl::StrCat("synthetic weights: unsupported dtype of ",
                                                        std::string(name)));
    }
  }
  RETURN_IF_ERROR(w.Write(dir + "/model.safetensors"));
  return safetensors::WriteFileAtomically(dir + "/config.json", ToFlatConfigJson(config));
}

}  // namespace flashserve::model
