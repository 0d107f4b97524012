#include "model/sampling/token_history.h"

#include "common/base/check.h"

namespace flashserve::sampling {

TokenHistory::TokenHistory(int32_t vocab_size, bool track_ids) {
  if (track_ids) entries_.assign(vocab_size, 0u);
}

void TokenHistory::AddPrompt(std::span<const TokenId> tokens) {
  if (!tracks_ids()) return;
  for (TokenId t : tokens) entries_[t] |= kPromptBit;
}

void TokenHistory::AddOutput(TokenId token) {
  ++num_outputs_;
  if (tracks_ids()) ++entries_[token];
}

void TokenHistory::RemoveOutput(TokenId token) {
  CHECK_GT(num_outputs_, 0);
  --num_outputs_;
  if (tracks_ids()) {
    CHECK_GT(entries_[token] & kCountMask, 0u);
    --entries_[token];
  }
}

}  // namespace flashserve::sampling
