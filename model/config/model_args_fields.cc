#include "model/config/model_args_fields.h"

#include <limits>
#include <string_view>
#include <utility>

#include "absl/strings/str_cat.h"
#include "common/base/status_macros.h"

namespace flashserve::model {

std::string_view WeightDtypeName(WeightDtype dtype) {
  return dtype == WeightDtype::kBf16 ? "bf16" : "fp8";
}

std::string_view ExpertDtypeName(ExpertDtype dtype) {
  return dtype == ExpertDtype::kFp4 ? "fp4" : "null";
}

std::string_view ScoreFuncName(ScoreFunc func) {
  switch (func) {
    case ScoreFunc::kSoftmax:
      return "softmax";
    case ScoreFunc::kSigmoid:
      return "sigmoid";
    case ScoreFunc::kSqrtSoftplus:
      return "sqrtsoftplus";
  }
  return "?";
}

namespace config_internal {
namespace {

using json = nlohmann::json;
using ojson = nlohmann::ordered_json;
using MC = ModelConfig;

constexpr FieldSpec kFields[] = {
    {"max_batch_size", &MC::max_batch_size, false},
    {"max_seq_len", &MC::max_seq_len, false},
    {"temperature", &MC::temperature, false},
    {"dtype", &MC::dtype, true},
    {"expert_dtype", &MC::expert_dtype, true},
    {"vocab_size", &MC::vocab_size, true},
    {"dim", &MC::dim, true},
    {"moe_inter_dim", &MC::moe_inter_dim, true},
    {"n_layers", &MC::n_layers, true},
    {"n_mtp_layers", &MC::n_mtp_layers, true},
    {"n_heads", &MC::n_heads, true},
    {"n_routed_experts", &MC::n_routed_experts, true},
    {"n_shared_experts", &MC::n_shared_experts, true},
    {"n_activated_experts", &MC::n_activated_experts, true},
    {"score_func", &MC::score_func, true},
    {"gate_temp", &MC::gate_temp, false},
    {"norm_topk_prob", &MC::norm_topk_prob, false},
    {"route_scale", &MC::route_scale, true},
    {"swiglu_limit", &MC::swiglu_limit, true},
    {"q_lora_rank", &MC::q_lora_rank, true},
    {"head_dim", &MC::head_dim, true},
    {"rope_head_dim", &MC::rope_head_dim, true},
    {"norm_eps", &MC::norm_eps, true},
    {"o_groups", &MC::o_groups, true},
    {"o_lora_rank", &MC::o_lora_rank, true},
    {"window_size", &MC::window_size, true},
    {"compress_ratios", &MC::compress_ratios, true},
    {"kv_source_layers", &MC::kv_source_layers, true},
    {"index_source_layers", &MC::index_source_layers, true},
    {"compress_rope_theta", &MC::compress_rope_theta, true},
    {"original_seq_len", &MC::original_seq_len, true},
    {"rope_theta", &MC::rope_theta, true},
    {"rope_factor", &MC::rope_factor, true},
    {"beta_fast", &MC::beta_fast, true},
    {"beta_slow", &MC::beta_slow, true},
    {"index_n_heads", &MC::index_n_heads, true},
    {"index_head_dim", &MC::index_head_dim, true},
    {"index_topk", &MC::index_topk, true},
    {"candidate_source_layer", &MC::candidate_source_layer, true},
    {"candidate_topk_blocks", &MC::candidate_topk_blocks, true},
    {"candidate_block_size", &MC::candidate_block_size, true},
    {"hc_mult", &MC::hc_mult, true},
    {"hc_sinkhorn_iters", &MC::hc_sinkhorn_iters, true},
    {"hc_eps", &MC::hc_eps, true},
    {"engram_layer_ids", &MC::engram_layer_ids, true},
    {"engram_num_embeddings", &MC::engram_num_embeddings, true},
    {"engram_max_ngram_size", &MC::engram_max_ngram_size, true},
    {"engram_vocab_size", &MC::engram_vocab_size, true},
    {"engram_n_heads", &MC::engram_n_heads, true},
    {"engram_head_dim", &MC::engram_head_dim, true},
    {"engram_pad_id", &MC::engram_pad_id, true},
    {"engram_compressed_vocab_size", &MC::engram_compressed_vocab_size, true},
    {"vision_n_layers", &MC::vision_n_layers, true},
    {"vision_dim", &MC::vision_dim, true},
    {"vision_n_heads", &MC::vision_n_heads, true},
    {"vision_inter_dim", &MC::vision_inter_dim, true},
    {"vision_patch_size", &MC::vision_patch_size, true},
    {"vision_rope_theta", &MC::vision_rope_theta, true},
    {"vision_downsample_ratio", &MC::vision_downsample_ratio, true},
    {"vision_max_n_token", &MC::vision_max_n_token, true},
    {"vision_min_pixels", &MC::vision_min_pixels, true},
    {"vision_max_wh_ratio", &MC::vision_max_wh_ratio, true},
    {"image_token_id", &MC::image_token_id, true},
    {"dspark_block_size", &MC::dspark_block_size, true},
    {"dspark_noise_token_id", &MC::dspark_noise_token_id, true},
    {"dspark_target_layer_ids", &MC::dspark_target_layer_ids, true},
    {"dspark_markov_rank", &MC::dspark_markov_rank, true},
    {"dspark_n_routed_experts", &MC::dspark_n_routed_experts, true},
    {"dspark_n_activated_experts", &MC::dspark_n_activated_experts, true},
};

absl::Status TypeError(absl::string_view key, absl::string_view expected, const json& value) {
  return absl::InvalidArgumentError(absl::StrCat("config key '", key, "': expected ", expected,
                                                 ", got ", value.type_name(), " ", value.dump()));
}

template <typename Int>
absl::StatusOr<Int> ReadInteger(const json& value, absl::string_view key) {
  const absl::string_view expected = sizeof(Int) == 4 ? "a 32-bit integer" : "a 64-bit integer";
  if (value.is_number_unsigned()) {
    const uint64_t v = value.get<uint64_t>();
    if (v > static_cast<uint64_t>(std::numeric_limits<Int>::max())) {
      return TypeError(key, expected, value);
    }
    return static_cast<Int>(v);
  }
  if (value.is_number_integer()) {
    const int64_t v = value.get<int64_t>();
    if (v < std::numeric_limits<Int>::min() || v > std::numeric_limits<Int>::max()) {
      return TypeError(key, expected, value);
    }
    return static_cast<Int>(v);
  }
  return TypeError(key, expected, value);
}

template <typename Int>
absl::StatusOr<std::vector<Int>> ReadIntList(const json& value, absl::string_view key) {
  if (!value.is_array()) return TypeError(key, "an array of integers", value);
  std::vector<Int> out;
  out.reserve(value.size());
  for (size_t i = 0; i < value.size(); ++i) {
    auto element = ReadInteger<Int>(value[i], absl::StrCat(key, "[", i, "]"));
    if (!element.ok()) return element.status();
    out.push_back(*element);
  }
  return out;
}

// One overload per field type; dispatched through std::visit.
struct Reader {
  const json& value;
  absl::string_view key;
  ModelConfig& config;

  absl::Status operator()(int MC::*field) {
    ASSIGN_OR_RETURN(config.*field, ReadInteger<int>(value, key));
    return absl::OkStatus();
  }
  absl::Status operator()(int64_t MC::*field) {
    ASSIGN_OR_RETURN(config.*field, ReadInteger<int64_t>(value, key));
    return absl::OkStatus();
  }
  absl::Status operator()(double MC::*field) {
    if (!value.is_number()) return TypeError(key, "a number", value);
    config.*field = value.get<double>();
    return absl::OkStatus();
  }
  absl::Status operator()(bool MC::*field) {
    if (!value.is_boolean()) return TypeError(key, "a boolean", value);
    config.*field = value.get<bool>();
    return absl::OkStatus();
  }
  absl::Status operator()(std::vector<int> MC::*field) {
    ASSIGN_OR_RETURN(config.*field, ReadIntList<int>(value, key));
    return absl::OkStatus();
  }
  absl::Status operator()(std::vector<int64_t> MC::*field) {
    ASSIGN_OR_RETURN(config.*field, ReadIntList<int64_t>(value, key));
    return absl::OkStatus();
  }
  absl::Status operator()(std::optional<int> MC::*field) {
    if (value.is_null()) {
      config.*field = std::nullopt;
      return absl::OkStatus();
    }
    if (!value.is_number_integer()) return TypeError(key, "an integer or null", value);
    ASSIGN_OR_RETURN(config.*field, ReadInteger<int>(value, key));
    return absl::OkStatus();
  }
  absl::Status operator()(WeightDtype MC::*field) {
    if (value == "bf16") {
      config.*field = WeightDtype::kBf16;
    } else if (value == "fp8") {
      config.*field = WeightDtype::kFp8;
    } else {
      return TypeError(key, "\"bf16\" or \"fp8\"", value);
    }
    return absl::OkStatus();
  }
  absl::Status operator()(ExpertDtype MC::*field) {
    if (value.is_null()) {
      config.*field = ExpertDtype::kSameAsDtype;
    } else if (value == "fp4") {
      config.*field = ExpertDtype::kFp4;
    } else {
      return TypeError(key, "\"fp4\" or null", value);
    }
    return absl::OkStatus();
  }
  absl::Status operator()(ScoreFunc MC::*field) {
    for (ScoreFunc f : {ScoreFunc::kSoftmax, ScoreFunc::kSigmoid, ScoreFunc::kSqrtSoftplus}) {
      if (value.is_string() && value.get<std::string>() == ScoreFuncName(f)) {
        config.*field = f;
        return absl::OkStatus();
      }
    }
    return TypeError(key, "\"softmax\", \"sigmoid\" or \"sqrtsoftplus\"", value);
  }
};

struct Writer {
  const ModelConfig& config;

  ojson operator()(int MC::*f) const { return config.*f; }
  ojson operator()(int64_t MC::*f) const { return config.*f; }
  ojson operator()(double MC::*f) const { return config.*f; }
  ojson operator()(bool MC::*f) const { return config.*f; }
  ojson operator()(std::vector<int> MC::*f) const { return config.*f; }
  ojson operator()(std::vector<int64_t> MC::*f) const { return config.*f; }
  ojson operator()(std::optional<int> MC::*f) const {
    return (config.*f).has_value() ? ojson(*(config.*f)) : ojson(nullptr);
  }
  ojson operator()(WeightDtype MC::*f) const { return std::string(WeightDtypeName(config.*f)); }
  ojson operator()(ExpertDtype MC::*f) const {
    return config.*f == ExpertDtype::kFp4 ? ojson("fp4") : ojson(nullptr);
  }
  ojson operator()(ScoreFunc MC::*f) const { return std::string(ScoreFuncName(config.*f)); }
};

absl::string_view DisplayName(const DisplayNames& display, absl::string_view key) {
  for (const auto& [args_key, shown] : display) {
    if (args_key == key) return shown;
  }
  return key;
}

}  // namespace

absl::Span<const FieldSpec> ModelArgsFields() { return kFields; }

const FieldSpec* FindField(absl::string_view name) {
  for (const FieldSpec& spec : kFields) {
    if (spec.name == name) return &spec;
  }
  return nullptr;
}

absl::Status ReadField(const json& value, const FieldSpec& spec, absl::string_view display_name,
                       ModelConfig& config) {
  return std::visit(Reader{value, display_name, config}, spec.ref);
}

ojson WriteField(const FieldSpec& spec, const ModelConfig& config) {
  return std::visit(Writer{config}, spec.ref);
}

absl::StatusOr<ModelConfig> ConfigFromArgsObject(const json& object, const DisplayNames& display) {
  ModelConfig config;
  for (const auto& [key, value] : object.items()) {
    const FieldSpec* spec = FindField(key);
    if (spec == nullptr) {
      return absl::InvalidArgumentError(absl::StrCat(
          "unknown config key '", DisplayName(display, key), "' (not a ModelArgs field)"));
    }
    RETURN_IF_ERROR(ReadField(value, *spec, DisplayName(display, key), config));
  }
  for (const FieldSpec& spec : kFields) {
    if (spec.required && !object.contains(std::string(spec.name))) {
      return absl::InvalidArgumentError(
          absl::StrCat("missing required config key '", DisplayName(display, spec.name), "'"));
    }
  }
  return config;
}

}  // namespace config_internal
}  // namespace flashserve::model
