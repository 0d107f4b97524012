// Tokenizer: encoding (added tokens, pre-tokenizer, BPE) and offsets.
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "common/base/status_macros.h"
#include "model/tokenizer/tokenizer.h"
#include "model/tokenizer/utf8.h"

namespace flashserve::tokenizer {
namespace {

absl::Status CheckText(std::string_view text) {
  if (text.size() >= (size_t{1} << 32)) {
    return absl::InvalidArgumentError(
        absl::StrCat("text of ", text.size(), " bytes is too long (limit 4 GiB)"));
  }
  size_t bad = 0;
  if (!IsValidUtf8(text, &bad)) {
    return absl::InvalidArgumentError(
        absl::StrCat("text is not valid UTF-8 (byte offset ", bad, ")"));
  }
  return absl::OkStatus();
}

bool IsContinuationByte(char c) { return (static_cast<uint8_t>(c) & 0xC0) == 0x80; }

}  // namespace

void Tokenizer::SplitAddedTokens(std::string_view text, const EncodeOptions& options,
                                 std::vector<Segment>* out) const {
  const Span whole{0, static_cast<uint32_t>(text.size())};
  if (text.empty()) return;
  if (options.no_added) {
    out->push_back({whole, -1});
    return;
  }
  // As `tokenizers`: non-normalized added tokens are cut out of the raw text, then normalized
  // ones out of each remaining stretch. A special match skipped by split_special still consumes
  // its text within its pass (the matcher's non-overlapping scan has passed it).
  std::vector<AddedTokenMatcher::Match> matches;
  auto cut = [&](const AddedTokenMatcher& matcher, Span range, std::vector<Segment>* segments) {
    matches.clear();
    matcher.FindAll(text, range, &matches);
    uint32_t pos = range.begin;
    for (const AddedTokenMatcher::Match& m : matches) {
      if (options.split_special && m.special) continue;
      if (m.span.begin > pos) segments->push_back({{pos, m.span.begin}, -1});
      segments->push_back({m.span, m.id});
      pos = m.span.end;
    }
    if (range.end > pos) segments->push_back({{pos, range.end}, -1});
  };
  std::vector<Segment> first;
  cut(non_normalized_added_, whole, &first);
  for (const Segment& s : first) {
    if (s.added_id >= 0) {
      out->push_back(s);
    } else {
      cut(normalized_added_, s.span, out);
    }
  }
}

absl::Status Tokenizer::EncodeImpl(std::string_view text, const EncodeOptions& options,
                                   std::vector<TokenId>* ids, std::vector<Span>* byte_spans) const {
  RETURN_IF_ERROR(CheckText(text));
  std::vector<Segment> segments;
  SplitAddedTokens(text, options, &segments);
  PreTokenizerScratch pre_scratch;
  BpeScratch bpe_scratch;
  std::vector<Span> pieces;
  ids->reserve(text.size() / 3 + 4);
  for (const Segment& segment : segments) {
    if (segment.added_id >= 0) {
      ids->push_back(segment.added_id);
      if (byte_spans != nullptr) byte_spans->push_back(segment.span);
      continue;
    }
    pieces.clear();
    RETURN_IF_ERROR(pre_tokenizer_.Split(text, segment.span, &pre_scratch, &pieces));
    for (const Span& piece : pieces) {
      const size_t first = ids->size();
      bpe_->Encode(text.substr(piece.begin, piece.end - piece.begin), &bpe_scratch, ids);
      if (byte_spans == nullptr) continue;
      uint32_t cursor = piece.begin;
      for (size_t k = first; k < ids->size(); ++k) {
        const auto length = static_cast<uint32_t>(RawBytes((*ids)[k]).size());
        byte_spans->push_back({cursor, cursor + length});
        cursor += length;
      }
    }
  }
  return absl::OkStatus();
}

absl::StatusOr<std::vector<TokenId>> Tokenizer::Encode(std::string_view text,
                                                       const EncodeOptions& options) const {
  std::vector<TokenId> ids;
  RETURN_IF_ERROR(EncodeImpl(text, options, &ids, nullptr));
  return ids;
}

absl::StatusOr<Encoding> Tokenizer::EncodeWithOffsets(std::string_view text,
                                                      const EncodeOptions& options) const {
  if (trims_offsets_) {
    return absl::FailedPreconditionError(
        "offsets: the post_processor trims offsets (trim_offsets true), which is not "
        "implemented; ids are available through Encode");
  }
  Encoding encoding;
  RETURN_IF_ERROR(EncodeImpl(text, options, &encoding.ids, &encoding.byte_offsets));
  // Code-point index of every byte position that starts a character, and of the end (the
  // entries of continuation bytes are never read: spans are widened to whole characters).
  std::vector<uint32_t> char_index(text.size() + 1, 0);
  uint32_t count = 0;
  for (size_t i = 0; i < text.size(); ++i) {
    if (!IsContinuationByte(text[i])) char_index[i] = count++;
  }
  char_index[text.size()] = count;
  encoding.char_offsets.reserve(encoding.byte_offsets.size());
  for (Span& span : encoding.byte_offsets) {
    while (span.begin > 0 && IsContinuationByte(text[span.begin])) --span.begin;
    while (span.end < text.size() && IsContinuationByte(text[span.end])) ++span.end;
    encoding.char_offsets.push_back({char_index[span.begin], char_index[span.end]});
  }
  return encoding;
}

absl::StatusOr<std::vector<Span>> Tokenizer::PreTokenize(std::string_view text) const {
  RETURN_IF_ERROR(CheckText(text));
  std::vector<Span> pieces;
  PreTokenizerScratch scratch;
  RETURN_IF_ERROR(
      pre_tokenizer_.Split(text, {0, static_cast<uint32_t>(text.size())}, &scratch, &pieces));
  return pieces;
}

}  // namespace flashserve::tokenizer
