// GPU launchers against the CPU bodies: LaunchIndexerScore vs IndexerScoreCpu (bit for bit),
// LaunchIndexerTopk vs IndexerTopkCpu and LaunchCandidateBlocks vs CandidateBlocksCpu (identical
// indices, masks and block maxima), over the tiny dims (4 heads x 64), the released dims (32 x 128,
// widths 1k..64k, decode rows 1..4, prefill rows 64 with causal reach at r = 1 and 4), candidate
// masks (per row and broadcast), many exact ties (FP4-grid values, repeated keys), width <
// index_topk, odd head_dim / padded strides (the scalar key path) and > 32 heads (head chunks).
// Outputs start poisoned, so a value the kernel fails to write is a mismatch.
//
// Expected: 0 mismatches everywhere (the GPU performs the CPU's fp32 operations in the CPU's
// order, README.md "CUDA"); each score comparison prints its count.
#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <random>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_format.h"
#include "common/base/thread_pool.h"
#include "gtest/gtest.h"
#include "kernels/common/gpu_test_util.h"
#include "kernels/indexer/indexer.h"
#include "kernels/indexer/indexer_test_util.h"

namespace flashserve::kernels {
namespace {

using indexer_test::kNegInf;
using indexer_test::kPosInf;
using indexer_test::RandomScoreCase;
using indexer_test::ScoreCase;

constexpr uint16_t kPoison16 = 0x7FC1;  // a NaN no kernel produces
constexpr int32_t kPoison32 = -12345;
constexpr uint8_t kPoison8 = 0xA5;

template <typename T>
DeviceBuffer ToDevice(const std::vector<T>& host) {
  DeviceBuffer buf(std::max<size_t>(host.size(), 1) * sizeof(T));
  if (!host.empty()) buf.CopyFromHost(host.data(), host.size() * sizeof(T));
  return buf;
}

template <typename T>
std::vector<T> ToHost(const DeviceBuffer& buf, size_t n) {
  CUDA_CHECK(cudaDeviceSynchronize());
  std::vector<T> host(n);
  if (n > 0) buf.CopyToHost(host.data(), n * sizeof(T));
  return host;
}

ThreadPool& Pool() {
  static ThreadPool* pool = new ThreadPool(4);
  return *pool;
}

// Values on the FP4 (e2m1) grid times 2^-2: {0, ±0.5, ±1, ±1.5, ±2, ±3, ±4, ±6} / 4, so that
// scores collide often.
uint16_t Fp4GridBf16(std::mt19937& rng) {
  static constexpr uint16_t kGrid[8] = {0x0000, 0x3E00, 0x3E80, 0x3EC0,
                                        0x3F00, 0x3F40, 0x3F80, 0x3FC0};  // 0 .. 1.5
  const uint16_t v = kGrid[rng() % 8];
  return (rng() & 1) != 0 && v != 0 ? static_cast<uint16_t>(v | 0x8000) : v;
}

// Turns `c` into a heavy-tie case: FP4-grid q and k, keys repeating every `period` positions, one
// w for all heads.
void QuantiseForTies(ScoreCase& c, std::mt19937& rng, int64_t period) {
  for (auto& v : c.q) v = Fp4GridBf16(rng);
  for (int64_t t = 0; t < c.width; ++t) {
    for (int64_t d = 0; d < c.head_dim; ++d) {
      c.k[t * c.head_dim + d] = t < period ? Fp4GridBf16(rng) : c.k[(t % period) * c.head_dim + d];
    }
  }
  std::fill(c.w.begin(), c.w.end(), uint16_t{0x3C80});  // 2^-6
}

// Scores of `c` on the GPU (k rows padded by k_pad elements, scores rows by 3) and on the CPU;
// returns the GPU scores (dense [tokens, width]) after checking every element, padding included.
// broadcast: the candidate mask's row 0 applies to every token (candidates_stride 0).
std::vector<uint16_t> CheckScores(const ScoreCase& c, int64_t k_pad, bool broadcast = false) {
  SCOPED_TRACE(absl::StrFormat("tokens %d heads %d dim %d width %d start %d r %d mask %d pad %d",
                               c.tokens, c.heads, c.head_dim, c.width, c.start_pos, c.ratio,
                               !c.candidates.empty(), k_pad));
  const int64_t ks = c.head_dim + k_pad, ss = c.width + 3;
  std::vector<uint16_t> kp(static_cast<size_t>(std::max<int64_t>(c.width, 1) * ks), 0x4000);
  for (int64_t t = 0; t < c.width; ++t) {
    std::copy_n(c.k.begin() + t * c.head_dim, c.head_dim, kp.begin() + t * ks);
  }
  IndexerScoreParams p;
  p.tokens = c.tokens;
  p.heads = c.heads;
  p.head_dim = c.head_dim;
  p.width = c.width;
  p.start_pos = c.start_pos;
  p.ratio = c.ratio;
  p.q_stride = c.heads * c.head_dim;
  p.k_stride = ks;
  p.w_stride = c.heads;
  p.scores_stride = ss;
  p.candidates_stride = c.candidates.empty() || broadcast ? 0 : c.width;
  std::vector<uint16_t> want(static_cast<size_t>(c.tokens * ss), kPoison16);
  IndexerScoreParams cpu = p;
  cpu.q = c.q.data();
  cpu.k = kp.data();
  cpu.w = c.w.data();
  cpu.candidates = c.candidates.empty() ? nullptr : c.candidates.data();
  cpu.scores = want.data();
  EXPECT_TRUE(IndexerScoreCpu(cpu, &Pool()).ok());

  DeviceBuffer dq = ToDevice(c.q), dk = ToDevice(kp), dw = ToDevice(c.w);
  DeviceBuffer dc = ToDevice(c.candidates),
               ds = ToDevice(std::vector<uint16_t>(want.size(), kPoison16));
  IndexerScoreParams gpu = p;
  gpu.q = dq.get<uint16_t>();
  gpu.k = dk.get<uint16_t>();
  gpu.w = dw.get<uint16_t>();
  gpu.candidates = c.candidates.empty() ? nullptr : dc.get<uint8_t>();
  gpu.scores = ds.get<uint16_t>();
  EXPECT_TRUE(LaunchIndexerScore(gpu, nullptr).ok());
  const std::vector<uint16_t> got = ToHost<uint16_t>(ds, want.size());
  int64_t bad = 0, visible = 0;
  for (size_t i = 0; i < got.size(); ++i) {
    bad += got[i] != want[i];
    visible += (static_cast<int64_t>(i % ss) < c.width && want[i] != kNegInf);
  }
  std::printf("  scores %ldx%ld (H %ld, d %ld): %ld finite, %ld mismatches\n",
              static_cast<long>(c.tokens), static_cast<long>(c.width), static_cast<long>(c.heads),
              static_cast<long>(c.head_dim), static_cast<long>(visible), static_cast<long>(bad));
  EXPECT_EQ(bad, 0);
  for (size_t i = 0; i < got.size() && bad > 0; ++i) {
    if (got[i] != want[i]) {
      ADD_FAILURE() << absl::StrFormat("first mismatch at row %d pos %d: 0x%04x, want 0x%04x",
                                       i / ss, i % ss, got[i], want[i]);
      break;
    }
  }
  std::vector<uint16_t> dense(static_cast<size_t>(c.tokens * c.width));
  for (int64_t r = 0; r < c.tokens; ++r) {
    std::copy_n(got.begin() + r * ss, c.width, dense.begin() + r * c.width);
  }
  return dense;
}

// Top-k of dense scores [tokens, width] on both sides (indices rows padded by 2); identical.
void CheckTopk(const std::vector<uint16_t>& scores, int64_t tokens, int64_t width,
               int64_t start_pos, int64_t ratio, int64_t index_topk, int64_t offset) {
  SCOPED_TRACE(absl::StrFormat("topk tokens %d width %d start %d r %d k %d offset %d", tokens,
                               width, start_pos, ratio, index_topk, offset));
  const int64_t k = IndexerTopkK(index_topk, width), is = k + 2;
  IndexerTopkParams p;
  p.tokens = tokens;
  p.width = width;
  p.start_pos = start_pos;
  p.ratio = ratio;
  p.index_topk = index_topk;
  p.offset = offset;
  p.scores_stride = width;
  p.indices_stride = is;
  std::vector<int32_t> want(static_cast<size_t>(tokens * is), kPoison32);
  std::vector<uint64_t> ws(static_cast<size_t>(width * 5));
  IndexerTopkParams cpu = p;
  cpu.scores = scores.data();
  cpu.indices = want.data();
  cpu.workspace = ws.data();
  cpu.workspace_bytes = IndexerTopkWorkspaceBytes(width, 5);
  ASSERT_TRUE(IndexerTopkCpu(cpu, &Pool()).ok());
  DeviceBuffer ds = ToDevice(scores), di = ToDevice(std::vector<int32_t>(want.size(), kPoison32));
  IndexerTopkParams gpu = p;
  gpu.scores = ds.get<uint16_t>();
  gpu.indices = di.get<int32_t>();  // no workspace: the GPU needs none
  ASSERT_TRUE(LaunchIndexerTopk(gpu, nullptr).ok());
  const std::vector<int32_t> got = ToHost<int32_t>(di, want.size());
  int64_t bad = 0;
  for (size_t i = 0; i < got.size(); ++i) bad += got[i] != want[i];
  EXPECT_EQ(bad, 0);
  for (size_t i = 0; i < got.size() && bad > 0; ++i) {
    if (got[i] != want[i]) {
      ADD_FAILURE() << absl::StrFormat("first mismatch at row %d slot %d: %d, want %d", i / is,
                                       i % is, got[i], want[i]);
      break;
    }
  }
}

// Candidate masks and block maxima of dense scores on both sides (rows padded); identical.
void CheckCandidates(const std::vector<uint16_t>& scores, int64_t tokens, int64_t width,
                     int64_t start_pos, int64_t ratio, int64_t block_size, int64_t topk_blocks,
                     bool with_block_scores) {
  SCOPED_TRACE(absl::StrFormat("candidates tokens %d width %d start %d r %d bs %d topk %d", tokens,
                               width, start_pos, ratio, block_size, topk_blocks));
  const int64_t nb = CandidateBlockCount(width, block_size), cs = width + 5, bss = nb + 1;
  CandidateBlocksParams p;
  p.tokens = tokens;
  p.width = width;
  p.start_pos = start_pos;
  p.ratio = ratio;
  p.block_size = block_size;
  p.topk_blocks = topk_blocks;
  p.scores_stride = width;
  p.candidates_stride = cs;
  p.block_scores_stride = with_block_scores ? bss : 0;
  std::vector<uint8_t> want(static_cast<size_t>(tokens * cs), kPoison8);
  std::vector<uint16_t> want_b(static_cast<size_t>(tokens * bss), kPoison16);
  std::vector<uint64_t> ws(static_cast<size_t>(nb * 5));
  CandidateBlocksParams cpu = p;
  cpu.scores = scores.data();
  cpu.candidates = want.data();
  cpu.block_scores = with_block_scores ? want_b.data() : nullptr;
  cpu.workspace = ws.data();
  cpu.workspace_bytes = CandidateBlocksWorkspaceBytes(width, block_size, 5);
  ASSERT_TRUE(CandidateBlocksCpu(cpu, &Pool()).ok());
  DeviceBuffer ds = ToDevice(scores), dc = ToDevice(std::vector<uint8_t>(want.size(), kPoison8));
  DeviceBuffer db = ToDevice(std::vector<uint16_t>(want_b.size(), kPoison16));
  CandidateBlocksParams gpu = p;
  gpu.scores = ds.get<uint16_t>();
  gpu.candidates = dc.get<uint8_t>();
  gpu.block_scores = with_block_scores ? db.get<uint16_t>() : nullptr;
  ASSERT_TRUE(LaunchCandidateBlocks(gpu, nullptr).ok());
  const std::vector<uint8_t> got = ToHost<uint8_t>(dc, want.size());
  int64_t bad = 0;
  for (size_t i = 0; i < got.size(); ++i) bad += got[i] != want[i];
  EXPECT_EQ(bad, 0) << "mask values differ";
  const std::vector<uint16_t> got_b = ToHost<uint16_t>(db, want_b.size());
  int64_t bad_b = 0;
  for (size_t i = 0; i < got_b.size(); ++i) bad_b += got_b[i] != want_b[i];
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

TEST(IndexerGpuTest, ScoresTinyDims) {
  FS_SKIP_WITHOUT_GPU();
  std::mt19937 rng(1);
  CheckScores(RandomScoreCase(rng, 1, 4, 64, 299, 1), 0);        // decode, width 300
  CheckScores(RandomScoreCase(rng, 40, 4, 64, 100, 2), 0);       // prefill r = 2, width 70
  CheckScores(RandomScoreCase(rng, 24, 4, 64, 490, 2, 0.4), 0);  // prefill with a mask
  CheckScores(RandomScoreCase(rng, 3, 4, 64, 777, 1, 0.3), 0, /*broadcast=*/true);
  CheckScores(RandomScoreCase(rng, 5, 4, 64, 261, 1), 3);    // padded key rows: scalar path
  CheckScores(RandomScoreCase(rng, 5, 4, 60, 261, 1), 0);    // head_dim % 8 != 0: scalar path
  CheckScores(RandomScoreCase(rng, 2, 40, 64, 300, 1), 0);   // two head chunks (32 + 8)
  CheckScores(RandomScoreCase(rng, 2, 3, 512, 200, 1), 0);   // head_dim 512 (largest)
  CheckScores(RandomScoreCase(rng, 2, 33, 512, 130, 1), 0);  // 64 KiB of q in shared memory
}

TEST(IndexerGpuTest, ScoresReleasedDimsDecode) {
  FS_SKIP_WITHOUT_GPU();
  std::mt19937 rng(2);
  for (int64_t width : {1024, 4097, 65536}) {
    for (int64_t rows : {1, 4}) {
      CheckScores(RandomScoreCase(rng, rows, 32, 128, width - rows, 1), 0);
    }
  }
  // r = 4 decode row (start_pos = 4·width − 1) with a candidate mask, as the consumers run it.
  CheckScores(RandomScoreCase(rng, 1, 32, 128, 4 * 8192 - 1, 4, 0.25), 0, /*broadcast=*/true);
}

TEST(IndexerGpuTest, ScoresReleasedDimsPrefill) {
  FS_SKIP_WITHOUT_GPU();
  std::mt19937 rng(3);
  CheckScores(RandomScoreCase(rng, 64, 32, 128, 2048 - 64, 1), 0);
  CheckScores(RandomScoreCase(rng, 64, 32, 128, 4 * 4096 - 64, 4), 0);       // r = 4
  CheckScores(RandomScoreCase(rng, 64, 32, 128, 4 * 3000 - 64, 4, 0.3), 0);  // with a mask
}

TEST(IndexerGpuTest, ScoresWithManyTiesThenTopk) {
  FS_SKIP_WITHOUT_GPU();
  std::mt19937 rng(4);
  struct Case {
    int64_t tokens, heads, dim, start, ratio, period;
  };
  for (const Case& cs : {Case{1, 32, 128, 20000 - 1, 1, 37}, Case{64, 32, 128, 4 * 2000 - 64, 4, 5},
                         Case{4, 4, 64, 299, 1, 3}, Case{16, 4, 64, 90, 1, 7}}) {
    ScoreCase c = RandomScoreCase(rng, cs.tokens, cs.heads, cs.dim, cs.start, cs.ratio);
    QuantiseForTies(c, rng, cs.period);
    const std::vector<uint16_t> scores = CheckScores(c, 0);
    CheckTopk(scores, c.tokens, c.width, c.start_pos, c.ratio, 512, c.tokens);
    CheckTopk(scores, c.tokens, c.width, c.start_pos, c.ratio, 16, 128);
  }
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

TEST(IndexerGpuTest, LaunchersValidateLikeCpu) {
  // Validation happens before any device work, so this runs without a GPU too.
  IndexerScoreParams s;
  s.tokens = 1;
  s.heads = 4;
  s.head_dim = 64;
  s.width = 10;
  s.start_pos = 9;
  const absl::Status gpu = LaunchIndexerScore(s, nullptr);
  EXPECT_EQ(gpu, IndexerScoreCpu(s, nullptr));
  EXPECT_FALSE(gpu.ok());
  IndexerTopkParams t;
  t.tokens = 1;
  t.width = 10;
  t.start_pos = 9;
  t.index_topk = 0;
  EXPECT_EQ(LaunchIndexerTopk(t, nullptr), IndexerTopkCpu(t, nullptr));
  t.index_topk = 4;
  t.scores_stride = 5;  // below the width
  t.indices_stride = 4;
  uint16_t one = 0;
  int32_t out[4];
  t.scores = &one;
  t.indices = out;
  const absl::Status bad_stride = LaunchIndexerTopk(t, nullptr);
  EXPECT_FALSE(bad_stride.ok());
  EXPECT_NE(std::string(bad_stride.message()).find("scores_stride"), std::string::npos);
  CandidateBlocksParams c;
  c.tokens = 1;
  c.width = 10;
  c.start_pos = 9;
  c.topk_blocks = 0;
  EXPECT_EQ(LaunchCandidateBlocks(c, nullptr), CandidateBlocksCpu(c, nullptr));
}

}  // namespace
}  // namespace flashserve::kernels
