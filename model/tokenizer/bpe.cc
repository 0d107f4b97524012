#include "model/tokenizer/bpe.h"

#include <algorithm>
#include <atomic>
#include <utility>

#include "common/base/strings.h"

namespace flashserve::tokenizer {
namespace {

// Heap order: lowest rank first, then leftmost position (std heaps put the "largest" on top).
bool LaterCandidate(const BpeScratch::Candidate& a, const BpeScratch::Candidate& b) {
  if (a.rank != b.rank) return a.rank > b.rank;
  return a.pos > b.pos;
}

// The piece cache of this thread, for the model whose instance id is `owner`.
struct PieceCache {
  uint64_t owner = 0;
  absl::flat_hash_map<std::string, std::vector<TokenId>> pieces;
};
thread_local PieceCache t_piece_cache;

std::atomic<uint64_t> g_next_instance_id{1};

}  // namespace

BpeModel::BpeModel(const std::array<TokenId, 256>& byte_ids,
                   const std::vector<BpeMergeRule>& merges, bool ignore_merges,
                   absl::flat_hash_map<std::string, TokenId> piece_vocab)
    : byte_ids_(byte_ids),
      ignore_merges_(ignore_merges),
      piece_vocab_(std::move(piece_vocab)),
      instance_id_(g_next_instance_id.fetch_add(1, std::memory_order_relaxed)) {
  merges_.reserve(merges.size());
  for (size_t rank = 0; rank < merges.size(); ++rank) {
    const BpeMergeRule& rule = merges[rank];
    merges_[PairKey(rule.left, rule.right)] = {static_cast<uint32_t>(rank), rule.result};
  }
}

const BpeModel::MergeEntry* BpeModel::FindMerge(TokenId left, TokenId right) const {
  auto it = merges_.find(PairKey(left, right));
  return it == merges_.end() ? nullptr : &it->second;
}

void BpeModel::Encode(std::string_view piece, BpeScratch* scratch,
                      std::vector<TokenId>* out) const {
  if (ignore_merges_) {
    auto it = piece_vocab_.find(ToAbsl(piece));
    if (it != piece_vocab_.end()) {
      out->push_back(it->second);
      return;
    }
  }
  if (piece.size() == 1) {
    out->push_back(byte_ids_[static_cast<uint8_t>(piece[0])]);
    return;
  }
  if (piece.size() > kMaxCachedPieceBytes) {
    MergeSymbols(piece, scratch, out);
    return;
  }
  PieceCache& cache = t_piece_cache;
  if (cache.owner != instance_id_) {
    cache.pieces.clear();
    cache.owner = instance_id_;
  }
  auto it = cache.pieces.find(ToAbsl(piece));
  if (it != cache.pieces.end()) {
    out->insert(out->end(), it->second.begin(), it->second.end());
    return;
  }
  const size_t first = out->size();
  MergeSymbols(piece, scratch, out);
  // A full cache stops growing (as in `tokenizers`): no eviction work on the hot path.
  if (cache.pieces.size() < kCacheCapacity) {
    cache.pieces.try_emplace(ToAbsl(piece), out->begin() + static_cast<ptrdiff_t>(first),
                             out->end());
  }
}

void BpeModel::MergeSymbols(std::string_view piece, BpeScratch* scratch,
                            std::vector<TokenId>* out) const {
  auto& symbols = scratch->symbols;
  auto& heap = scratch->heap;
  const auto n = static_cast<int32_t>(piece.size());
  symbols.resize(static_cast<size_t>(n));
  heap.clear();
  for (int32_t i = 0; i < n; ++i) {
    symbols[i] = {byte_ids_[static_cast<uint8_t>(piece[i])], i - 1, i + 1 < n ? i + 1 : -1, 1};
  }
  for (int32_t i = 0; i + 1 < n; ++i) {
    if (const MergeEntry* m = FindMerge(symbols[i].id, symbols[i + 1].id)) {
      heap.push_back({m->rank, static_cast<uint32_t>(i), m->result});
    }
  }
  std::make_heap(heap.begin(), heap.end(), LaterCandidate);
  while (!heap.empty()) {
    std::pop_heap(heap.begin(), heap.end(), LaterCandidate);
    const BpeScratch::Candidate top = heap.back();
    heap.pop_back();
    BpeScratch::Symbol& left = symbols[top.pos];
    if (left.length == 0 || left.next < 0) continue;  // merged away, or now the last symbol
    BpeScratch::Symbol& right = symbols[left.next];
    const MergeEntry* m = FindMerge(left.id, right.id);
    if (m == nullptr || m->result != top.result) continue;  // stale: a neighbour changed
    left.id = top.result;
    left.length += right.length;
    right.length = 0;
    left.next = right.next;
    if (left.next >= 0) symbols[left.next].prev = static_cast<int32_t>(top.pos);
    if (left.prev >= 0) {
      if (const MergeEntry* pm = FindMerge(symbols[left.prev].id, left.id)) {
        heap.push_back({pm->rank, static_cast<uint32_t>(left.prev), pm->result});
        std::push_heap(heap.begin(), heap.end(), LaterCandidate);
      }
    }
    if (left.next >= 0) {
      if (const MergeEntry* nm = FindMerge(left.id, symbols[left.next].id)) {
        heap.push_back({nm->rank, top.pos, nm->result});
        std::push_heap(heap.begin(), heap.end(), LaterCandidate);
      }
    }
  }
  for (int32_t i = 0; i >= 0; i = symbols[i].next) out->push_back(symbols[i].id);
}

}  // namespace flashserve::tokenizer
