// Tokenizer: decoding, token accessors, and the streaming decoder.
#include <algorithm>
#include <string>

#include "absl/strings/str_cat.h"
#include "common/base/strings.h"
#include "model/tokenizer/stream_decoder.h"
#include "model/tokenizer/tokenizer.h"
#include "model/tokenizer/utf8.h"

namespace flashserve::tokenizer {
namespace {

absl::Status UnknownId(TokenId id, size_t vocab_size) {
  return absl::InvalidArgumentError(
      absl::StrCat("token id ", id, " has no token (vocabulary size ", vocab_size, ")"));
}

}  // namespace

absl::StatusOr<std::string> Tokenizer::Decode(absl::Span<const TokenId> ids,
                                              bool skip_special) const {
  std::string text;
  absl::Status status = DecodeAppend(ids, skip_special, &text);
  if (!status.ok()) return status;
  return text;
}

absl::Status Tokenizer::DecodeAppend(absl::Span<const TokenId> ids, bool skip_special,
                                     std::string* out) const {
  for (TokenId id : ids) {
    if (!IsValid(id)) return UnknownId(id, VocabSize());
  }
  const size_t start = out->size();
  for (TokenId id : ids) {
    if (skip_special && (flags_[id] & kSpecial)) continue;
    out->append(RawBytes(id));
  }
  // Bytes of one character may come from several tokens, so validity is a property of the
  // whole concatenation; repair (rare) costs one temporary string.
  const std::string_view appended = std::string_view(*out).substr(start);
  if (!IsValidUtf8(appended)) {
    std::string repaired;
    repaired.reserve(appended.size() + 8);
    AppendLossyUtf8(appended, &repaired);
    out->resize(start);
    out->append(repaired);
  }
  return absl::OkStatus();
}

absl::StatusOr<std::string_view> Tokenizer::TokenBytes(TokenId id) const {
  if (!IsValid(id)) return UnknownId(id, VocabSize());
  return RawBytes(id);
}

absl::StatusOr<std::string_view> Tokenizer::IdToToken(TokenId id) const {
  if (!IsValid(id)) return UnknownId(id, VocabSize());
  return std::string_view(id_to_token_[id]);
}

std::optional<TokenId> Tokenizer::TokenToId(std::string_view token) const {
  auto it = token_to_id_.find(ToAbsl(token));
  if (it == token_to_id_.end()) return std::nullopt;
  return it->second;
}

absl::Status StreamDecoder::Next(TokenId id, std::string* out) {
  if (!tokenizer_->IsValid(id)) return UnknownId(id, tokenizer_->VocabSize());
  if (skip_special_ && tokenizer_->IsSpecial(id)) return absl::OkStatus();
  Consume(tokenizer_->RawBytes(id), /*final=*/false, out);
  return absl::OkStatus();
}

void StreamDecoder::Flush(std::string* out) {
  Consume({}, /*final=*/true, out);
  pending_length_ = 0;
}

void StreamDecoder::Consume(std::string_view bytes, bool final, std::string* out) {
  const auto* data = reinterpret_cast<const uint8_t*>(bytes.data());
  const size_t total = pending_length_ + bytes.size();
  // Logical input = pending_ followed by `bytes`; a character starting in pending_ is examined
  // through a 4-byte window so nothing is copied into a growing buffer.
  size_t i = 0;
  while (i < total) {
    uint8_t window[4];
    const uint8_t* p;
    size_t available = total - i;
    if (i < pending_length_) {
      const size_t n = std::min<size_t>(4, available);
      for (size_t k = 0; k < n; ++k) {
        const size_t at = i + k;
        window[k] = at < pending_length_ ? pending_[at] : data[at - pending_length_];
      }
      p = window;
      available = n;
    } else {
      // Inside `bytes`: append the run of complete characters in one go.
      p = data + (i - pending_length_);
      size_t run = 0;
      while (run < available) {
        if (p[run] < 0x80) {
          ++run;
          continue;
        }
        const Utf8Step step = ExamineUtf8(p + run, available - run);
        if (step.kind != Utf8Step::kValid) break;
        run += step.length;
      }
      out->append(reinterpret_cast<const char*>(p), run);
      i += run;
      if (i == total) break;
      p += run;
      available -= run;
    }
    const Utf8Step step = ExamineUtf8(p, available);
    if (step.kind == Utf8Step::kValid) {
      out->append(reinterpret_cast<const char*>(p), step.length);
      i += step.length;
      continue;
    }
    const bool at_end = step.kind == Utf8Step::kTruncated;  // it runs to the end of the input
    // CPython keeps ED A0..BF at the end of the input pending rather than rejecting it.
    const bool truncated_surrogate = step.kind == Utf8Step::kInvalid && total - i == 2 &&
                                     p[0] == 0xED && p[1] >= 0xA0 && p[1] <= 0xBF;
    if (!final && (at_end || truncated_surrogate)) {
      const size_t n = total - i;  // <= 3, and p holds them (window or `bytes`)
      uint8_t keep[4];
      std::copy(p, p + n, keep);
      std::copy(keep, keep + n, pending_);
      pending_length_ = static_cast<uint32_t>(n);
      return;
    }
    out->append(kReplacementUtf8);
    i += step.length;
  }
  pending_length_ = 0;
}

}  // namespace flashserve::tokenizer
