// ParseHfConfig: translates the HF nested config.json (spec §2b) into a ModelArgs-keyed object,
// then reuses the flat field table. Each HF key is read from one place only, so a key that sits in
// the wrong section is reported as unknown instead of being picked up silently.
#include <map>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "common/base/status_macros.h"
#include "model/config/config_parser.h"
#include "model/config/model_args_fields.h"
#include "model/config/validate.h"

namespace flashserve::model {
namespace {

using json = nlohmann::json;

enum class Section { kTop, kText, kRope, kVision, kQuant };

struct Renamed {
  absl::string_view args_name;
  Section section;
  absl::string_view hf_name;
};

// The §2b mapping for keys whose HF name or place differs from ModelArgs.
constexpr Renamed kRenamed[] = {
    {"dim", Section::kText, "hidden_size"},
    {"moe_inter_dim", Section::kText, "moe_intermediate_size"},
    {"n_layers", Section::kText, "num_hidden_layers"},
    {"n_mtp_layers", Section::kText, "num_nextn_predict_layers"},
    {"n_heads", Section::kText, "num_attention_heads"},
    {"n_activated_experts", Section::kText, "num_experts_per_tok"},
    {"score_func", Section::kText, "scoring_func"},
    {"route_scale", Section::kText, "routed_scaling_factor"},
    {"rope_head_dim", Section::kText, "qk_rope_head_dim"},
    {"norm_eps", Section::kText, "rms_norm_eps"},
    {"window_size", Section::kText, "sliding_window"},
    {"kv_source_layers", Section::kText, "kv_source_layer_ids"},
    {"index_source_layers", Section::kText, "index_source_layer_ids"},
    {"candidate_source_layer", Section::kText, "candidate_source_layer_id"},
    {"engram_pad_id", Section::kText, "engram_pad_token_id"},
    {"dspark_n_activated_experts", Section::kText, "dspark_num_experts_per_tok"},
    {"rope_factor", Section::kRope, "factor"},
    {"original_seq_len", Section::kRope, "original_max_position_embeddings"},
    {"beta_fast", Section::kRope, "beta_fast"},
    {"beta_slow", Section::kRope, "beta_slow"},
    {"vision_n_layers", Section::kVision, "num_hidden_layers"},
    {"vision_dim", Section::kVision, "hidden_size"},
    {"vision_n_heads", Section::kVision, "num_attention_heads"},
    {"vision_inter_dim", Section::kVision, "intermediate_size"},
    {"vision_patch_size", Section::kVision, "patch_size"},
    {"vision_rope_theta", Section::kVision, "rope_theta"},
    {"vision_downsample_ratio", Section::kVision, "downsample_ratio"},
    {"vision_max_n_token", Section::kVision, "max_image_tokens"},
    {"vision_min_pixels", Section::kVision, "min_pixels"},
    {"vision_max_wh_ratio", Section::kVision, "max_wh_ratio"},
    {"image_token_id", Section::kTop, "image_token_id"},
    {"expert_dtype", Section::kQuant, "expert_dtype"},
};

// ModelArgs keys with no HF counterpart: runtime limits keep their defaults; dtype is derived
// from quantization_config.quant_method.
constexpr absl::string_view kNotInHf[] = {"max_batch_size", "max_seq_len", "temperature", "dtype"};

// HF-only keys tolerated per section (their values are checked in CheckPinnedValues).
const std::set<std::string> kTolerated[] = {
    /*kTop=*/{"architectures", "model_type", "dtype", "torch_dtype", "bos_token_id", "eos_token_id",
              "pad_token_id", "tie_word_embeddings", "transformers_version", "use_cache",
              "text_config", "vision_config", "quantization_config"},
    /*kText=*/
    {"model_type", "num_key_value_heads", "hidden_act", "max_position_embeddings", "rope_scaling",
     "topk_method", "attention_bias", "attention_dropout", "initializer_range", "use_cache",
     "dtype", "torch_dtype", "bos_token_id", "eos_token_id", "pad_token_id", "tie_word_embeddings",
     "architectures", "transformers_version"},
    /*kRope=*/{"rope_type", "type"},
    /*kVision=*/
    {"model_type", "hidden_act", "num_channels", "initializer_range", "rms_norm_eps", "dtype",
     "torch_dtype", "transformers_version"},
    /*kQuant=*/{"quant_method", "activation_scheme", "weight_block_size", "scale_fmt"},
};

// HF keys read into the ModelArgs object, per section object.
using Consumed = std::map<const json*, std::set<std::string>>;

struct Sections {
  const json* top = nullptr;
  const json* text = nullptr;  // == top when the config has no text_config
  const json* rope = nullptr;
  const json* vision = nullptr;
  const json* quant = nullptr;  // nullptr: unquantised checkpoint

  const json* Get(Section s) const {
    const json* all[] = {top, text, rope, vision, quant};
    return all[static_cast<int>(s)];
  }
  std::string Prefix(Section s) const {
    switch (s) {
      case Section::kTop:
        return "";
      case Section::kText:
        return text == top ? "" : "text_config.";
      case Section::kRope:
        return text == top ? "rope_scaling." : "text_config.rope_scaling.";
      case Section::kVision:
        return "vision_config.";
      case Section::kQuant:
        return "quantization_config.";
    }
    return "";
  }
};

absl::StatusOr<const json*> SubObject(const json& parent, absl::string_view key,
                                      absl::string_view path, bool required) {
  auto it = parent.find(std::string(key));
  if (it == parent.end()) {
    if (!required) return nullptr;
    return absl::InvalidArgumentError(absl::StrCat("missing required config key '", path, "'"));
  }
  if (!it->is_object()) {
    return absl::InvalidArgumentError(
        absl::StrCat("config key '", path, "': expected an object, got ", it->type_name()));
  }
  return &*it;
}

// Checks an HF-only key whose value pins the architecture; absent keys pass.
absl::Status ExpectValue(const json* object, absl::string_view key, const json& expected,
                         absl::string_view path) {
  if (object == nullptr) return absl::OkStatus();
  auto it = object->find(std::string(key));
  if (it == object->end() || *it == expected) return absl::OkStatus();
  return absl::InvalidArgumentError(
      absl::StrCat("config key '", path, "': expected ", expected.dump(), ", got ", it->dump()));
}

absl::Status CheckPinnedValues(const Sections& s) {
  const std::string text = s.Prefix(Section::kText);
  if (s.text != s.top) {
    RETURN_IF_ERROR(ExpectValue(s.top, "model_type", "deepseek_v41", "model_type"));
    RETURN_IF_ERROR(ExpectValue(s.text, "model_type", "deepseek_v41_text", text + "model_type"));
  } else if (auto it = s.top->find("model_type");
             it != s.top->end() && *it != "deepseek_v41" && *it != "deepseek_v41_text") {
    return absl::InvalidArgumentError(
        absl::StrCat("config key 'model_type': expected \"deepseek_v41\", got ", it->dump()));
  }
  RETURN_IF_ERROR(
      ExpectValue(s.vision, "model_type", "deepseek_v41_vision", "vision_config.model_type"));
  RETURN_IF_ERROR(ExpectValue(s.text, "num_key_value_heads", 1, text + "num_key_value_heads"));
  const std::string rope = s.Prefix(Section::kRope);
  RETURN_IF_ERROR(ExpectValue(s.rope, "rope_type", "yarn", rope + "rope_type"));
  RETURN_IF_ERROR(ExpectValue(s.rope, "type", "yarn", rope + "type"));
  RETURN_IF_ERROR(ExpectValue(s.quant, "weight_block_size", json::array({32, 32}),
                              "quantization_config.weight_block_size"));
  RETURN_IF_ERROR(ExpectValue(s.quant, "scale_fmt", "ue8m0", "quantization_config.scale_fmt"));
  RETURN_IF_ERROR(ExpectValue(s.quant, "activation_scheme", "dynamic",
                              "quantization_config.activation_scheme"));
  return absl::OkStatus();
}

std::pair<Section, absl::string_view> Locate(absl::string_view args_name) {
  for (const Renamed& r : kRenamed) {
    if (r.args_name == args_name) return {r.section, r.hf_name};
  }
  return {Section::kText, args_name};  // keeps its name, lives in text_config
}

bool NotInHf(absl::string_view args_name) {
  for (absl::string_view n : kNotInHf) {
    if (n == args_name) return true;
  }
  return false;
}

// Validate() names ModelArgs keys; point HF users at the key they actually wrote.
absl::Status WithHfName(const absl::Status& status, const config_internal::DisplayNames& display) {
  const absl::string_view message = status.message();
  constexpr absl::string_view kPrefix = "config key '";
  const size_t start = message.find(kPrefix);
  if (start == absl::string_view::npos) return status;
  const size_t end = message.find('\'', start + kPrefix.size());
  if (end == absl::string_view::npos) return status;
  const absl::string_view key =
      message.substr(start + kPrefix.size(), end - start - kPrefix.size());
  for (const auto& [args_key, hf_key] : display) {
    if (args_key == key && hf_key != key) {
      return absl::Status(status.code(), absl::StrCat(message, " (HF key '", hf_key, "')"));
    }
  }
  return status;
}

// Every key of every section must be mapped (in `consumed`) or tolerated.
absl::Status CheckNoUnknownKeys(const Sections& s, Consumed& consumed) {
  for (Section section :
       {Section::kTop, Section::kText, Section::kRope, Section::kVision, Section::kQuant}) {
    const json* object = s.Get(section);
    if (object == nullptr || (section == Section::kText && s.text == s.top)) continue;
    for (const auto& [key, value] : object->items()) {
      const bool ok = consumed[object].count(key) > 0 ||
                      kTolerated[static_cast<int>(section)].count(key) > 0 ||
                      (s.text == s.top && section == Section::kTop &&
                       kTolerated[static_cast<int>(Section::kText)].count(key) > 0);
      if (!ok) {
        return absl::InvalidArgumentError(
            absl::StrCat("unknown config key '", s.Prefix(section), key, "' in the HF config"));
      }
    }
  }
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<ModelConfig> ParseHfConfig(std::string_view text) {
  ASSIGN_OR_RETURN(const json root, config_internal::ParseJsonObject(text, "HF config"));
  Sections s;
  s.top = &root;
  ASSIGN_OR_RETURN(s.text, SubObject(root, "text_config", "text_config", false));
  if (s.text == nullptr) s.text = &root;
  ASSIGN_OR_RETURN(
      s.rope, SubObject(*s.text, "rope_scaling", s.Prefix(Section::kText) + "rope_scaling", true));
  ASSIGN_OR_RETURN(s.vision, SubObject(root, "vision_config", "vision_config", true));
  ASSIGN_OR_RETURN(s.quant, SubObject(root, "quantization_config", "quantization_config", false));

  json args = json::object();
  config_internal::DisplayNames display;
  Consumed consumed;
  for (const config_internal::FieldSpec& field : config_internal::ModelArgsFields()) {
    if (NotInHf(field.name)) continue;
    auto [section, hf_name] = Locate(field.name);
    const json* object = s.Get(section);
    std::string path = s.Prefix(section) + std::string(hf_name);
    if (field.name == "image_token_id" && !root.contains("image_token_id") &&
        s.text->contains("image_token_id")) {
      object = s.text;  // tolerated fallback: the id stated only in text_config
      path = s.Prefix(Section::kText) + "image_token_id";
    }
    display.emplace_back(std::string(field.name), path);
    if (object == nullptr) {
      if (field.name == "expert_dtype") args["expert_dtype"] = nullptr;  // unquantised
      continue;
    }
    if (auto it = object->find(std::string(hf_name)); it != object->end()) {
      args[std::string(field.name)] = *it;
      consumed[object].insert(std::string(hf_name));
    } else if (field.name == "expert_dtype") {
      args["expert_dtype"] = nullptr;  // experts stored like the other weights
    }
  }
  if (s.text != s.top && root.contains("image_token_id") && s.text->contains("image_token_id")) {
    if (root["image_token_id"] != (*s.text)["image_token_id"]) {
      return absl::InvalidArgumentError(
          "config keys 'image_token_id' and 'text_config.image_token_id' disagree");
    }
    consumed[s.text].insert("image_token_id");
  }

  // dtype: quantization_config.quant_method "fp8" -> fp8 weights; no quantization_config -> bf16.
  display.emplace_back("dtype", "quantization_config.quant_method");
  if (s.quant == nullptr) {
    args["dtype"] = "bf16";
  } else {
    auto it = s.quant->find("quant_method");
    if (it == s.quant->end()) {
      return absl::InvalidArgumentError(
          "missing required config key 'quantization_config.quant_method'");
    }
    if (*it != "fp8") {
      return absl::InvalidArgumentError(absl::StrCat(
          "config key 'quantization_config.quant_method': expected \"fp8\", got ", it->dump()));
    }
    args["dtype"] = "fp8";
  }

  RETURN_IF_ERROR(CheckNoUnknownKeys(s, consumed));
  RETURN_IF_ERROR(CheckPinnedValues(s)) << "in the HF config";
  ASSIGN_OR_RETURN(ModelConfig config, config_internal::ConfigFromArgsObject(args, display),
                   "in the HF config");
  RETURN_IF_ERROR(WithHfName(Validate(config), display)) << "in the HF config";
  return config;
}

}  // namespace flashserve::model
