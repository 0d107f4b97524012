// Parsers for the two config formats of DeepSeek-V4.1 checkpoints (spec §2a, §2b), and the
// canonical writer of the flat format.
//
// All functions are pure (no shared state) and thread-safe; they never throw. Every error is
// absl::InvalidArgumentError (bad content) or NotFound / FailedPrecondition (LoadModelConfig's
// file access), and its message names the offending key as written in the input.
#pragma once

#include <string>
#include <string_view>

#include "absl/status/statusor.h"
#include "model/config/model_config.h"

namespace flashserve::model {

// Parses the flat inference config.json (keys = ModelArgs field names), then runs Validate().
// Strict: an unknown key, a missing required key (every key except max_batch_size, max_seq_len,
// temperature, gate_temp and norm_topk_prob, which take their ModelArgs defaults), a value of the
// wrong JSON type (integers must be JSON integers; floats accept any number) or a duplicate key
// is an error naming the key. Cost: linear in the text.
absl::StatusOr<ModelConfig> ParseFlatConfig(std::string_view json);

// Parses the HF nested config.json, then runs Validate(). Layout: top level (image_token_id,
// quantization_config, text_config, vision_config, HF bookkeeping), text_config (the text-model
// keys under their HF names; when text_config is absent they are read from the top level),
// text_config.rope_scaling (factor, original_max_position_embeddings, beta_fast, beta_slow),
// vision_config (vision_* keys under HF names), quantization_config (quant_method -> dtype,
// expert_dtype). The §2b name mapping applies; keys that keep their ModelArgs name are read under
// that name. HF-only keys are tolerated (num_key_value_heads, hidden_act, max_position_embeddings,
// rope_scaling.rope_type, topk_method, attention_bias, architectures, model_type, dtype /
// torch_dtype, bos/eos/pad_token_id, tie_word_embeddings, transformers_version, ...), and the few
// whose value pins the architecture are checked (num_key_value_heads 1, rope_type "yarn",
// quant_method "fp8", weight_block_size [32,32], scale_fmt "ue8m0"). Any other key is an error
// naming it with its path (e.g. "text_config.foo"). Missing required keys are named by their HF
// path. max_batch_size / max_seq_len / temperature are not HF keys and keep their defaults.
absl::StatusOr<ModelConfig> ParseHfConfig(std::string_view json);

// The two formats.
enum class ConfigFormat { kFlat, kHf };

// Which format `json` is: HF when the top-level object has "text_config", "architectures" or
// "model_type"; flat otherwise. Errors: the text is not a JSON object.
absl::StatusOr<ConfigFormat> DetectConfigFormat(std::string_view json);

// Reads `path` (a config file, or a checkpoint directory holding config.json), detects the
// format and parses it with the matching parser. Errors: NotFound (no such file / no config.json
// in the directory), FailedPrecondition (unreadable), and the parsers' errors, prefixed with the
// path.
absl::StatusOr<ModelConfig> LoadModelConfig(const std::string& path);

// Canonical flat config.json text for `config`: every ModelArgs key (including the optional
// ones), in ModelArgs order, 1-space indentation. ParseFlatConfig(ToFlatConfigJson(c)) == c for
// any valid c; the text is stable, so it can feed a model fingerprint.
std::string ToFlatConfigJson(const ModelConfig& config);

}  // namespace flashserve::model
