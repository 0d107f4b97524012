// The compressed token map of Engram (spec §4.8; the reference's build_compressed_token_map):
// every tokenizer id maps to a class id, and ids whose decoded text normalises to the same key
// share a class, so " The", "the" and "THE" hash alike.
//
//   ASSIGN_OR_RETURN(CompressedTokenMap map,
//                    BuildCompressedTokenMap(vocab_size, decode_one, raw_token));
//
// Independent of the tokenizer target: the caller hands in the two tokenizer look-ups.
// All functions are pure and thread-safe (ICU normalizer singletons are thread-safe).
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "absl/functional/function_ref.h"
#include "absl/status/statusor.h"

namespace flashserve::model::engram {

struct CompressedTokenMap {
  std::vector<int32_t> class_of;  // [tokenizer id] -> compressed class id, 0..num_classes-1
  int32_t num_classes = 0;        // classes, numbered in first-seen order over ids 0..vocab-1
};

// The reference's tokenizers normalizer pipeline on UTF-8 `text`: NFKC, NFD, strip every
// General_Category=Mark code point (Mn, Mc, Me — what tokenizers' StripAccents removes),
// per-code-point full lowercase without context (Rust char::to_lowercase: no final-sigma rule,
// so 'Σ' -> 'σ' even word-finally), collapse runs of [ \t\r\n] to one space, then strip White_Space
// at both ends — except that a string which is exactly " " stays " ". May return "".
// Errors: InvalidArgument when `text` is not valid UTF-8; Internal for an ICU failure.
absl::StatusOr<std::string> NormalizeTokenText(std::string_view text);

// Returns the text or raw token string of one tokenizer id.
using TokenTextFn = absl::FunctionRef<absl::StatusOr<std::string>(int32_t id)>;

// Builds the map over ids 0..vocab_size-1 (added tokens included). For each id: text =
// decode(id) (the tokenizer's decode of that single id, special tokens kept). If text contains
// U+FFFD (a partial UTF-8 byte token) or is not valid UTF-8, the key is raw_token(id) (the
// vocabulary string); otherwise the key is NormalizeTokenText(text), or text itself when that is
// empty. All keys share one space. An id with no token (a hole) should decode to "", as the
// reference's decode skips it. Errors: InvalidArgument for vocab_size < 1; any error of the
// callbacks, annotated with the id. Cost: vocab_size decodes and normalisations.
absl::StatusOr<CompressedTokenMap> BuildCompressedTokenMap(int32_t vocab_size, TokenTextFn decode,
                                                           TokenTextFn raw_token);

}  // namespace flashserve::model::engram
