// The CUDA kernels' data layouts, checked on the host (no GPU): the operand column orders of the
// slot rows (MoeOperandColumn, MoeRsOperandColumn), the streaming GEMM's activation chunks and
// swizzle, the wgmma GEMMs' raw-code layout, and the register-sourced GEMM's row order, A
// fragments and tile widths (moe_cuda_internal.h). The kernels index shared memory and registers by
// these maps.
#include <algorithm>
#include <array>
#include <cstdint>
#include <vector>

#include "gtest/gtest.h"
#include "kernels/moe/moe_cuda.h"
#include "kernels/moe/moe_cuda_internal.h"
#include "kernels/moe/moe_test_util.h"

namespace flashserve::kernels {
namespace {

TEST(MoeCudaLayoutTest, RsOperandColumnTransposesTheOperandOrdersWords) {
  for (int64_t base : {0, 64}) {
    std::vector<bool> seen(32, false);
    for (int64_t k = base; k < base + 32; ++k) {
      const int64_t op = MoeOperandColumn(k) - base, rs = MoeRsOperandColumn(k) - base;
      EXPECT_EQ(rs % 2, op % 2) << k;  // the same half of its 32-bit word
      // Word 4t + j of the operand order is word 4j + t of the RS order.
      EXPECT_EQ(rs / 2, 4 * ((op / 2) % 4) + (op / 2) / 4) << k;
      seen[rs] = true;
    }
    EXPECT_TRUE(std::all_of(seen.begin(), seen.end(), [](bool b) { return b; }));
  }
}

TEST(MoeCudaLayoutTest, OperandColumnIsTheDocumentedPermutation) {
  for (int64_t base : {0, 32, 4096}) {
    std::vector<bool> seen(32, false);
    for (int64_t t = 0; t < 4; ++t) {
      for (int64_t j = 0; j < 4; ++j) {
        for (int64_t h = 0; h < 2; ++h) {
          const int64_t phys = MoeOperandColumn(base + 8 * t + j + 4 * h);
          EXPECT_EQ(phys, base + 8 * t + 2 * j + h);
          seen[phys - base] = true;
        }
      }
    }
    EXPECT_TRUE(std::all_of(seen.begin(), seen.end(), [](bool b) { return b; }));
  }
}

TEST(MoeCudaLayoutTest, StreamChunksHoldWholeUnitsAndFit) {
  using moe_cuda_internal::kMoeStreamActBytes;
  using moe_cuda_internal::MoeStreamChunkK;
  EXPECT_EQ(MoeStreamChunkK(5120, 4, 128), 2560);  // D 5,120: two chunks
  EXPECT_EQ(MoeStreamChunkK(2304, 4, 128), 2304);  // I 2,304: one
  EXPECT_EQ(MoeStreamChunkK(5120, 2, 256), 5120);
  EXPECT_EQ(MoeStreamChunkK(8192, 1, 256), 8192);
  for (int unit : {128, 256}) {
    const int64_t max_kc = kMoeStreamActBytes / 64 / unit * unit;  // 32 rows of bf16
    for (int64_t k = unit; k <= 4 * kMoeCudaStreamMaxK; k += unit) {
      const int64_t kc = MoeStreamChunkK(k, 4, unit);
      ASSERT_GT(kc, 0) << k;
      EXPECT_EQ(kc % unit, 0) << "k " << k << " unit " << unit;
      EXPECT_LE(32 * 2 * kc, kMoeStreamActBytes) << "k " << k << " unit " << unit;
      EXPECT_EQ((k + kc - 1) / kc, (k + max_kc - 1) / max_kc) << "k " << k << " unit " << unit;
    }
  }
}

// The streaming GEMM's activation swizzle: a permutation of every aligned group of 8 chunks, and
// every quarter warp's 16-byte reads (lanes 8p .. 8p + 7: slot rows 2p, 2p + 1 × quad lanes
// 0..3, lane tig at chunk 16·kG·u + 4·kG·tig + 4·b + s of its row) in 8 distinct bank quads (row
// pitch a multiple of 256 bytes: only the chunk index modulo 8 matters).
TEST(MoeCudaLayoutTest, StreamSwizzleIsABijectionWithoutBankConflicts) {
  for (uint32_t t = 0; t < 8; ++t) {
    for (uint32_t group = 0; group < 64; ++group) {
      std::vector<bool> seen(8, false);
      for (uint32_t j = 0; j < 8; ++j) {
        const uint32_t phys = moe_cuda_internal::MoeStreamSwizzle(8 * group + j, t);
        ASSERT_EQ(phys / 8, group);
        seen[phys % 8] = true;
      }
      EXPECT_TRUE(std::all_of(seen.begin(), seen.end(), [](bool b) { return b; }));
    }
  }
  for (uint32_t kg : {1u, 2u}) {
    for (uint32_t u = 0; u < 64; ++u) {
      for (uint32_t b = 0; b < kg; ++b) {
        for (uint32_t s = 0; s < 4; ++s) {
          for (uint32_t p = 0; p < 4; ++p) {
            std::vector<bool> quad(8, false);
            for (uint32_t lane = 8 * p; lane < 8 * p + 8; ++lane) {
              const uint32_t grp = lane / 4, tig = lane % 4;
              const uint32_t c = 16 * kg * u + 4 * kg * tig + 4 * b + s;
              quad[moe_cuda_internal::MoeStreamSwizzle(c, grp) % 8] = true;
            }
            EXPECT_TRUE(std::all_of(quad.begin(), quad.end(), [](bool v) { return v; }))
                << "kG " << kg << " unit " << u << " block " << b << " word " << s;
          }
          // The kernel's shortcut: chunk c0 + j sits at Swizzle(c0) ^ j (c0 = the lane's first).
          for (uint32_t tig = 0; tig < 4; ++tig) {
            const uint32_t c0 = 16 * kg * u + 4 * kg * tig;
            for (uint32_t t = 0; t < 2; ++t) {
              EXPECT_EQ(moe_cuda_internal::MoeStreamSwizzle(c0 + 4 * b + s, t),
                        moe_cuda_internal::MoeStreamSwizzle(c0, t) ^ (4 * b + s));
            }
          }
        }
      }
    }
  }
}

TEST(MoeCudaLayoutTest, WgmmaRawLayoutIsABijectionWithoutBankConflicts) {
  for (uint32_t r = 0; r < 256; ++r) {
    std::vector<bool> seen(4, false);
    for (uint32_t c = 0; c < 4; ++c) {
      const uint32_t off = moe_cuda_internal::MoeWgmmaRawOffset(r, c);
      ASSERT_EQ(off / 64, r);
      ASSERT_EQ(off % 16, 0u);
      seen[(off % 64) / 16] = true;
    }
    EXPECT_TRUE(std::all_of(seen.begin(), seen.end(), [](bool b) { return b; })) << "row " << r;
  }
  for (uint32_t it = 0; it < 2; ++it) {
    for (uint32_t h = 0; h < 2; ++h) {
      for (uint32_t p = 0; p < 32; ++p) {
        std::vector<bool> group(8, false);
        for (uint32_t t = 8 * p; t < 8 * p + 8; ++t) {
          const uint32_t i = t + 256 * it, r = i / 2, blk = i % 2;
          group[(moe_cuda_internal::MoeWgmmaRawOffset(r, 2 * h + blk) / 16) % 8] = true;
        }
        EXPECT_TRUE(std::all_of(group.begin(), group.end(), [](bool b) { return b; }))
            << "it " << it << " half " << h << " quarter warp " << p;
      }
    }
  }
}

// The register-sourced wgmma GEMM's up-projection row order: the 256 CTA rows of a stage are
// the w1 and w3 rows of 128 columns, each exactly once, w1's first (one TMA box each), and rows r
// and r + 128 (the stage rows of a consumer thread's accumulator rows lane/4, lane/4 + 8 of slab
// r / 8: RsConsumerRow) are the gate and up of column r, the epilogue's column 8 · slab + lane/4.
TEST(MoeCudaLayoutTest, WgmmaRsUpRowsPairGateAndUpInOneThread) {
  std::vector<int> seen(2 * 128, 0);
  for (uint32_t r = 0; r < 256; ++r) {
    const moe_cuda_internal::MoeWgmmaRsUpRow m = moe_cuda_internal::MoeWgmmaRsUpRowOf(r);
    ASSERT_LT(m.column, 128u) << r;
    ++seen[2 * m.column + (m.up ? 1 : 0)];
    if (r < 128) {
      const moe_cuda_internal::MoeWgmmaRsUpRow u = moe_cuda_internal::MoeWgmmaRsUpRowOf(r + 128);
      EXPECT_FALSE(m.up) << r;
      EXPECT_TRUE(u.up) << r;
      EXPECT_EQ(u.column, m.column) << r;
      EXPECT_EQ(m.column, r) << r;  // the epilogue's column of slab r / 8, row lane/4 = r % 8
    }
  }
  EXPECT_TRUE(std::all_of(seen.begin(), seen.end(), [](int n) { return n == 1; }));
}

// The same kernel's A fragments against the RS operand order of B: for every k16 step s, fragment
// register i, quad lane tig and half e, the logical weight column the thread decodes
// (MoeWgmmaRsFragmentColumn) is the one B stores at the element's physical k (the m16n8k16 A
// layout: 16s + 8·(i / 2) + 2·tig + e), and the thread decodes it from pair 2s + i / 2 of code
// word tig (DecodeFp4x8's pair j holds elements j and j + 4 of the word): each lane one word.
TEST(MoeCudaLayoutTest, WgmmaRsFragmentsMatchTheOperandOrder) {
  std::vector<int> seen(32, 0);
  for (uint32_t s = 0; s < 2; ++s) {
    for (uint32_t i = 0; i < 4; ++i) {
      for (uint32_t tig = 0; tig < 4; ++tig) {
        for (uint32_t e = 0; e < 2; ++e) {
          const uint32_t logical = moe_cuda_internal::MoeWgmmaRsFragmentColumn(s, i, tig, e);
          const uint32_t physical = 16 * s + 8 * (i / 2) + 2 * tig + e;
          EXPECT_EQ(MoeRsOperandColumn(logical), physical)
              << "s " << s << " i " << i << " tig " << tig << " e " << e;
          EXPECT_EQ(logical / 8, tig);                    // the lane's own code word
          EXPECT_EQ(logical % 8, 2 * s + i / 2 + 4 * e);  // pair 2s + i / 2, half e
          if (i % 2 == 0) ++seen[logical];                // rows lane/4 (i = 0, 2)
        }
      }
    }
  }
  EXPECT_TRUE(std::all_of(seen.begin(), seen.end(), [](int n) { return n == 1; }));
}

// Every tile runs the narrowest width of its set that holds its rows; 128 takes the rest.
TEST(MoeCudaLayoutTest, RsTileWidthIsTheNarrowestThatHoldsTheRows) {
  using moe_cuda_internal::MoeRsTileWidth;
  const uint32_t sets[] = {moe_cuda_internal::kMoeRsN64,
                           moe_cuda_internal::kMoeRsN16 | moe_cuda_internal::kMoeRsN32,
                           moe_cuda_internal::kMoeRsN32 | moe_cuda_internal::kMoeRsN48,
                           moe_cuda_internal::kMoeRsN32 | moe_cuda_internal::kMoeRsN64,
                           moe_cuda_internal::kMoeRsN64 | moe_cuda_internal::kMoeRsN80,
                           moe_cuda_internal::kMoeRsN64 | moe_cuda_internal::kMoeRsN96};
  const int widths[] = {16, 32, 48, 64, 80, 96};
  const uint32_t bits[] = {moe_cuda_internal::kMoeRsN16, moe_cuda_internal::kMoeRsN32,
                           moe_cuda_internal::kMoeRsN48, moe_cuda_internal::kMoeRsN64,
                           moe_cuda_internal::kMoeRsN80, moe_cuda_internal::kMoeRsN96};
  for (const uint32_t set : sets) {
    for (int rows = 1; rows <= 128; ++rows) {
      int want = 128;
      for (int i = 5; i >= 0; --i) {
        if ((set & bits[i]) != 0 && rows <= widths[i]) want = widths[i];
      }
      EXPECT_EQ(MoeRsTileWidth(set, rows), want) << "set " << set << ", rows " << rows;
      EXPECT_GE(MoeRsTileWidth(set, rows), rows);
    }
  }
  EXPECT_EQ(MoeRsTileWidth(moe_cuda_internal::kMoeRsN64, 64), 64);
  EXPECT_EQ(MoeRsTileWidth(moe_cuda_internal::kMoeRsN64, 65), 128);
  EXPECT_EQ(MoeRsTileWidth(moe_cuda_internal::kMoeRsN32 | moe_cuda_internal::kMoeRsN64, 33), 64);
}

// The launch's set brackets the mean rows per expert: E 384 top-6 at 768 .. 1,280 tokens (mean
// 12 .. 20) {16, 32}, 1,536 .. 2,560 (24 .. 40) {32, 64}, above {64, 96}; the up GEMM keeps
// {64, 128} above a mean of 20 (its narrower sets measured slower there, session 54).
TEST(MoeCudaLayoutTest, RsWidthSetBracketsTheMeanRows) {
  using moe_cuda_internal::MoeRsWidthSetFor;
  const uint32_t small = moe_cuda_internal::kMoeRsN16 | moe_cuda_internal::kMoeRsN32;
  const uint32_t mid = moe_cuda_internal::kMoeRsN32 | moe_cuda_internal::kMoeRsN64;
  const uint32_t large = moe_cuda_internal::kMoeRsN64 | moe_cuda_internal::kMoeRsN96;
  const uint32_t landed = moe_cuda_internal::kMoeRsN64;
  for (const int64_t tokens : {1, 768, 1024, 1280}) {
    EXPECT_EQ(MoeRsWidthSetFor(6 * tokens, 384, false), small);
    EXPECT_EQ(MoeRsWidthSetFor(6 * tokens, 384, true), small);
  }
  for (const int64_t tokens : {1281, 1536, 2048, 2560}) {
    EXPECT_EQ(MoeRsWidthSetFor(6 * tokens, 384, false), mid);
    EXPECT_EQ(MoeRsWidthSetFor(6 * tokens, 384, true), landed);
  }
  for (const int64_t tokens : {2561, 4096, 16384}) {
    EXPECT_EQ(MoeRsWidthSetFor(6 * tokens, 384, false), large);
    EXPECT_EQ(MoeRsWidthSetFor(6 * tokens, 384, true), landed);
  }
}

// bench_moe's count of the RS tiles by width: experts of 3, 17, 40, 70, 100 and 200 slot rows give
// tiles of 3, 17, 40, 70, 100, 128 and 72 rows.
TEST(MoeCudaLayoutTest, RsTilesByWidthCountsEveryTile) {
  std::vector<int32_t> ids;
  const int counts[] = {3, 17, 40, 70, 100, 0, 200};
  for (int e = 0; e < 7; ++e) ids.insert(ids.end(), counts[e], e);
  const std::array<int64_t, 5> want = {1, 1, 1, 2, 2};
  EXPECT_EQ(moe_test::RsTilesByWidth(ids, 7), want);
  EXPECT_EQ(moe_test::RsTilesByWidth({}, 7), (std::array<int64_t, 5>{}));
}

}  // namespace
}  // namespace flashserve::kernels
