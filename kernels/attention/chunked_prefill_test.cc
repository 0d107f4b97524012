// Chunked prefill on an existing ring equals one-shot prefill bit for bit (window ∪ compressed,
// with the one-shot list width), and a decode step on a full ring equals a one-token chunk.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <numeric>
#include <random>
#include <utility>
#include <vector>

#include "gtest/gtest.h"
#include "kernels/attention/attention_test_util.h"
#include "kernels/attention/window_indices.h"

namespace flashserve::kernels {
namespace {

using testing::AttnCase;

constexpr int64_t kHeads = 4;
constexpr int64_t kDim = 128;

// A whole prompt: window KV per position, compressed rows, queries, and per-position top-k lists
// over the compressed rows (ratio 2 visibility, ascending, -1 last).
struct Prompt {
  int64_t len = 0;
  int64_t compressed = 0;
  int64_t topk = 0;
  std::vector<uint16_t> kv;   // [len, kDim]
  std::vector<uint16_t> ckv;  // [compressed, kDim]
  std::vector<uint16_t> q;    // [len, kHeads, kDim]
  std::vector<float> sink;    // [kHeads]
  IndexList topk_ids;         // [len, topk]
};

Prompt MakePrompt(int64_t len, int64_t topk, uint32_t seed) {
  Prompt p;
  p.len = len;
  p.compressed = len / 2;
  p.topk = topk;
  p.kv = testing::RandomBf16(len * kDim, 1.0f, seed);
  p.ckv = testing::RandomBf16(p.compressed * kDim, 1.0f, seed + 1);
  p.q = testing::RandomBf16(len * kHeads * kDim, 2.0f, seed + 2);
  p.sink = testing::RandomFloats(kHeads, -1.0f, 3.0f, seed + 3);
  p.topk_ids = IndexList{len, topk, std::vector<int32_t>(len * topk, -1)};
  std::mt19937 gen(seed + 4);
  for (int64_t pos = 0; pos < len; ++pos) {
    std::vector<int32_t> visible(static_cast<size_t>((pos + 1) / 2));
    std::iota(visible.begin(), visible.end(), 0);
    std::sample(visible.begin(), visible.end(), p.topk_ids.ids.begin() + pos * topk, topk, gen);
  }
  return p;
}

// Rows [first, first + n) of a [rows, width] list.
IndexList Rows(const IndexList& l, int64_t first, int64_t n) {
  return IndexList{
      n, l.width,
      std::vector<int32_t>(l.ids.begin() + first * l.width, l.ids.begin() + (first + n) * l.width)};
}

AttnCase CaseFor(const Prompt& p, int64_t first, int64_t n, std::vector<uint16_t> pool,
                 const IndexList& list) {
  AttnCase c;
  c.tokens = n;
  c.heads = kHeads;
  c.head_dim = kDim;
  c.n_kv = static_cast<int64_t>(pool.size()) / kDim;
  c.width = list.width;
  c.scale = 1.0f / std::sqrt(static_cast<float>(kDim));
  c.q.assign(p.q.begin() + first * kHeads * kDim, p.q.begin() + (first + n) * kHeads * kDim);
  c.kv = std::move(pool);
  c.indices = list.ids;
  c.sink = p.sink;
  return c;
}

std::vector<uint16_t> OneShot(const Prompt& p, int64_t window, bool with_compressed) {
  auto w = BuildPrefillWindowIndices(p.len, window);
  EXPECT_TRUE(w.ok());
  IndexList list = *w;
  std::vector<uint16_t> pool = p.kv;
  if (with_compressed) {
    list = *ConcatIndices(*w, p.topk_ids, p.len);  // offset s
    pool.insert(pool.end(), p.ckv.begin(), p.ckv.end());
  }
  std::vector<uint16_t> out;
  EXPECT_TRUE(testing::RunKernel(CaseFor(p, 0, p.len, pool, list), nullptr, &out).ok());
  return out;
}

// Runs the prompt chunk by chunk: pool = [ring (window rows) | chunk rows | compressed rows]; the
// ring is updated after each chunk's attention.
std::vector<uint16_t> Chunked(const Prompt& p, int64_t window, const std::vector<int64_t>& sizes,
                              int64_t width, bool with_compressed) {
  std::vector<uint16_t> ring(static_cast<size_t>(window * kDim), 0x7FC0);  // NaN: never read
  std::vector<uint16_t> out;
  int64_t start = 0;
  for (int64_t s : sizes) {
    auto w = BuildChunkWindowIndices(start, s, window, width);
    EXPECT_TRUE(w.ok()) << w.status();
    IndexList list = *w;
    std::vector<uint16_t> pool = ring;
    pool.insert(pool.end(), p.kv.begin() + start * kDim, p.kv.begin() + (start + s) * kDim);
    if (with_compressed) {
      list = *ConcatIndices(*w, Rows(p.topk_ids, start, s), window + s);
      pool.insert(pool.end(), p.ckv.begin(), p.ckv.end());
    }
    std::vector<uint16_t> part;
    EXPECT_TRUE(testing::RunKernel(CaseFor(p, start, s, pool, list), nullptr, &part).ok());
    out.insert(out.end(), part.begin(), part.end());
    for (int64_t pos = start; pos < start + s; ++pos) {
      std::copy_n(p.kv.begin() + pos * kDim, kDim, ring.begin() + (pos % window) * kDim);
    }
    start += s;
  }
  EXPECT_EQ(start, p.len);
  return out;
}

TEST(ChunkedPrefill, EqualsOneShotWithCompressedEntries) {
  // Longer than the window (tiny fixture: window 16, top-k 16).
  const Prompt a = MakePrompt(45, 16, 71);
  const std::vector<uint16_t> one = OneShot(a, 16, true);
  EXPECT_EQ(testing::CountBitDiffs(Chunked(a, 16, {7, 1, 20, 17}, 16, true), one), 0);
  EXPECT_EQ(testing::CountBitDiffs(Chunked(a, 16, {16, 16, 13}, 16, true), one), 0);
  std::vector<int64_t> ones(45, 1);
  EXPECT_EQ(testing::CountBitDiffs(Chunked(a, 16, ones, 16, true), one), 0);
  // Shorter than the window: the width must be the one-shot's min(len, window) = 10.
  const Prompt b = MakePrompt(10, 16, 72);
  EXPECT_EQ(testing::CountBitDiffs(Chunked(b, 16, {3, 7}, 10, true), OneShot(b, 16, true)), 0);
  // Lists long enough to span several 64-blocks: window 96 + top-k 64 over a 150-token prompt.
  const Prompt c = MakePrompt(150, 64, 73);
  EXPECT_EQ(testing::CountBitDiffs(Chunked(c, 96, {50, 60, 40}, 96, true), OneShot(c, 96, true)),
            0);
}

TEST(ChunkedPrefill, WindowOnlyIgnoresTheWidth) {
  // Without compressed entries trailing -1s are no-ops, so width = window also matches a prompt
  // shorter than the window.
  const Prompt b = MakePrompt(10, 1, 74);
  EXPECT_EQ(testing::CountBitDiffs(Chunked(b, 16, {4, 6}, 16, false), OneShot(b, 16, false)), 0);
}

TEST(ChunkedPrefill, DecodeOnAFullRingEqualsAOneTokenChunk) {
  // Decode at position pos >= window - 1: the reference writes slot pos % W and lists the ring
  // oldest first; a one-token chunk lists the same positions in the same order.
  constexpr int64_t kW = 16;
  const Prompt p = MakePrompt(40, 16, 75);
  for (int64_t pos : {15, 16, 27, 39}) {
    std::vector<uint16_t> ring(static_cast<size_t>(kW * kDim));
    for (int64_t q = pos - kW + 1; q <= pos; ++q) {
      std::copy_n(p.kv.begin() + q * kDim, kDim, ring.begin() + (q % kW) * kDim);
    }
    std::vector<uint16_t> pool = ring;
    pool.insert(pool.end(), p.ckv.begin(), p.ckv.end());
    const IndexList list =
        *ConcatIndices(*BuildDecodeWindowIndices(pos, kW), Rows(p.topk_ids, pos, 1), kW);
    std::vector<uint16_t> decode;
    ASSERT_TRUE(testing::RunKernel(CaseFor(p, pos, 1, pool, list), nullptr, &decode).ok());
    const std::vector<uint16_t> chunked = Chunked(p, kW, {pos, 1, 39 - pos}, kW, true);
    const std::vector<uint16_t> row(chunked.begin() + pos * kHeads * kDim,
                                    chunked.begin() + (pos + 1) * kHeads * kDim);
    EXPECT_EQ(testing::CountBitDiffs(decode, row), 0) << pos;
  }
}

}  // namespace
}  // namespace flashserve::kernels
