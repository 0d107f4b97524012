// TokenHistory: what the penalties need to know about a request's tokens — which ids occur in
// the prompt, and how often each id has been generated. One uint32 per vocabulary id, allocated
// once; nothing is stored when the request has no penalties (only the output length is kept).
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "model/sampling/sampling_params.h"

namespace flashserve::sampling {

class TokenHistory {
 public:
  // `track_ids`: keep per-id state (needed only for penalties). Ids passed to the methods below
  // must be in [0, vocab_size) (the sampler checks before calling).
  TokenHistory(int32_t vocab_size, bool track_ids);

  void AddPrompt(std::span<const TokenId> tokens);
  void AddOutput(TokenId token);
  // Undoes the most recent AddOutput(token) (used to roll back a failed verification).
  void RemoveOutput(TokenId token);

  // Generated tokens so far (including those given to Sampler::Create).
  int64_t num_outputs() const { return num_outputs_; }
  bool tracks_ids() const { return !entries_.empty(); }
  // Valid only when tracks_ids().
  int32_t output_count(TokenId token) const {
    return static_cast<int32_t>(entries_[token] & kCountMask);
  }
  bool in_prompt(TokenId token) const { return (entries_[token] & kPromptBit) != 0; }
  // Packed entry: bit 31 = in prompt, bits 0..30 = output count.
  uint32_t entry(TokenId token) const { return entries_[token]; }

  static constexpr uint32_t kPromptBit = 0x80000000u;
  static constexpr uint32_t kCountMask = 0x7fffffffu;

 private:
  std::vector<uint32_t> entries_;
  int64_t num_outputs_ = 0;
};

}  // namespace flashserve::sampling
