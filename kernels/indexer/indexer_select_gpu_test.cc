// GPU selections against the CPU bodies: LaunchIndexerTopk vs IndexerTopkCpu and
// LaunchCandidateBlocks vs CandidateBlocksCpu (identical indices, masks and block maxima) over
// heavy ties (±0, ±inf, all −inf, a single finite level), widths 1 .. 2^20 and below index_topk,
// causal prefill rows, padded score rows (the scalar-load paths), and the split selections
// (widths around the split thresholds, 2^20 and 3·2^20 + 5 positions, ties at the k-th key
// spanning CTAs, pinned blocks in different CTAs, garbage-filled workspaces). Outputs start
// poisoned, so a value the kernel fails to write is a mismatch. Expected: identical everywhere.
#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <random>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_format.h"
#include "common/base/thread_pool.h"
#include "common/formats/bf16.h"
#include "common/formats/block_quant.h"
#include "common/formats/kv_row.h"
#include "gtest/gtest.h"
#include "kernels/common/gpu_test_util.h"
#include "kernels/indexer/indexer.h"
#include "kernels/indexer/indexer_gpu_test_util.h"
#include "kernels/indexer/indexer_test_util.h"
#include "kernels/indexer/select_plan.h"

namespace flashserve::kernels {

using indexer_gpu_test::CheckTopk;
using indexer_gpu_test::GarbageWorkspace;
using indexer_gpu_test::kPoison16;
using indexer_gpu_test::kPoison32;
using indexer_gpu_test::kPoison8;
using indexer_gpu_test::Pool;
using indexer_gpu_test::Strided;
using indexer_test::kNegInf;
using indexer_test::kPosInf;
using indexer_test::RandomScoreCase;
using indexer_test::ScoreCase;

namespace indexer_gpu_test {

// Dense rows [tokens, width] copied into rows of `stride` >= width (padding: −inf bits).
std::vector<uint16_t> Strided(const std::vector<uint16_t>& dense, int64_t tokens, int64_t width,
                              int64_t stride) {
  std::vector<uint16_t> out(static_cast<size_t>(std::max<int64_t>(tokens * stride, 1)), kNegInf);
  for (int64_t r = 0; r < tokens; ++r) {
    std::copy_n(dense.begin() + r * width, width, out.begin() + r * stride);
  }
  return out;
}

// The GPU workspace of a call, filled with garbage (the kernels must not rely on its contents).
DeviceBuffer GarbageWorkspace(size_t bytes) { return ToDevice(std::vector<uint8_t>(bytes, 0xCD)); }

void CheckTopk(const std::vector<uint16_t>& scores, int64_t tokens, int64_t width,
               int64_t start_pos, int64_t ratio, int64_t index_topk, int64_t offset,
               int64_t score_pad) {
  const indexer_plan::SelectSplitPlan plan = indexer_plan::PlanTopkSplit(tokens, width);
  SCOPED_TRACE(absl::StrFormat(
      "topk tokens %d width %d start %d r %d k %d offset %d pad %d "
      "(split over %d CTAs per row)",
      tokens, width, start_pos, ratio, index_topk, offset, score_pad, plan.ctas_per_row));
  const int64_t k = IndexerTopkK(index_topk, width), is = k + 2, ss = width + score_pad;
  const std::vector<uint16_t> strided = Strided(scores, tokens, width, ss);
  IndexerTopkParams p;
  p.tokens = tokens;
  p.width = width;
  p.start_pos = start_pos;
  p.ratio = ratio;
  p.index_topk = index_topk;
  p.offset = offset;
  p.scores_stride = ss;
  p.indices_stride = is;
  std::vector<int32_t> want(static_cast<size_t>(tokens * is), kPoison32);
  std::vector<uint64_t> ws(static_cast<size_t>(width * 5));
  IndexerTopkParams cpu = p;
  cpu.scores = strided.data();
  cpu.indices = want.data();
  cpu.workspace = ws.data();
  cpu.workspace_bytes = IndexerTopkWorkspaceBytes(width, 5);
  ASSERT_TRUE(IndexerTopkCpu(cpu, &Pool()).ok());
  DeviceBuffer ds = ToDevice(strided), di = ToDevice(std::vector<int32_t>(want.size(), kPoison32));
  const size_t ws_bytes = IndexerTopkCudaWorkspaceBytes(tokens, width);
  EXPECT_EQ(ws_bytes, plan.workspace_bytes);
  DeviceBuffer dws = GarbageWorkspace(ws_bytes);
  IndexerTopkParams gpu = p;
  gpu.scores = ds.get<uint16_t>();
  gpu.indices = di.get<int32_t>();
  gpu.workspace = ws_bytes > 0 ? dws.get() : nullptr;
  gpu.workspace_bytes = ws_bytes;
  ASSERT_TRUE(LaunchIndexerTopk(gpu, nullptr).ok());
  const std::vector<int32_t> got = ToHost<int32_t>(di, want.size());
  int64_t bad = 0;
  for (size_t i = 0; i < got.size(); ++i) {
    if (got[i] != want[i] && bad++ < 5) {
      ADD_FAILURE() << absl::StrFormat("mismatch at row %d slot %d: %d, want %d", i / is, i % is,
                                       got[i], want[i]);
    }
  }
  EXPECT_EQ(bad, 0);
}

}  // namespace indexer_gpu_test

namespace {

// Candidate masks and block maxima of dense scores on both sides (rows padded: mask rows by
// mask_pad, block rows by 1, score rows by score_pad; pads off a multiple of 8 take the scalar
// paths); identical.
void CheckCandidates(const std::vector<uint16_t>& scores, int64_t tokens, int64_t width,
                     int64_t start_pos, int64_t ratio, int64_t block_size, int64_t topk_blocks,
                     bool with_block_scores, int64_t score_pad = 0, int64_t mask_pad = 5) {
  const indexer_plan::SelectSplitPlan plan =
      indexer_plan::PlanCandidateSplit(tokens, width, block_size);
  SCOPED_TRACE(
      absl::StrFormat("candidates tokens %d width %d start %d r %d bs %d topk %d pads "
                      "%d/%d (split over %d CTAs per row)",
                      tokens, width, start_pos, ratio, block_size, topk_blocks, score_pad, mask_pad,
                      plan.ctas_per_row));
  const int64_t nb = CandidateBlockCount(width, block_size), cs = width + mask_pad, bss = nb + 1;
  const int64_t ss = width + score_pad;
  const std::vector<uint16_t> strided = Strided(scores, tokens, width, ss);
  CandidateBlocksParams p;
  p.tokens = tokens;
  p.width = width;
  p.start_pos = start_pos;
  p.ratio = ratio;
  p.block_size = block_size;
  p.topk_blocks = topk_blocks;
  p.scores_stride = ss;
  p.candidates_stride = cs;
  p.block_scores_stride = with_block_scores ? bss : 0;
  std::vector<uint8_t> want(static_cast<size_t>(tokens * cs), kPoison8);
  std::vector<uint16_t> want_b(static_cast<size_t>(tokens * bss), kPoison16);
  std::vector<uint64_t> ws(static_cast<size_t>(nb * 5));
  CandidateBlocksParams cpu = p;
  cpu.scores = strided.data();
  cpu.candidates = want.data();
  cpu.block_scores = with_block_scores ? want_b.data() : nullptr;
  cpu.workspace = ws.data();
  cpu.workspace_bytes = CandidateBlocksWorkspaceBytes(width, block_size, 5);
  ASSERT_TRUE(CandidateBlocksCpu(cpu, &Pool()).ok());
  DeviceBuffer ds = ToDevice(strided), dc = ToDevice(std::vector<uint8_t>(want.size(), kPoison8));
  DeviceBuffer db = ToDevice(std::vector<uint16_t>(want_b.size(), kPoison16));
  const size_t ws_bytes = CandidateBlocksCudaWorkspaceBytes(tokens, width, block_size);
  EXPECT_EQ(ws_bytes, plan.workspace_bytes);
  DeviceBuffer dws = GarbageWorkspace(ws_bytes);
  CandidateBlocksParams gpu = p;
  gpu.scores = ds.get<uint16_t>();
  gpu.candidates = dc.get<uint8_t>();
  gpu.block_scores = with_block_scores ? db.get<uint16_t>() : nullptr;
  gpu.workspace = ws_bytes > 0 ? dws.get() : nullptr;
  gpu.workspace_bytes = ws_bytes;
  ASSERT_TRUE(LaunchCandidateBlocks(gpu, nullptr).ok());
  const std::vector<uint8_t> got = ToHost<uint8_t>(dc, want.size());
  int64_t bad = 0;
  for (size_t i = 0; i < got.size(); ++i) {
    if (got[i] != want[i] && bad++ == 0) {
      ADD_FAILURE() << absl::StrFormat("first mask mismatch at row %d pos %d: %d, want %d", i / cs,
                                       i % cs, got[i], want[i]);
    }
  }
  EXPECT_EQ(bad, 0) << "mask values differ";
  const std::vector<uint16_t> got_b = ToHost<uint16_t>(db, want_b.size());
  int64_t bad_b = 0;
  for (size_t i = 0; i < got_b.size(); ++i) {
    if (got_b[i] != want_b[i] && bad_b++ == 0) {
      ADD_FAILURE() << absl::StrFormat(
          "first block score mismatch at row %d block %d: 0x%04x, want 0x%04x", i / bss, i % bss,
          got_b[i], want_b[i]);
    }
  }
  EXPECT_EQ(bad_b, 0) << "block scores differ";
}

// Random score rows as a scorer would leave them (−inf from reach(i) on), drawn from `levels`
// distinct values (plus ±0 and −inf sprinkled in) so that ties are everywhere.
std::vector<uint16_t> TiedScores(std::mt19937& rng, int64_t tokens, int64_t width,
                                 int64_t start_pos, int64_t ratio, int levels) {
  std::vector<uint16_t> s(static_cast<size_t>(tokens * width));
  for (int64_t r = 0; r < tokens; ++r) {
    const int64_t reach = indexer_test::ReachOf(start_pos, ratio, r);
    for (int64_t t = 0; t < width; ++t) {
      uint16_t v;
      const uint32_t u = rng() % 100;
      if (t >= reach || u < 3) {
        v = kNegInf;
      } else if (u < 6) {
        v = u % 2 == 0 ? uint16_t{0x8000} : uint16_t{0};
      } else {
        // Consecutive bf16 patterns from 2^-31 up (levels <= 20000 stays finite), some negative.
        const int l = static_cast<int>(rng() % levels) - levels / 3;
        v = static_cast<uint16_t>(l >= 0 ? 0x3000 + l : 0x8000 | (0x3000 - l));
      }
      s[r * width + t] = v;
    }
  }
  return s;
}

TEST(IndexerGpuTest, TopkMatchesCpuWithTies) {
  FS_SKIP_WITHOUT_GPU();
  std::mt19937 rng(5);
  struct Case {
    int64_t tokens, width, start, ratio, topk, offset;
    int levels;
  };
  for (const Case& c : {
           Case{1, 1, 0, 1, 512, 128, 3},                   // width 1
           Case{3, 100, 97, 1, 512, 0, 4},                  // width < index_topk (k = width)
           Case{1, 511, 510, 1, 512, 128, 2},               // width just below
           Case{1, 512, 511, 1, 512, 128, 2},               // k == width
           Case{1, 513, 512, 1, 512, 128, 2},               // one left out
           Case{4, 3000, 2996, 1, 512, 128, 50},            // decode rows
           Case{64, 5000, 4 * 5000 - 64, 4, 512, 64, 300},  // prefill r = 4, causal reach
           Case{64, 700, 700 - 64, 1, 512, 64, 5},          // reach < k on many rows (−1s)
           Case{2, 65536, 65534, 1, 512, 128, 1000},
           Case{5, 2000, 1995, 1, 16, 7, 1},  // a single finite level: all ties
       }) {
    const std::vector<uint16_t> s = TiedScores(rng, c.tokens, c.width, c.start, c.ratio, c.levels);
    CheckTopk(s, c.tokens, c.width, c.start, c.ratio, c.topk, c.offset);
  }
  // All −inf, ±inf mixed in, ±0 only.
  std::vector<uint16_t> inf(3000, kNegInf);
  CheckTopk(inf, 1, 3000, 2999, 1, 512, 128);
  for (size_t i = 0; i < inf.size(); i += 7) inf[i] = kPosInf;
  CheckTopk(inf, 1, 3000, 2999, 1, 512, 128);
  std::vector<uint16_t> zeros(2000);
  for (size_t i = 0; i < zeros.size(); ++i) zeros[i] = i % 3 == 0 ? 0x8000 : 0;
  CheckTopk(zeros, 1, 2000, 1999, 1, 512, 0);
}

TEST(IndexerGpuTest, TopkFullSizeRow) {
  FS_SKIP_WITHOUT_GPU();
  std::mt19937 rng(6);
  const int64_t width = int64_t{1} << 20;
  CheckTopk(TiedScores(rng, 1, width, width - 1, 1, 20000), 1, width, width - 1, 1, 512, 128);
}

TEST(IndexerGpuTest, CandidateBlocksMatchCpu) {
  FS_SKIP_WITHOUT_GPU();
  std::mt19937 rng(7);
  struct Case {
    int64_t tokens, width, start, ratio, block_size, topk_blocks;
    int levels;
  };
  for (const Case& c : {
           Case{1, 100, 99, 1, 8, 4, 3}, Case{32, 90, 58, 1, 8, 4, 5},  // prefill, tiny topk_blocks
           Case{64, 20000, 20000 - 64, 1, 8, 2048, 40}, Case{4, 65536, 65532, 1, 8, 2048, 1000},
           Case{3, 1001, 998, 1, 8, 2048, 7},  // topk_blocks > n_blocks, crop
           Case{2, 50, 48, 1, 7, 3, 1},        // odd block size, single level
       }) {
    const std::vector<uint16_t> s = TiedScores(rng, c.tokens, c.width, c.start, c.ratio, c.levels);
    CheckCandidates(s, c.tokens, c.width, c.start, c.ratio, c.block_size, c.topk_blocks, true);
    CheckCandidates(s, c.tokens, c.width, c.start, c.ratio, c.block_size, c.topk_blocks, false);
  }
}

// ---- The split (many CTAs per row) selections: select_plan.h thresholds and chunks. ----

// One row of `width` positions: `above` positions (random, distinct) at 2.0, the value 1.0 at
// every `tie_period`-th position from `tie_from` on (the k-th key, so the tie spans CTAs), the
// rest split between 0.5, ±0 and −inf.
std::vector<uint16_t> TieRow(std::mt19937& rng, int64_t width, int64_t above, int64_t tie_from,
                             int64_t tie_period) {
  std::vector<uint16_t> s(static_cast<size_t>(width));
  for (int64_t t = 0; t < width; ++t) {
    const uint32_t u = rng() % 4;
    s[t] = u == 0 ? uint16_t{0x3F00} : u == 1 ? uint16_t{0x8000} : u == 2 ? uint16_t{0} : kNegInf;
  }
  for (int64_t t = tie_from; t < width; t += tie_period) s[t] = 0x3F80;
  for (int64_t placed = 0; placed < above;) {
    const int64_t t = static_cast<int64_t>(rng() % static_cast<uint32_t>(width));
    if (s[t] != 0x4000 && s[t] != 0x3F80) {
      s[t] = 0x4000;
      ++placed;
    }
  }
  return s;
}

TEST(IndexerGpuTest, TopkSplitAroundThreshold) {
  FS_SKIP_WITHOUT_GPU();
  std::mt19937 rng(8);
  const int64_t m = indexer_plan::kTopkSplitMinItems;
  for (int64_t width : {m - 1, m, m + 1, m + 7, m + 4095, m + 4096, m + 4097}) {
    for (int64_t pad : {0, 3}) {  // 16-byte loads, then scalar loads (rows off 16 bytes)
      const std::vector<uint16_t> s = TiedScores(rng, 2, width, width - 2, 1, 30);
      CheckTopk(s, 2, width, width - 2, 1, 512, 128, pad);
    }
  }
}

TEST(IndexerGpuTest, TopkSplitLongRows) {
  FS_SKIP_WITHOUT_GPU();
  std::mt19937 rng(9);
  for (int64_t width : {int64_t{1} << 20, 3 * (int64_t{1} << 20) + 5}) {
    CheckTopk(TiedScores(rng, 3, width, width - 3, 1, 20000), 3, width, width - 3, 1, 512, 128);
    CheckTopk(TiedScores(rng, 2, width, width - 2, 1, 3), 2, width, width - 2, 1, 512, 0, 5);
    CheckTopk(TiedScores(rng, 1, width, width - 1, 1, 2000), 1, width, width - 1, 1, 2048, 7);
  }
}

TEST(IndexerGpuTest, TopkSplitManyRows) {
  FS_SKIP_WITHOUT_GPU();
  std::mt19937 rng(10);
  // Prefill rows with causal reach (−1s on rows reaching fewer than k positions past the split).
  CheckTopk(TiedScores(rng, 96, 40000, 40000 - 96, 1, 50), 96, 40000, 40000 - 96, 1, 512, 96);
  CheckTopk(TiedScores(rng, 40, 30000, 4 * 30000 - 40, 4, 500), 40, 30000, 4 * 30000 - 40, 4, 512,
            40);
  CheckTopk(TiedScores(rng, 17, 20000, 0, 1, 7), 17, 20000, 0, 1, 16, 3);  // reach 1..17
}

TEST(IndexerGpuTest, TopkSplitTiesAcrossCtas) {
  FS_SKIP_WITHOUT_GPU();
  std::mt19937 rng(11);
  const int64_t width = 10 * 4096 + 123;  // 11 CTAs, the last one partial
  // 300 values above the k-th, then 1.0 every 97th position: the 212 picked ties span 6 CTAs.
  CheckTopk(TieRow(rng, width, 300, 0, 97), 1, width, width - 1, 1, 512, 128);
  // Ties only from the 8th CTA on (some of them in the partial last CTA).
  CheckTopk(TieRow(rng, width, 400, 7 * 4096 + 5, 101), 1, width, width - 1, 1, 512, 128);
  // Exactly one tie picked (k − 1 above), the tie in the last CTA; and no value above K.
  CheckTopk(TieRow(rng, width, 511, width - 60, 7), 1, width, width - 1, 1, 512, 128);
  CheckTopk(TieRow(rng, width, 0, 3, 40), 1, width, width - 1, 1, 512, 128, 3);
  // A single value (every key ties), ±0 only, all −inf, ±inf mixed in; 2^20 positions.
  const int64_t big = int64_t{1} << 20;
  CheckTopk(std::vector<uint16_t>(big, 0x3F80), 1, big, big - 1, 1, 512, 128);
  std::vector<uint16_t> zeros(big);
  for (int64_t t = 0; t < big; ++t) zeros[t] = t % 3 == 0 ? 0x8000 : 0;
  CheckTopk(zeros, 1, big, big - 1, 1, 512, 0);
  std::vector<uint16_t> inf(big, kNegInf);
  CheckTopk(inf, 1, big, big - 1, 1, 512, 128);
  for (int64_t t = 5; t < big; t += 4099) inf[t] = kPosInf;  // 256 +inf over every CTA
  CheckTopk(inf, 1, big, big - 1, 1, 512, 128);
}

TEST(IndexerGpuTest, CandidateBlocksSplit) {
  FS_SKIP_WITHOUT_GPU();
  std::mt19937 rng(12);
  // Around the threshold: 4096 blocks (one block per row), 4097 and 4104 (split).
  const int64_t m = indexer_plan::kCandidateSplitMinItems * 8;
  for (int64_t width : {m, m + 1, m + 64}) {
    const std::vector<uint16_t> s = TiedScores(rng, 2, width, width - 2, 1, 40);
    CheckCandidates(s, 2, width, width - 2, 1, 8, 2048, true);
  }
  // One row reaching `reach` of 40000 positions (5000 blocks, 5 CTAs of 1024 blocks): the pinned
  // block in the first, a middle, the last CTA, and on both sides of a CTA boundary.
  const int64_t width = 40000;
  for (int64_t reach :
       {int64_t{1}, int64_t{20000}, width, int64_t{16384}, int64_t{16385}, int64_t{3 * 8192 + 1}}) {
    const std::vector<uint16_t> s = TiedScores(rng, 1, width, reach - 1, 1, 60);
    CheckCandidates(s, 1, width, reach - 1, 1, 8, 2048, true);
    CheckCandidates(s, 1, width, reach - 1, 1, 8, 10, true, /*score_pad=*/3, /*mask_pad=*/0);
  }
  // Many prefill rows; block size 7 (scalar block maxima); 8-aligned mask rows (8-byte stores).
  CheckCandidates(TiedScores(rng, 64, width, width - 64, 1, 30), 64, width, width - 64, 1, 8, 2048,
                  true, 0, 0);
  CheckCandidates(TiedScores(rng, 3, width, width - 3, 1, 9), 3, width, width - 3, 1, 7, 2048,
                  false);
  // 2^20 positions (131072 blocks), several rows; an all −inf row (only the pinned block kept).
  const int64_t big = int64_t{1} << 20;
  CheckCandidates(TiedScores(rng, 4, big, big - 4, 1, 1000), 4, big, big - 4, 1, 8, 2048, true);
  CheckCandidates(TiedScores(rng, 2, big, big - 2, 1, 2), 2, big, big - 2, 1, 8, 2048, false, 0, 0);
  CheckCandidates(std::vector<uint16_t>(big, kNegInf), 1, big, big / 2, 1, 8, 2048, true);
}

TEST(IndexerGpuTest, SplitLaunchersCheckTheirWorkspace) {
  // Validation happens before any device work, so this runs without a GPU too.
  IndexerTopkParams t;
  t.tokens = 2;
  t.width = indexer_plan::kTopkSplitMinItems + 1;
  t.start_pos = t.width - 2;
  t.index_topk = 512;
  t.scores = reinterpret_cast<const uint16_t*>(uintptr_t{4096});  // never read
  t.scores_stride = t.width;
  t.indices = reinterpret_cast<int32_t*>(uintptr_t{4096});
  t.indices_stride = 512;
  const size_t need = IndexerTopkCudaWorkspaceBytes(t.tokens, t.width);
  ASSERT_GT(need, 0u);
  absl::Status st = LaunchIndexerTopk(t, nullptr);
  EXPECT_FALSE(st.ok());
  EXPECT_NE(std::string(st.message()).find("workspace is null"), std::string::npos) << st;
  t.workspace = reinterpret_cast<void*>(uintptr_t{4096});
  t.workspace_bytes = need - 1;
  st = LaunchIndexerTopk(t, nullptr);
  EXPECT_NE(std::string(st.message()).find("workspace_bytes"), std::string::npos) << st;
  t.workspace_bytes = need;
  t.workspace = reinterpret_cast<void*>(uintptr_t{4100});
  st = LaunchIndexerTopk(t, nullptr);
  EXPECT_NE(std::string(st.message()).find("8-byte aligned"), std::string::npos) << st;
  CandidateBlocksParams c;
  c.tokens = 1;
  c.width = 8 * indexer_plan::kCandidateSplitMinItems + 1;
  c.start_pos = c.width - 1;
  c.topk_blocks = 2048;
  c.scores = reinterpret_cast<const uint16_t*>(uintptr_t{4096});
  c.scores_stride = c.width;
  c.candidates = reinterpret_cast<uint8_t*>(uintptr_t{4096});
  c.candidates_stride = c.width;
  ASSERT_GT(CandidateBlocksCudaWorkspaceBytes(c.tokens, c.width, c.block_size), 0u);
  st = LaunchCandidateBlocks(c, nullptr);
  EXPECT_NE(std::string(st.message()).find("CandidateBlocks: workspace is null"), std::string::npos)
      << st;
  // Rows short enough for the one-block kernel need none.
  EXPECT_EQ(IndexerTopkCudaWorkspaceBytes(64, indexer_plan::kTopkSplitMinItems), 0u);
}

}  // namespace
}  // namespace flashserve::kernels
