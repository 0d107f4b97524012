// GPU scorers against the CPU body: LaunchIndexerScore vs IndexerScoreCpu (bit for bit; the
// selections, LaunchIndexerTopk and LaunchCandidateBlocks, are in indexer_select_gpu_test.cc),
// over the tiny dims (4 heads x 64), the released dims (32 x 128, widths 1k..64k, decode rows 1..4,
// prefill rows 64 with causal reach at r = 1 and 4), candidate masks (per row and broadcast; sparse
// candidate blocks at 131,072 positions, odd widths, shared and empty mask rows), many
// exact ties (FP4-grid values, repeated keys), width < index_topk, odd head_dim / padded strides
// (the scalar key path), > 32 heads (head chunks), row groups of 8 with partial groups, products
// outside the FMA-exact range (the mul + add path), and the launchers' validation. Every score case
// runs through the default launch (for bf16 keys the exact CUDA-core scorer), also on exact bf16
// ties, near-ties a few fp32 ulps from a rounding boundary and cancelling sums (where any other
// summation order would show). Every score case with head_dim % 32 == 0 also runs with its keys as
// FP4 serving rows (k_rows, encoded by formats::EncodeIndexKRow), once with q FP4-QDQ'd per 32
// values as the model does and once with the raw q (off the FP4 grid: the int8 scorer's fallbacks),
// through the default launch (the int8 tensor-core scorer at 32 x 128) and cuda_exact_only (the
// tiled scorer decoding rows); plus cases forcing fallbacks (wide scale spans, tiny and huge
// scales, NaN scale bytes, zero blocks) and key scales swept across the bounds of the int8 scorer's
// scaled epilogue. Outputs start poisoned, so a value the kernel fails to write is a mismatch.
//
// Expected: 0 mismatches everywhere (README.md "CUDA": the exact scorers perform the CPU's fp32
// operations in the CPU's order; the int8 scorer takes its integer sum only when it provably
// equals the CPU's fp32 sum, else it recomputes it in that order); each score comparison prints
// its mismatch count, the k_rows ones their fallback count.
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
namespace {

using indexer_test::kNegInf;
using indexer_test::kPosInf;
using indexer_test::RandomScoreCase;
using indexer_test::ScoreCase;

using indexer_gpu_test::CheckTopk;
using indexer_gpu_test::kPoison16;
using indexer_gpu_test::kPoison32;
using indexer_gpu_test::kPoison8;
using indexer_gpu_test::LeanRun;
using indexer_gpu_test::Pool;
using indexer_gpu_test::RunLean;

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

// Scores of `c` on the GPU (k rows padded by k_pad elements, scores rows by 3; the default launch,
// i.e. the exact CUDA-core scorer) and on the CPU; returns the GPU scores (dense [tokens, width])
// after checking every element, padding included. broadcast: the candidate mask's row 0 applies
// to every token (candidates_stride 0). Cases with head_dim % 32 == 0 then go through
// CheckRowScores (k_rows), q QDQ'd and raw.
int64_t CheckRowScores(const ScoreCase& c, int64_t row_pad, bool qdq, bool broadcast = false,
                       std::vector<uint8_t>* rows_override = nullptr,
                       int64_t* lean_deferred = nullptr);

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
  // NaN payload and sign are not specified (the GPU gives the canonical 0x7FFF, the CPU 0xFFC0),
  // so any NaN matches any NaN.
  const auto is_nan = [](uint16_t v) { return (v & 0x7F80) == 0x7F80 && (v & 0x7F) != 0; };
  const auto same = [&](uint16_t a, uint16_t b) { return a == b || (is_nan(a) && is_nan(b)); };
  for (size_t i = 0; i < got.size(); ++i) {
    bad += !same(got[i], want[i]);
    visible += (static_cast<int64_t>(i % ss) < c.width && want[i] != kNegInf);
  }
  std::printf("  scores %ldx%ld (H %ld, d %ld): %ld finite, %ld mismatches\n",
              static_cast<long>(c.tokens), static_cast<long>(c.width), static_cast<long>(c.heads),
              static_cast<long>(c.head_dim), static_cast<long>(visible), static_cast<long>(bad));
  EXPECT_EQ(bad, 0);
  for (size_t i = 0; i < got.size() && bad > 0; ++i) {
    if (!same(got[i], want[i])) {
      ADD_FAILURE() << absl::StrFormat("first mismatch at row %d pos %d: 0x%04x, want 0x%04x",
                                       i / ss, i % ss, got[i], want[i]);
      break;
    }
  }
  std::vector<uint16_t> dense(static_cast<size_t>(c.tokens * c.width));
  for (int64_t r = 0; r < c.tokens; ++r) {
    std::copy_n(got.begin() + r * ss, c.width, dense.begin() + r * c.width);
  }
  if (c.head_dim % 32 == 0) {
    CheckRowScores(c, k_pad == 0 ? 0 : 1, /*qdq=*/true, broadcast);
    CheckRowScores(c, k_pad == 0 ? 0 : 1, /*qdq=*/false, broadcast);
  }
  return dense;
}

// `c` with its keys as FP4 serving rows (k_rows, encoded by formats::EncodeIndexKRow unless
// rows_override gives the rows; row_pad bytes of padding per row) and q FP4-QDQ'd per 32 values
// (qdq) or raw: the CPU body (which decodes the rows) against the default launch (the int8
// tensor-core scorer at 32 x 128 with 4-byte aligned rows) and cuda_exact_only (the tiled scorer
// decoding rows while staging); cuda_i8_lean byte for byte against the default launch, with the
// same fallback count, its deferred tiles in *lean_deferred (when set). Where the int8 scorer runs
// unmasked on QDQ'd q without a fallback, the lean kernel must score some tile itself. Returns
// the default launch's fallback count.
int64_t CheckRowScores(const ScoreCase& c, int64_t row_pad, bool qdq, bool broadcast,
                       std::vector<uint8_t>* rows_override, int64_t* lean_deferred) {
  SCOPED_TRACE(absl::StrFormat(
      "k_rows: tokens %d heads %d dim %d width %d start %d r %d mask %d row pad %d qdq %d",
      c.tokens, c.heads, c.head_dim, c.width, c.start_pos, c.ratio, !c.candidates.empty(), row_pad,
      qdq));
  const int64_t rb = formats::IndexKRowBytes(c.head_dim), rs = rb + row_pad, ss = c.width + 3;
  std::vector<uint8_t> rows(static_cast<size_t>(std::max<int64_t>(c.width, 1) * rs), 0x5A);
  if (rows_override != nullptr) {
    rows = *rows_override;
  } else {
    for (int64_t t = 0; t < c.width; ++t) {
      EXPECT_TRUE(
          formats::EncodeIndexKRow({c.k.data() + t * c.head_dim, static_cast<size_t>(c.head_dim)},
                                   {rows.data() + t * rs, static_cast<size_t>(rb)})
              .ok());
    }
  }
  std::vector<uint16_t> q = c.q;
  if (qdq) {
    EXPECT_TRUE(formats::QdqFp4Ue8m0B32(c.q, q).ok());
  }
  IndexerScoreParams p;
  p.tokens = c.tokens;
  p.heads = c.heads;
  p.head_dim = c.head_dim;
  p.width = c.width;
  p.start_pos = c.start_pos;
  p.ratio = c.ratio;
  p.q_stride = c.heads * c.head_dim;
  p.k_row_stride = rs;
  p.w_stride = c.heads;
  p.scores_stride = ss;
  p.candidates_stride = c.candidates.empty() || broadcast ? 0 : c.width;
  std::vector<uint16_t> want(static_cast<size_t>(c.tokens * ss), kPoison16);
  IndexerScoreParams cpu = p;
  cpu.q = q.data();
  cpu.k_rows = rows.data();
  cpu.w = c.w.data();
  cpu.candidates = c.candidates.empty() ? nullptr : c.candidates.data();
  cpu.scores = want.data();
  EXPECT_TRUE(IndexerScoreCpu(cpu, &Pool()).ok());

  DeviceBuffer dq = ToDevice(q), dk = ToDevice(rows), dw = ToDevice(c.w);
  DeviceBuffer dc = ToDevice(c.candidates),
               ds = ToDevice(std::vector<uint16_t>(want.size(), kPoison16));
  IndexerScoreParams gpu = p;
  gpu.q = dq.get<uint16_t>();
  gpu.k_rows = dk.get<uint8_t>();
  gpu.w = dw.get<uint16_t>();
  gpu.candidates = c.candidates.empty() ? nullptr : dc.get<uint8_t>();
  gpu.scores = ds.get<uint16_t>();
  DeviceBuffer dcount = ToDevice(std::vector<unsigned long long>{0});
  gpu.cuda_rechecks = dcount.get<unsigned long long>();
  EXPECT_TRUE(LaunchIndexerScore(gpu, nullptr).ok());
  const std::vector<uint16_t> got = ToHost<uint16_t>(ds, want.size());
  const auto count = static_cast<int64_t>(ToHost<unsigned long long>(dcount, 1)[0]);
  DeviceBuffer ds_exact = ToDevice(std::vector<uint16_t>(want.size(), kPoison16));
  IndexerScoreParams gpu_exact = gpu;
  gpu_exact.scores = ds_exact.get<uint16_t>();
  gpu_exact.cuda_exact_only = true;
  gpu_exact.cuda_rechecks = nullptr;
  EXPECT_TRUE(LaunchIndexerScore(gpu_exact, nullptr).ok());
  const std::vector<uint16_t> got_exact = ToHost<uint16_t>(ds_exact, want.size());
  // The lean kernel and its patch (cuda_i8_lean; without a mask, else the default launch): the
  // default launch's bytes everywhere, poisoned padding included, and its fallback count.
  const LeanRun lean = RunLean(gpu, want.size(), LaunchIndexerScore);
  const std::vector<uint16_t>& got_lean = lean.scores;
  const int64_t deferred = lean.deferred;
  if (lean_deferred != nullptr) *lean_deferred = deferred;
  int64_t lean_differ = 0;
  for (size_t i = 0; i < got.size(); ++i) {
    if (got_lean[i] != got[i] && lean_differ++ == 0) {
      ADD_FAILURE() << absl::StrFormat(
          "cuda_i8_lean differs from the default launch first at row %d pos %d: 0x%04x, default "
          "0x%04x",
          i / ss, i % ss, got_lean[i], got[i]);
    }
  }
  EXPECT_EQ(lean_differ, 0) << "cuda_i8_lean against the default launch";
  EXPECT_EQ(lean.fallbacks, static_cast<int64_t>(ToHost<unsigned long long>(dcount, 1)[0]));
  const bool int8_unmasked =
      c.heads == 32 && c.head_dim == 128 && rs % 4 == 0 && c.candidates.empty();
  const int64_t warp_tiles = ((c.tokens + 7) / 8) * ((c.width + 31) / 32);
  if (!int8_unmasked) {
    EXPECT_EQ(deferred, 0) << "the lean kernel runs only where the int8 one does";
  }
  int64_t bad = 0, bad_exact = 0, visible = 0;
  // A NaN scale byte (0xFF) makes NaN scores; NaN payload and sign are not specified (the GPU
  // gives the canonical 0x7FFF, the CPU 0xFFC0), so any NaN matches any NaN.
  const auto is_nan = [](uint16_t v) { return (v & 0x7F80) == 0x7F80 && (v & 0x7F) != 0; };
  const auto same = [&](uint16_t a, uint16_t b) { return a == b || (is_nan(a) && is_nan(b)); };
  for (size_t i = 0; i < got.size(); ++i) {
    bad += !same(got[i], want[i]);
    bad_exact += !same(got_exact[i], want[i]);
    visible += (static_cast<int64_t>(i % ss) < c.width && want[i] != kNegInf);
  }
  std::printf(
      "  k_rows%s %ldx%ld (H %ld, d %ld, stride %ld): %ld finite, %ld mismatches (exact scorer "
      "%ld), %ld fallbacks (%.3f%% of visible dot products), lean kernel: %ld of %ld warp tiles "
      "deferred\n",
      qdq ? " q-QDQ" : " q-raw", static_cast<long>(c.tokens), static_cast<long>(c.width),
      static_cast<long>(c.heads), static_cast<long>(c.head_dim), static_cast<long>(rs),
      static_cast<long>(visible), static_cast<long>(bad), static_cast<long>(bad_exact),
      static_cast<long>(count),
      visible > 0 ? 100.0 * static_cast<double>(count) / static_cast<double>(visible * c.heads)
                  : 0.0,
      static_cast<long>(deferred), static_cast<long>(warp_tiles));
  // How many tiles the lean kernel defers depends on the data (session 63 on an H100: every tile
  // of the tiny-w epilogue cases, 68 of 32,768 on bench_indexer's keys), so it is printed, not
  // asserted; the bytes must match either way.
  EXPECT_EQ(bad, 0);
  EXPECT_EQ(bad_exact, 0);
  int shown = 0;
  for (size_t i = 0; i < got.size() && shown < 5; ++i) {
    if (!same(got[i], want[i]) || !same(got_exact[i], want[i])) {
      ADD_FAILURE() << absl::StrFormat(
          "k_rows mismatch at row %d pos %d: int8/default 0x%04x, exact 0x%04x, want 0x%04x",
          i / ss, i % ss, got[i], got_exact[i], want[i]);
      ++shown;
    }
  }
  return count;
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

// Replaces c's candidate mask by candidate blocks: each block of 8 positions of each row kept with
// probability 1/4, as a Reindex layer's mask, so whole 32-key warp tiles are masked out for some
// rows and for every row of a group.
void UseBlockMask(std::mt19937& rng, ScoreCase& c) {
  c.candidates.assign(static_cast<size_t>(c.tokens * c.width), 0);
  for (int64_t r = 0; r < c.tokens; ++r) {
    for (int64_t t = 0; t < c.width; t += 8) {
      const uint8_t keep = rng() % 4 == 0 ? 1 : 0;
      std::fill_n(c.candidates.begin() + r * c.width + t, std::min<int64_t>(8, c.width - t), keep);
    }
  }
}

TEST(IndexerGpuTest, ScoresReleasedDimsPrefill) {
  FS_SKIP_WITHOUT_GPU();
  std::mt19937 rng(3);
  CheckScores(RandomScoreCase(rng, 64, 32, 128, 2048 - 64, 1), 0);
  CheckScores(RandomScoreCase(rng, 64, 32, 128, 4 * 4096 - 64, 4), 0);       // r = 4
  CheckScores(RandomScoreCase(rng, 64, 32, 128, 4 * 3000 - 64, 4, 0.3), 0);  // with a mask
  // Candidate blocks: per-row masks (groups of 8 rows where some rows see a tile and others do
  // not), then one mask for every row (whole tiles skipped by the group).
  ScoreCase blocks = RandomScoreCase(rng, 12, 32, 128, 6000 - 12, 1);
  UseBlockMask(rng, blocks);
  CheckScores(blocks, 0);
  CheckScores(blocks, 0, /*broadcast=*/true);
}

// Replaces c's candidate mask by a Reindex layer's at long context: per row `kept` random blocks
// of 8 positions (cropped to the width) plus the block of the row's newest reachable position,
// all others 0. partial: every 3rd kept block keeps only some of its positions (not a shape
// CandidateBlocks makes, but one the mask contract allows).
void UseSparseBlocks(std::mt19937& rng, ScoreCase& c, int64_t kept, bool partial) {
  c.candidates.assign(static_cast<size_t>(c.tokens * c.width), 0);
  const int64_t n_blocks = (c.width + 7) / 8;
  for (int64_t r = 0; r < c.tokens; ++r) {
    uint8_t* row = c.candidates.data() + r * c.width;
    const int64_t reach = (c.start_pos + r + 1) / c.ratio;
    for (int64_t i = 0; i <= kept; ++i) {
      const int64_t b = i == kept ? (reach - 1) / 8 : static_cast<int64_t>(rng() % n_blocks);
      for (int64_t t = 8 * b; t < std::min(8 * b + 8, c.width); ++t) {
        row[t] = partial && i % 3 == 0 ? static_cast<uint8_t>(rng() % 2 * (1 + rng() % 255)) : 1;
      }
    }
  }
}

// The int8 scorer's candidate-block path (only blocks some row of the group sees are scored): the
// long-context density (2,048 of 16,384 blocks, a decode row: chunks of 8 blocks per warp), an
// odd width (mask rows off 8-byte alignment: the bytewise mask reads, the last block cropped) with
// partially kept blocks, a prefill group whose rows share most blocks, and rows that see nothing.
TEST(IndexerGpuTest, ScoresSparseCandidateBlocks) {
  FS_SKIP_WITHOUT_GPU();
  std::mt19937 rng(17);
  ScoreCase longctx = RandomScoreCase(rng, 1, 32, 128, 131072 - 1, 1);
  UseSparseBlocks(rng, longctx, 2048, /*partial=*/false);
  CheckScores(longctx, 0);
  ScoreCase odd = RandomScoreCase(rng, 2, 32, 128, 65533 - 2, 1);
  UseSparseBlocks(rng, odd, 2048, /*partial=*/true);
  CheckScores(odd, 0);
  // 12 rows (a group of 8 and one of 4), reaches ending mid-block; each row its 256 shared blocks
  // plus 32 of its own.
  ScoreCase group = RandomScoreCase(rng, 12, 32, 128, 20003 - 12, 1);
  UseSparseBlocks(rng, group, 32, /*partial=*/false);
  std::mt19937 shared_rng(5);
  for (int i = 0; i < 256; ++i) {
    const int64_t b = static_cast<int64_t>(shared_rng() % ((group.width - 12) / 8));
    for (int64_t r = 0; r < group.tokens; ++r) {
      std::fill_n(group.candidates.begin() + r * group.width + 8 * b, 8, 1);
    }
  }
  CheckScores(group, 0);
  CheckScores(group, 0, /*broadcast=*/true);
  // An empty mask row next to a sparse one, and a mask that keeps nothing at all.
  ScoreCase empty = RandomScoreCase(rng, 2, 32, 128, 4096 - 2, 1);
  UseSparseBlocks(rng, empty, 16, /*partial=*/false);
  std::fill_n(empty.candidates.begin(), empty.width, 0);
  CheckScores(empty, 0);
  CheckScores(empty, 0, /*broadcast=*/true);
}

// Multiplies every normal bf16 value by 2^shift (exponent field clamped to 1..254).
void ScaleBf16(std::vector<uint16_t>& v, int shift, size_t from = 0, size_t step = 1,
               size_t run = 1) {
  for (size_t i = from; i < v.size(); i += step) {
    for (size_t j = i; j < i + run && j < v.size(); ++j) {
      const int field = (v[j] >> 7) & 0xFF;
      if (field == 0 || field == 0xFF) continue;
      const int scaled = std::clamp(field + shift, 1, 254);
      v[j] = static_cast<uint16_t>((v[j] & 0x807F) | (scaled << 7));
    }
  }
}

TEST(IndexerGpuTest, ScoresTiledRowGroupsAndExactnessFallback) {
  FS_SKIP_WITHOUT_GPU();
  std::mt19937 rng(13);
  // Row groups of 8 with a partial last group, decode-style and causal prefill.
  CheckScores(RandomScoreCase(rng, 9, 32, 128, 4097 - 9, 1), 0);
  CheckScores(RandomScoreCase(rng, 13, 32, 128, 2 * 3000 - 13, 2, 0.5), 0);
  // Products below 2^-126 (subnormal in fp32: the FMA would differ) on every key, then on every
  // 5th key row only (the two paths side by side in one warp), then with a large exponent range.
  ScoreCase tiny = RandomScoreCase(rng, 3, 32, 128, 3000 - 3, 1);
  ScaleBf16(tiny.q, -70);
  ScaleBf16(tiny.k, -55);
  CheckScores(tiny, 0);
  ScoreCase mixed = RandomScoreCase(rng, 8, 32, 128, 3000 - 8, 1);
  ScaleBf16(mixed.q, -60);
  ScaleBf16(mixed.k, -64, 0, 5 * 128, 128);
  CheckScores(mixed, 0);
  // |q| up to 2^100 (d = 0) and |k| up to 2^30 (d = 1): the exponent bound (<= 125) fails, so
  // the mul + add path runs, though no single product is near the overflow.
  ScoreCase huge = RandomScoreCase(rng, 2, 32, 128, 1000 - 2, 1);
  for (size_t i = 0; i < huge.q.size(); i += 128) huge.q[i] = 0x7180;  // 2^100
  for (size_t i = 1; i < huge.k.size(); i += 128) huge.k[i] = 0x4E80;  // 2^30
  CheckScores(huge, 0);
  // The same on the generic-dim tiled kernel (head_dim 64, 4 heads).
  ScoreCase tiny64 = RandomScoreCase(rng, 5, 4, 64, 700 - 5, 1);
  ScaleBf16(tiny64.q, -70);
  ScaleBf16(tiny64.k, -58, 0, 3 * 64, 64);
  CheckScores(tiny64, 0);
}

// bf16 bits of a small integer (exact).
uint16_t IntBf16(int v) { return formats::FloatToBf16Bits(static_cast<float>(v)); }

// Sums on bf16 rounding boundaries: q and k are integers in [−15, 15] on d < 127, so every
// partial sum is an exact integer and a large share of the dot products are exact bf16 ties (odd
// multiples of half a bf16 ulp above 256), which the CPU rounds to even. With `nudge`, d = 127
// adds q = ±1 times k = 0 or ±2^-12 / 2^-14 / 2^-16: the sequential fp32 sum (which adds it last)
// keeps or absorbs it depending on the magnitude, so the sums sit a few fp32 ulps on either side
// of the boundary. Every one of them must come out as the CPU's.
ScoreCase BoundaryCase(std::mt19937& rng, int64_t tokens, int64_t width, bool nudge) {
  ScoreCase c = RandomScoreCase(rng, tokens, 32, 128, width - tokens, 1);
  static constexpr uint16_t kNudge[7] = {0x0000, 0x3980, 0xB980, 0x3880, 0xB880, 0x3780, 0xB780};
  for (size_t i = 0; i < c.q.size(); ++i) {
    c.q[i] = i % 128 == 127 ? (nudge ? IntBf16(rng() % 2 != 0 ? 1 : -1) : uint16_t{0})
                            : IntBf16(static_cast<int>(rng() % 31) - 15);
  }
  for (size_t i = 0; i < c.k.size(); ++i) {
    c.k[i] = i % 128 == 127 ? kNudge[rng() % 7] : IntBf16(static_cast<int>(rng() % 31) - 15);
  }
  return c;
}

// Multiplies 32-block b of every head_dim-vector (keys: rows of `dim`) by 2^(step · b), for the
// vectors v with v % every == which.
void SpreadBlocks(std::vector<uint16_t>& v, int64_t dim, int step, int64_t every = 1,
                  int64_t which = 0) {
  for (int64_t base = 0; base + dim <= static_cast<int64_t>(v.size()); base += dim) {
    if ((base / dim) % every != which) continue;
    for (int64_t b = 1; b < dim / 32; ++b) {
      std::vector<uint16_t> block(v.begin() + base + 32 * b, v.begin() + base + 32 * b + 32);
      ScaleBf16(block, static_cast<int>(step * b));
      std::copy(block.begin(), block.end(), v.begin() + base + 32 * b);
    }
  }
}

// The int8 k_rows scorer's exactness condition, on both sides of it: per-block scale spans in the
// keys and in q (a span of 9 passes at |m| <= 12, wider ones fall back), tiny and huge scales,
// zero blocks and zero heads, NaN scale bytes, padded row strides (aligned: int8; unaligned: the
// tiled scorer).
TEST(IndexerGpuTest, ScoresFromRowsFallbacks) {
  FS_SKIP_WITHOUT_GPU();
  std::mt19937 rng(21);
  {  // keys: every 3rd spans 3 binades per block (15 in all: falls back), every 3rd 1 per block
    ScoreCase c = RandomScoreCase(rng, 3, 32, 128, 2000 - 3, 1);
    SpreadBlocks(c.k, 128, 5, 3, 0);
    SpreadBlocks(c.k, 128, 1, 3, 1);
    SpreadBlocks(c.q, 128, 2, 2, 0);  // q: even heads span 6 binades
    const int64_t fb = CheckRowScores(c, 0, /*qdq=*/true);
    EXPECT_GT(fb, 0) << "wide spans must fall back";
    CheckRowScores(c, 4, /*qdq=*/true);  // padded, aligned rows: still int8
    CheckRowScores(c, 1, /*qdq=*/true);  // unaligned rows: the tiled scorer
  }
  {  // spans 3·b (9 binades) and 4·b (12): both sides of the bound for |m| <= 12
    ScoreCase c = RandomScoreCase(rng, 2, 32, 128, 1500 - 2, 1);
    SpreadBlocks(c.k, 128, 3, 2, 0);
    SpreadBlocks(c.k, 128, 4, 2, 1);
    CheckRowScores(c, 0, /*qdq=*/true);
  }
  {  // folding at its limits: keys spanning exactly 3 binades (the largest folded span: codes
     // shifted by up to 3) beside unspread keys; q heads spanning 3 binades across blocks (plus
     // the FP4 grid's 3 within a block: top − min = 6, the largest folded head) beside unspread
     // heads; then every key folded with nonzero shifts under an all-folded q (the fast path)
    ScoreCase c = RandomScoreCase(rng, 3, 32, 128, 2500 - 3, 1);
    SpreadBlocks(c.k, 128, 1, 2, 0);
    SpreadBlocks(c.q, 128, 1, 2, 1);
    EXPECT_EQ(CheckRowScores(c, 0, /*qdq=*/true), 0) << "folded spans are exact";
    ScoreCase all = RandomScoreCase(rng, 1, 32, 128, 3000 - 1, 1);
    SpreadBlocks(all.k, 128, 1);
    EXPECT_EQ(CheckRowScores(all, 0, /*qdq=*/true), 0);
  }
  for (const int kshift : {-110, -90, 60, 70, 118}) {  // tiny and huge key scales
    ScoreCase c = RandomScoreCase(rng, 2, 32, 128, 1000 - 2, 1);
    ScaleBf16(c.k, kshift, 0, 4 * 128, 128);  // every 4th key
    ScaleBf16(c.q, kshift > 0 ? -kshift / 2 : 20);
    CheckRowScores(c, 0, /*qdq=*/true);
  }
  for (const int qshift : {-75, -45, 35, 45}) {  // tiny and huge q scales (whole rows)
    ScoreCase c = RandomScoreCase(rng, 3, 32, 128, 700 - 3, 1);
    ScaleBf16(c.q, qshift, 0, 2 * 32 * 128, 32 * 128);
    CheckRowScores(c, 0, /*qdq=*/true);
  }
  {  // zero blocks in keys and q, an all-zero key, an all-zero head
    ScoreCase c = RandomScoreCase(rng, 4, 32, 128, 900 - 4, 1);
    for (int64_t t = 0; t < c.width; t += 4) std::fill_n(c.k.begin() + t * 128 + 32, 32, 0);
    std::fill_n(c.k.begin() + 7 * 128, 128, 0);
    for (int64_t r = 0; r < c.tokens; ++r) {
      std::fill_n(c.q.begin() + r * 32 * 128 + 64, 32, 0);        // head 0, block 2
      std::fill_n(c.q.begin() + r * 32 * 128 + 5 * 128, 128, 0);  // head 5
    }
    CheckRowScores(c, 0, /*qdq=*/true);
  }
  {  // NaN (0xFF) and near-overflow scale bytes, on blocks with and without nonzero codes
    ScoreCase c = RandomScoreCase(rng, 2, 32, 128, 800 - 2, 1);
    const int64_t rb = formats::IndexKRowBytes(128);
    std::vector<uint8_t> rows(static_cast<size_t>(c.width * rb));
    for (int64_t t = 0; t < c.width; ++t) {
      ASSERT_TRUE(formats::EncodeIndexKRow({c.k.data() + t * 128, 128},
                                           {rows.data() + t * rb, static_cast<size_t>(rb)})
                      .ok());
      uint8_t* row = rows.data() + t * rb;
      if (t % 7 == 0) row[64] = 0xFF;
      if (t % 11 == 0) {
        std::fill_n(row + 48, 16, 0);  // block 3: zero codes
        row[67] = t % 22 == 0 ? 0xFF : 0xFE;
      }
      if (t % 13 == 0) row[65] = 0xFC;  // 6 · 2^125: +inf / large products
    }
    CheckRowScores(c, 0, /*qdq=*/true, false, &rows);
  }
}

// The lean kernel's conditions (cuda_i8_lean) hold for every row of a row group at once: here
// only row 5 of 11 (in the first group of 8 rows) breaks them — one of its heads spread over 9
// binades (not folded), then one of its w near 2^-40 (the scaled epilogue's lower bound) — while
// the other rows, and the second group (rows 8–10), would take the lean path. The bytes and the
// fallback count must be the default launch's (CheckRowScores); with the unfolded head every
// warp tile of the first group goes to the patch launch and fewer of the second's.
TEST(IndexerGpuTest, LeanKernelConditionsCoverEveryRowOfTheGroup) {
  FS_SKIP_WITHOUT_GPU();
  std::mt19937 rng(61);
  {
    ScoreCase c = RandomScoreCase(rng, 11, 32, 128, 3000 - 11, 1);
    SpreadBlocks(c.q, 128, 3, 11 * 32, 5 * 32 + 3);  // row 5, head 3
    int64_t deferred = 0;
    CheckRowScores(c, 0, /*qdq=*/true, false, nullptr, &deferred);
    const int64_t per_group = (c.width + 31) / 32;
    EXPECT_GE(deferred, per_group) << "row 5's unfolded head defers the first group";
    EXPECT_LT(deferred, 2 * per_group) << "the second group has no such row";
  }
  {
    ScoreCase c = RandomScoreCase(rng, 11, 32, 128, 2000 - 11, 1);
    c.w[5 * 32 + 7] = formats::FloatToBf16Bits(0x1.0p-40f);  // row 5, head 7
    CheckRowScores(c, 0, /*qdq=*/true);
  }
}

// The int8 scorer's scaled epilogue (README "Session 45", item 2) takes a warp tile only where
// every key's min_k lies in the row's [kLo, kHi], set by the heads' w and min_q. Here runs of 32
// keys (one warp tile each) are scaled by one more binade per run, so that the runs cross kLo
// (one head's w near 2^-40: the terms' lowest bits approach the bf16 subnormal step) or kHi (one
// head's w near 2^60: the terms approach overflow) one binade at a time, with the other heads'
// w normal, negative, ±0; keys on both sides of each bound and on it, bit for bit with the CPU.
TEST(IndexerGpuTest, ScoresScaledEpilogueBounds) {
  FS_SKIP_WITHOUT_GPU();
  std::mt19937 rng(45);
  struct Sweep {
    uint16_t w0;      // head 0's w
    int first, runs;  // key scale shift of run 0, number of runs (one binade apart)
  };
  // With q near 2^0 (min_q about −3) and keys near 2^0 shifted by `first + run`: kLo is about
  // −133 − (lsb(w0) + min_q) = −83 (w0 = 1.41·2^-40, lsb −47) or −90 (2^-40), kHi about
  // 97 − (top(w0) + min_q) = 40 (|w0| ~ 2^60); the runs' min_k stay in the int8 path's
  // [−100, 60].
  for (const Sweep& sw : {Sweep{0x2BB5, -95, 48},     // 1.41·2^-40: kLo inside the sweep
                          Sweep{0x2B80, -95, 48},     // 2^-40 exactly (lsb = top)
                          Sweep{0x5DC3, 0, 52},       // 1.52·2^60: kHi inside the sweep
                          Sweep{0xDD80, 0, 52},       // −2^60
                          Sweep{0x0001, -60, 24}}) {  // subnormal w: never scaled
    SCOPED_TRACE(absl::StrFormat("w0 0x%04x", sw.w0));
    const int64_t width = 32 * sw.runs;
    ScoreCase c = RandomScoreCase(rng, 2, 32, 128, width - 2, 1);
    for (int64_t r = 0; r < c.tokens; ++r) {
      c.w[r * 32] = sw.w0;
      c.w[r * 32 + 7] = 0x0000;  // +0
      c.w[r * 32 + 9] = 0x8000;  // −0
      c.w[r * 32 + 12] = static_cast<uint16_t>(c.w[r * 32 + 12] | 0x8000);
    }
    for (int run = 0; run < sw.runs; ++run) {
      ScaleBf16(c.k, sw.first + run, static_cast<size_t>(run) * 32 * 128, width * 128, 32 * 128);
    }
    EXPECT_EQ(CheckRowScores(c, 0, /*qdq=*/true), 0) << "FP4-grid q and keys: no fallback";
  }
}

TEST(IndexerGpuTest, ScoresOnRoundingBoundaries) {
  FS_SKIP_WITHOUT_GPU();
  std::mt19937 rng(17);
  for (bool nudge : {false, true}) {
    for (int64_t rows : {1, 8, 11}) CheckScores(BoundaryCase(rng, rows, 4096 + 37, nudge), 0);
  }
  // The same values scaled by 2^-20 (bf16 exponents far from 0; sums stay exact).
  ScoreCase scaled = BoundaryCase(rng, 4, 3000, true);
  ScaleBf16(scaled.q, -20);
  CheckScores(scaled, 0);
}

// Cancellation: q[h, d + 64] = q[h, d] and k[t, d + 64] = −k[t, d], so Σ|q·k| is large and the
// dot product small (exactly 0 when every pair cancels; a few pairs left uncancelled otherwise).
// The sequential fp32 sum of a cancelling series is not 0, so any other summation order shows.
TEST(IndexerGpuTest, ScoresCancellation) {
  FS_SKIP_WITHOUT_GPU();
  std::mt19937 rng(19);
  for (int keep : {0, 4, 16}) {  // d < 64 with d % 16 < keep keep an independent k[t, d + 64]
    for (int64_t rows : {1, 8}) {
      ScoreCase c = RandomScoreCase(rng, rows, 32, 128, 3000 - rows, 1);
      for (size_t i = 0; i < c.q.size(); ++i) {
        if (i % 128 >= 64) c.q[i] = c.q[i - 64];
      }
      for (size_t i = 0; i < c.k.size(); ++i) {
        const int d = static_cast<int>(i % 128);
        if (d >= 64 && (d - 64) % 16 >= keep) c.k[i] = c.k[i - 64] ^ 0x8000;
      }
      CheckScores(c, 0);
    }
  }
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
