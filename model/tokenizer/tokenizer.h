// Tokenizer: a reader of Hugging Face `tokenizer.json` for DeepSeek's byte-level BPE, giving the
// same ids, offsets and decoded text as the `tokenizers` library for the configurations it
// accepts (see README.md): added tokens cut out first (leftmost, longest), each remaining segment
// split by the pre-tokenizer's regexes (Isolated), byte-level BPE by merge rank, ByteLevel
// decoding with invalid UTF-8 replaced by U+FFFD per maximal subpart.
//
// Thread safety: a loaded Tokenizer is immutable (its BPE piece cache is thread-local);
// every const method may be called from any number of threads at once.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/types/span.h"
#include "model/tokenizer/added_tokens.h"
#include "model/tokenizer/bpe.h"
#include "model/tokenizer/pre_tokenizer.h"
#include "model/tokenizer/tokenizer_spec.h"
#include "model/tokenizer/tokenizer_types.h"

namespace flashserve::tokenizer {

struct EncodeOptions {
  // Special added tokens are encoded as plain text; non-special added tokens are still matched
  // (`tokenizers`' encode_special_tokens = True).
  bool split_special = false;
  // No added-token matching at all: the whole text goes through the pre-tokenizer and BPE (for
  // user text that must never produce control tokens).
  bool no_added = false;
};

struct Encoding {
  std::vector<TokenId> ids;
  // Per token, [begin, end) in UTF-8 bytes of the input; a token holding part of a multi-byte
  // character covers the whole character.
  std::vector<Span> byte_offsets;
  // The same spans in code points of the input.
  std::vector<Span> char_offsets;
};

struct SpecialTokenIds {
  std::optional<TokenId> bos;
  std::optional<TokenId> eos;
  std::optional<TokenId> pad;
};

class Tokenizer {
 public:
  // Loads `path`: a directory holding tokenizer.json (and optionally tokenizer_config.json), or
  // the tokenizer.json file itself (a tokenizer_config.json beside it is read when present).
  // Errors: NotFound / Internal for unreadable files; InvalidArgument naming the file and key
  // for malformed or unsupported content.
  static absl::StatusOr<std::unique_ptr<Tokenizer>> Load(const std::string& path);

  // Builds from file contents. `config_json` may be empty (no tokenizer_config.json);
  // `source` names tokenizer.json in error messages. Errors: as Load.
  static absl::StatusOr<std::unique_ptr<Tokenizer>> FromJson(
      std::string_view tokenizer_json, std::string_view config_json = {},
      std::string_view source = "tokenizer.json");

  Tokenizer(const Tokenizer&) = delete;
  Tokenizer& operator=(const Tokenizer&) = delete;
  ~Tokenizer();

  // Token ids of `text` (nothing is added: no BOS/EOS). Errors: InvalidArgument when `text` is
  // not valid UTF-8 or is 4 GiB or longer. Allocates per call, not per token.
  absl::StatusOr<std::vector<TokenId>> Encode(std::string_view text,
                                              const EncodeOptions& options = {}) const;

  // Encode plus offsets. Errors: as Encode; FailedPrecondition when the post_processor trims
  // offsets (a `tokenizers` feature not reproduced here).
  absl::StatusOr<Encoding> EncodeWithOffsets(std::string_view text,
                                             const EncodeOptions& options = {}) const;

  // The pieces the pre-tokenizer's splits make of the whole of `text`, as byte spans, with no
  // added-token matching (the fixture's `splits`). Errors: as Encode.
  absl::StatusOr<std::vector<Span>> PreTokenize(std::string_view text) const;

  // Text of `ids`: each id's bytes (skipping special added tokens when `skip_special`)
  // concatenated, then decoded as UTF-8 with U+FFFD per invalid maximal subpart. Errors:
  // InvalidArgument for an id with no token (out of range or a hole); *out is then unchanged.
  // DecodeAppend appends to *out and allocates nothing else unless the bytes are invalid UTF-8.
  absl::StatusOr<std::string> Decode(absl::Span<const TokenId> ids,
                                     bool skip_special = false) const;
  absl::Status DecodeAppend(absl::Span<const TokenId> ids, bool skip_special,
                            std::string* out) const;

  // The raw bytes an id stands for (may be part of a UTF-8 character). Errors: InvalidArgument
  // for an id with no token. The view lives as long as the Tokenizer.
  absl::StatusOr<std::string_view> TokenBytes(TokenId id) const;

  // Number of ids: one more than the largest id of the vocabulary and added tokens.
  size_t VocabSize() const { return id_bytes_offset_.size() - 1; }
  // The token string of `id`: its vocabulary string (byte-level alphabet, e.g. "Ġthe") or its
  // added-token content. Errors: InvalidArgument for an id with no token.
  absl::StatusOr<std::string_view> IdToToken(TokenId id) const;
  // The id of a vocabulary string or added-token content; nullopt when there is none.
  std::optional<TokenId> TokenToId(std::string_view token) const;
  // True for added tokens flagged special (skipped by skip_special decoding).
  bool IsSpecial(TokenId id) const { return HasFlag(id, kSpecial); }
  // True for ids listed in added_tokens.
  bool IsAdded(TokenId id) const { return HasFlag(id, kAdded); }
  // True when `id` has a token (0 <= id < VocabSize() and not a hole).
  bool IsValid(TokenId id) const { return HasFlag(id, kPresent); }
  // bos/eos/pad named by tokenizer_config.json (absent without it or when it names none).
  const SpecialTokenIds& special_ids() const { return special_ids_; }

 private:
  enum Flag : uint8_t { kPresent = 1, kAdded = 2, kSpecial = 4 };
  struct Segment {
    Span span;
    TokenId added_id;  // -1: text for the pre-tokenizer and BPE
  };

  Tokenizer() = default;
  absl::Status Build(TokenizerSpec spec, std::string_view source);
  bool HasFlag(TokenId id, Flag flag) const {
    return id >= 0 && static_cast<size_t>(id) < flags_.size() && (flags_[id] & flag) != 0;
  }
  std::string_view RawBytes(TokenId id) const {
    return std::string_view(id_bytes_).substr(id_bytes_offset_[id],
                                              id_bytes_offset_[id + 1] - id_bytes_offset_[id]);
  }
  void SplitAddedTokens(std::string_view text, const EncodeOptions& options,
                        std::vector<Segment>* out) const;
  absl::Status EncodeImpl(std::string_view text, const EncodeOptions& options,
                          std::vector<TokenId>* ids, std::vector<Span>* byte_spans) const;

  friend class StreamDecoder;

  // Per id: its decoded bytes in one arena (id_bytes_offset_ has VocabSize() + 1 entries), its
  // token string, and flags.
  std::string id_bytes_;
  std::vector<uint32_t> id_bytes_offset_;
  std::vector<std::string> id_to_token_;
  std::vector<uint8_t> flags_;
  absl::flat_hash_map<std::string, TokenId> token_to_id_;

  AddedTokenMatcher non_normalized_added_;  // matched first, on the raw text
  AddedTokenMatcher normalized_added_;      // then inside the remaining stretches
  PreTokenizer pre_tokenizer_;
  std::unique_ptr<BpeModel> bpe_;
  bool trims_offsets_ = false;
  SpecialTokenIds special_ids_;
};

}  // namespace flashserve::tokenizer
