// TokenizerSpec: what tokenizer.json (+ tokenizer_config.json) says, checked for shape and for
// the configurations this reader implements, before any table is built. Internal to
// fs_model_tokenizer; Tokenizer::FromJson is the public entry point.
#pragma once

#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "model/tokenizer/tokenizer_types.h"

namespace flashserve::tokenizer {

struct AddedTokenSpec {
  TokenId id = 0;
  std::string content;
  bool special = false;
  bool normalized = false;  // matched after the non-normalized tokens (a second pass)
};

struct TokenizerSpec {
  std::vector<std::pair<std::string, TokenId>> vocab;       // model.vocab
  std::vector<std::pair<std::string, std::string>> merges;  // model.merges, in rank order
  bool ignore_merges = false;
  std::vector<AddedTokenSpec> added_tokens;
  // Oniguruma patterns of the pre-tokenizer's Isolated splits, in order (ByteLevel's GPT-2
  // pattern appended when it has use_regex).
  std::vector<std::string> split_patterns;
  // post_processor ByteLevel with trim_offsets: ids are unaffected but the reference trims
  // spaces from offsets, which this reader does not reproduce.
  bool trims_offsets = false;
  // Token contents named by tokenizer_config.json; empty when absent.
  std::string bos_token;
  std::string eos_token;
  std::string pad_token;
};

// Parses tokenizer.json text. `file` names the source in error messages ("<file>: <key>: ...").
// Errors: InvalidArgument for malformed JSON, missing or mistyped keys, and configurations this
// reader does not implement (each naming the key).
absl::StatusOr<TokenizerSpec> ParseTokenizerJson(std::string_view json_text, std::string_view file);

// Reads bos_token / eos_token / pad_token (a string, an AddedToken object with "content", or
// null) from tokenizer_config.json text into *spec. Errors: InvalidArgument naming the key.
absl::Status ParseTokenizerConfig(std::string_view json_text, std::string_view file,
                                  TokenizerSpec* spec);

}  // namespace flashserve::tokenizer
