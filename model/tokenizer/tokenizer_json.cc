// tokenizer.json / tokenizer_config.json -> TokenizerSpec. nlohmann stays inside this file.
#include <exception>
#include <string>

#include "absl/strings/str_cat.h"
#include "common/base/status_macros.h"
#include "common/base/strings.h"
#include "model/tokenizer/pre_tokenizer.h"
#include "model/tokenizer/tokenizer_spec.h"
#include "nlohmann/json.hpp"

namespace flashserve::tokenizer {
namespace {

using json = nlohmann::json;

// Error helper carrying the file name: Error("model.vocab", "missing") ->
// "tokenizer.json: model.vocab: missing".
class Errors {
 public:
  explicit Errors(std::string_view file) : file_(file) {}
  absl::Status operator()(std::string_view key, std::string_view message) const {
    return absl::InvalidArgumentError(
        absl::StrCat(file_, ": ", ToAbsl(key), ": ", ToAbsl(message)));
  }

 private:
  std::string file_;
};

absl::StatusOr<json> Parse(std::string_view text, const Errors& err) {
  try {
    json parsed = json::parse(text.begin(), text.end());
    if (!parsed.is_object()) return err("(top level)", "expected a JSON object");
    return parsed;
  } catch (const std::exception& e) {
    return err("(document)", absl::StrCat("invalid JSON: ", e.what()));
  }
}

// Reads an optional boolean; absent or null gives `fallback`.
absl::StatusOr<bool> OptionalBool(const json& object, const char* name, bool fallback,
                                  std::string_view path, const Errors& err) {
  auto it = object.find(name);
  if (it == object.end() || it->is_null()) return fallback;
  if (!it->is_boolean()) return err(absl::StrCat(ToAbsl(path), ".", name), "expected a boolean");
  return it->get<bool>();
}

bool IsAbsentOrNull(const json& object, const char* name) {
  auto it = object.find(name);
  return it == object.end() || it->is_null();
}

std::string TypeOf(const json& object) {
  auto it = object.find("type");
  return it != object.end() && it->is_string() ? it->get<std::string>() : std::string();
}

absl::Status ParseModel(const json& root, const Errors& err, TokenizerSpec* spec) {
  auto it = root.find("model");
  if (it == root.end() || !it->is_object()) return err("model", "missing or not an object");
  const json& model = *it;
  if (model.contains("type") && TypeOf(model) != "BPE") {
    return err("model.type", "only \"BPE\" is supported");
  }
  auto vocab = model.find("vocab");
  if (vocab == model.end() || !vocab->is_object()) {
    return err("model.vocab", "missing or not an object of token -> id");
  }
  spec->vocab.reserve(vocab->size());
  for (auto entry = vocab->begin(); entry != vocab->end(); ++entry) {
    const json& id = entry.value();
    if (!id.is_number_integer() || id.get<int64_t>() < 0 || id.get<int64_t>() > INT32_MAX) {
      return err(absl::StrCat("model.vocab[\"", entry.key(), "\"]"),
                 "expected a non-negative integer id");
    }
    spec->vocab.emplace_back(entry.key(), static_cast<TokenId>(id.get<int64_t>()));
  }
  auto merges = model.find("merges");
  if (merges == model.end() || !merges->is_array())
    return err("model.merges", "missing or not an array");
  spec->merges.reserve(merges->size());
  for (size_t i = 0; i < merges->size(); ++i) {
    const json& m = (*merges)[i];
    const std::string key = absl::StrCat("model.merges[", i, "]");
    if (m.is_array() && m.size() == 2 && m[0].is_string() && m[1].is_string()) {
      spec->merges.emplace_back(m[0].get<std::string>(), m[1].get<std::string>());
    } else if (m.is_string()) {
      // The older "a b" form: exactly one space (byte-level tokens never contain a space).
      const std::string s = m.get<std::string>();
      const size_t space = s.find(' ');
      if (space == std::string::npos || space == 0 || space + 1 == s.size() ||
          s.find(' ', space + 1) != std::string::npos) {
        return err(key, absl::StrCat("expected \"left right\" with one space, got \"", s, "\""));
      }
      spec->merges.emplace_back(s.substr(0, space), s.substr(space + 1));
    } else {
      return err(key, "expected a [left, right] pair of strings or a \"left right\" string");
    }
  }
  ASSIGN_OR_RETURN(spec->ignore_merges, OptionalBool(model, "ignore_merges", false, "model", err));
  ASSIGN_OR_RETURN(bool byte_fallback, OptionalBool(model, "byte_fallback", false, "model", err));
  if (byte_fallback) return err("model.byte_fallback", "true is not supported");
  for (const char* name : {"dropout", "continuing_subword_prefix", "end_of_word_suffix"}) {
    if (!IsAbsentOrNull(model, name)) {
      return err(absl::StrCat("model.", name), "only null is supported");
    }
  }
  return absl::OkStatus();
}

absl::Status ParseAddedTokens(const json& root, const Errors& err, TokenizerSpec* spec) {
  auto it = root.find("added_tokens");
  if (it == root.end() || it->is_null()) return absl::OkStatus();
  if (!it->is_array()) return err("added_tokens", "expected an array");
  for (size_t i = 0; i < it->size(); ++i) {
    const json& t = (*it)[i];
    const std::string key = absl::StrCat("added_tokens[", i, "]");
    if (!t.is_object()) return err(key, "expected an object");
    auto id = t.find("id");
    if (id == t.end() || !id->is_number_integer() || id->get<int64_t>() < 0 ||
        id->get<int64_t>() > INT32_MAX) {
      return err(key + ".id", "missing or not a non-negative integer");
    }
    auto content = t.find("content");
    if (content == t.end() || !content->is_string() || content->get<std::string>().empty()) {
      return err(key + ".content", "missing, not a string, or empty");
    }
    AddedTokenSpec token;
    token.id = static_cast<TokenId>(id->get<int64_t>());
    token.content = content->get<std::string>();
    ASSIGN_OR_RETURN(token.special, OptionalBool(t, "special", false, key, err));
    // Files written by `tokenizers` carry every flag; when one is absent we use the defaults of
    // its AddedToken struct (normalized true, the rest false).
    ASSIGN_OR_RETURN(token.normalized, OptionalBool(t, "normalized", true, key, err));
    for (const char* flag : {"lstrip", "rstrip", "single_word"}) {
      ASSIGN_OR_RETURN(bool set, OptionalBool(t, flag, false, key, err));
      if (set) return err(absl::StrCat(key, ".", flag), "true is not supported");
    }
    spec->added_tokens.push_back(std::move(token));
  }
  return absl::OkStatus();
}

absl::Status ParseByteLevel(const json& step, std::string_view key, const Errors& err,
                            TokenizerSpec* spec) {
  ASSIGN_OR_RETURN(bool prefix, OptionalBool(step, "add_prefix_space", false, key, err));
  if (prefix) return err(absl::StrCat(ToAbsl(key), ".add_prefix_space"), "true is not supported");
  ASSIGN_OR_RETURN(bool use_regex, OptionalBool(step, "use_regex", true, key, err));
  if (use_regex) spec->split_patterns.emplace_back(kGpt2SplitPattern);
  return absl::OkStatus();
}

absl::Status ParseSplit(const json& step, const std::string& key, const Errors& err,
                        TokenizerSpec* spec) {
  auto pattern = step.find("pattern");
  if (pattern == step.end() || !pattern->is_object() || !pattern->contains("Regex") ||
      !(*pattern)["Regex"].is_string()) {
    return err(key + ".pattern",
               "expected {\"Regex\": \"...\"} (String patterns are not supported)");
  }
  auto behavior = step.find("behavior");
  if (behavior == step.end() || *behavior != "Isolated") {
    return err(key + ".behavior", "only \"Isolated\" is supported");
  }
  ASSIGN_OR_RETURN(bool invert, OptionalBool(step, "invert", false, key, err));
  if (invert) return err(key + ".invert", "true is not supported");
  spec->split_patterns.push_back((*pattern)["Regex"].get<std::string>());
  return absl::OkStatus();
}

absl::Status ParsePipeline(const json& root, const Errors& err, TokenizerSpec* spec) {
  for (const char* name : {"truncation", "padding"}) {
    if (!IsAbsentOrNull(root, name)) return err(name, "only null is supported");
  }
  if (!IsAbsentOrNull(root, "normalizer")) {
    const json& n = root["normalizer"];
    const bool empty_sequence = TypeOf(n) == "Sequence" && n.contains("normalizers") &&
                                n["normalizers"].is_array() && n["normalizers"].empty();
    if (!empty_sequence) return err("normalizer", "only null or an empty Sequence is supported");
  }
  if (IsAbsentOrNull(root, "pre_tokenizer")) return err("pre_tokenizer", "missing");
  const json& pre = root["pre_tokenizer"];
  if (TypeOf(pre) == "ByteLevel") {
    RETURN_IF_ERROR(ParseByteLevel(pre, "pre_tokenizer", err, spec));
  } else if (TypeOf(pre) == "Sequence" && pre.contains("pretokenizers") &&
             pre["pretokenizers"].is_array() && !pre["pretokenizers"].empty()) {
    const json& steps = pre["pretokenizers"];
    for (size_t i = 0; i < steps.size(); ++i) {
      const std::string key = absl::StrCat("pre_tokenizer.pretokenizers[", i, "]");
      const bool last = i + 1 == steps.size();
      const std::string type = TypeOf(steps[i]);
      if (type == "Split" && !last) {
        RETURN_IF_ERROR(ParseSplit(steps[i], key, err, spec));
      } else if (type == "ByteLevel" && last) {
        RETURN_IF_ERROR(ParseByteLevel(steps[i], key, err, spec));
      } else {
        return err(key, "expected Split steps followed by one final ByteLevel step");
      }
    }
  } else {
    return err("pre_tokenizer", "expected ByteLevel or a Sequence of Split steps then ByteLevel");
  }
  if (!IsAbsentOrNull(root, "post_processor")) {
    const json& post = root["post_processor"];
    if (TypeOf(post) != "ByteLevel") {
      return err("post_processor", "only null or ByteLevel is supported");
    }
    ASSIGN_OR_RETURN(spec->trims_offsets,
                     OptionalBool(post, "trim_offsets", true, "post_processor", err));
  }
  if (IsAbsentOrNull(root, "decoder") || TypeOf(root["decoder"]) != "ByteLevel") {
    return err("decoder", "only ByteLevel is supported");
  }
  return absl::OkStatus();
}

absl::StatusOr<std::string> TokenName(const json& config, const char* name, const Errors& err) {
  auto it = config.find(name);
  if (it == config.end() || it->is_null()) return std::string();
  if (it->is_string()) return it->get<std::string>();
  if (it->is_object() && it->contains("content") && (*it)["content"].is_string()) {
    return (*it)["content"].get<std::string>();
  }
  return err(name, "expected a string, an object with \"content\", or null");
}

}  // namespace

absl::StatusOr<TokenizerSpec> ParseTokenizerJson(std::string_view json_text,
                                                 std::string_view file) {
  const Errors err(file);
  ASSIGN_OR_RETURN(json root, Parse(json_text, err));
  TokenizerSpec spec;
  RETURN_IF_ERROR(ParseModel(root, err, &spec));
  RETURN_IF_ERROR(ParseAddedTokens(root, err, &spec));
  RETURN_IF_ERROR(ParsePipeline(root, err, &spec));
  return spec;
}

absl::Status ParseTokenizerConfig(std::string_view json_text, std::string_view file,
                                  TokenizerSpec* spec) {
  const Errors err(file);
  ASSIGN_OR_RETURN(json config, Parse(json_text, err));
  ASSIGN_OR_RETURN(spec->bos_token, TokenName(config, "bos_token", err));
  ASSIGN_OR_RETURN(spec->eos_token, TokenName(config, "eos_token", err));
  ASSIGN_OR_RETURN(spec->pad_token, TokenName(config, "pad_token", err));
  return absl::OkStatus();
}

}  // namespace flashserve::tokenizer
