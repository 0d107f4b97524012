// StreamDecoder: incremental detokenization for streaming output. Fed one id at a time, it
// appends only complete UTF-8 characters (bytes of a character split across tokens wait for the
// rest), so every chunk is valid UTF-8; invalid bytes become U+FFFD as soon as they are known to
// be invalid. The concatenation of all chunks plus Flush() equals Tokenizer::Decode of the same
// ids; the per-step chunks equal CPython's incremental UTF-8 decoder with errors="replace"
// (including its wait on a truncated surrogate ED A0..BF at the end of the input).
//
// Cost: O(bytes of the id); no allocation besides appending to `out`.
// Thread safety: one decoder per stream; not safe for concurrent use. The Tokenizer must
// outlive the decoder.
#pragma once

#include <cstdint>
#include <string>

#include "absl/status/status.h"
#include "model/tokenizer/tokenizer.h"

namespace flashserve::tokenizer {

class StreamDecoder {
 public:
  // With `skip_special`, special added tokens produce no bytes (as Decode with skip_special).
  explicit StreamDecoder(const Tokenizer* tokenizer, bool skip_special = false)
      : tokenizer_(tokenizer), skip_special_(skip_special) {}

  // Appends the text completed by `id` (possibly nothing) to *out. Errors: InvalidArgument for
  // an id with no token; the decoder's state is then unchanged.
  absl::Status Next(TokenId id, std::string* out);

  // Appends U+FFFD for an incomplete character still pending (the stream ended inside it) and
  // resets the decoder for a new stream.
  void Flush(std::string* out);

  // Drops pending bytes without output.
  void Reset() { pending_length_ = 0; }

  // Bytes of an incomplete character waiting for the next id (0..3).
  size_t pending_bytes() const { return pending_length_; }

 private:
  // Decodes pending_ + bytes; keeps a trailing incomplete character pending unless `final`.
  void Consume(std::string_view bytes, bool final, std::string* out);

  const Tokenizer* tokenizer_;
  bool skip_special_;
  uint8_t pending_[4] = {0, 0, 0, 0};
  uint32_t pending_length_ = 0;
};

}  // namespace flashserve::tokenizer
