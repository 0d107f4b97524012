// bench_indexer: the GPU indexer (scores, top-512, candidate blocks) over 1M compressed positions
// at the released dims against its roofline.
//
//   bench_indexer [--iters N] [--warmup N] [--width W]
//
// Released dims: 32 heads × 128, W compressed positions (default 2^20) of FP4-dequantised bf16
// keys (e2m1 grid values × a power-of-two scale per 32-value block, as the model's QDQ leaves
// them), FP4-grid q, bf16 w ~ 2^-6 scale. For 1 and 8 query rows (decode-style: row i reaches
// W − rows + 1 + i positions) it prints the median of N launches between two CUDA events (after
// the warm-up) of: the scores, the top-512 of those scores, the two back to back, and the
// candidate blocks (8-position blocks, 2048 of them). Bytes: keys W × 256 B + scores rows × W × 2 B
// (+ q, w) for the scores; scores + indices for the top-k (read once: the ideal); scores + mask for
// the candidates. FLOPs: 2 × 32 × 128 × W per row. Roofline = max(bytes / copy bandwidth,
// FLOPs / tensor-core rate), ratio = roofline / measured (1.0 = at the roof). Both roofs are
// measured in the same run: the copy is cudaMemcpyAsync device-to-device of the key tensor
// (counted read + write), the tensor-core rate is the dense rate of the format the op computes
// in (the "fmt" column): bf16 — the larger of cuBLAS's bf16 GEMM and the mma.sync peak of
// kernels/attention/bench/mma_peak.cu (until session 51 the mma.sync peak alone, ~28 % lower) —
// or, for the ops the int8 scorer runs (score_rows*, batch / seq score), int8 — the larger of
// cuBLAS's int8 GEMM and the int8 mma.sync peak (since session 52; the bf16 rate before, half of
// it, which made those rows' FLOP roof optimistic for us). Before timing,
// the scores of the first 16384 positions of every row (CPU body on those positions), the full
// top-k rows and the candidate masks (CPU bodies on the GPU's scores) are compared; a mismatch
// makes the exit code 1. The selections get their GPU workspace
// (*CudaWorkspaceBytes) from one buffer allocated before timing. "score" is the default scorer on
// bf16 keys (the exact CUDA-core one); "score_rows" the default scorer on the same keys as 68-byte
// FP4 rows (k_rows: the int8 tensor-core scorer; keys W × 68 B), its fallback column the fraction
// of (row, head, position) dot products it recomputed exactly (cuda_rechecks over one call);
// "score_rows_exact" k_rows through the exact CUDA-core scorer (cuda_exact_only); "score_rows_lean"
// the int8 scorer's lean kernel and its patch (cuda_i8_lean, session 61). Each is checked against
// the CPU the same way.
//
// Batched decode (indexer.h "Batched decode"), 8 and 64 sequences × 65,536 keys each, every
// sequence its own slice of one FP4-row pool (the 2^20 rows above, repeated: distinct addresses,
// no cache reuse) and its own q and w: "batch_score" (LaunchIndexerScoreBatch, one launch; bytes
// B × 65,536 × (68 + 2) + q, w) and "batch_topk512" (LaunchIndexerTopkBatch; bytes B × 65,536 × 2
// + B × 512 × 4), against "seq_score" / "seq_topk512", the same work as one LaunchIndexerScore /
// LaunchIndexerTopk per sequence (the layer bench's old loop); "batch_score_lean" the batched
// launch with cuda_i8_lean (session 61). The batched outputs are compared with the per-sequence
// ones bit for bit first, the lean ones with the batched ones (a mismatch makes the exit code 1).
// "score_rows_cand": the k_rows scores of those rows restricted to the candidate blocks of their
// own scores (a Reindex layer's call; checked against the unmasked scores, −inf off the mask).
// "batch_score_cand": the same batched scores with a Reindex layer's candidate mask (blocks of 8
// positions, each kept with probability 1/4); bytes: the kept keys' rows, the mask and the scores
// row; FLOPs: the kept keys'. Checked first against the unmasked scores (−inf off the mask).
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <functional>
#include <random>
#include <string>
#include <vector>

#include "common/base/check.h"
#include "common/base/thread_pool.h"
#include "common/formats/kv_row.h"
#include "kernels/attention/bench/mma_peak.h"
#include "kernels/common/bench_flags.h"
#include "kernels/common/cuda_check.h"
#include "kernels/common/gpu_bench.h"
#include "kernels/indexer/indexer.h"

namespace flashserve::kernels {
namespace {

constexpr int64_t kHeads = 32;
constexpr int64_t kDim = 128;
constexpr int64_t kTopk = 512;
constexpr int64_t kCheckWidth = 16384;

struct Options {
  int iters = 20;
  int warmup = 3;
  int64_t width = int64_t{1} << 20;
};

// e2m1 magnitudes {0, 0.5, 1, 1.5, 2, 3, 4, 6} as bf16 bits.
constexpr uint16_t kE2m1[8] = {0x0000, 0x3F00, 0x3F80, 0x3FC0, 0x4000, 0x4040, 0x4080, 0x40C0};

// FP4-dequantised bf16: e2m1 value × 2^scale_exp, one scale per 32 consecutive values.
std::vector<uint16_t> Fp4Dequantised(int64_t n, uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::vector<uint16_t> x(static_cast<size_t>(n));
  int scale_exp = 0;
  for (int64_t i = 0; i < n; ++i) {
    if (i % 32 == 0) scale_exp = static_cast<int>(rng() % 4) - 3;  // 2^-3 .. 2^0
    const uint16_t m = kE2m1[rng() % 8];
    uint16_t v = m == 0 ? uint16_t{0} : static_cast<uint16_t>(m + scale_exp * 128);
    if (v != 0 && (rng() & 1) != 0) v |= 0x8000;
    x[static_cast<size_t>(i)] = v;
  }
  return x;
}

DeviceBuffer Upload(const std::vector<uint16_t>& host) {
  DeviceBuffer d(host.size() * 2);
  d.CopyFromHost(host.data(), host.size() * 2);
  return d;
}

constexpr bool kInt8 = true;  // Bench::Add: the op runs the int8 scorer

struct Row {
  std::string op;
  int64_t rows = 0;
  double us = 0, mb = 0, gflop = 0, roof_us = 0;
  bool int8 = false;     // FLOPs at the int8 tensor rate (the int8 scorer), else bf16
  double fallback = -1;  // int8 scores: fraction of (row, head, position) dot products recomputed
};

class Bench {
 public:
  Bench(Options o, double copy_gbps, double tc_tflops, double int8_tops)
      : o_(o), copy_gbps_(copy_gbps), tc_tflops_(tc_tflops), int8_tops_(int8_tops) {}

  void Run(int64_t rows, const std::vector<uint16_t>& k, const DeviceBuffer& dk,
           const std::vector<uint8_t>& krows, const DeviceBuffer& dkrows) {
    const int64_t width = o_.width;
    const std::vector<uint16_t> q = Fp4Dequantised(rows * kHeads * kDim, 11 + rows);
    std::vector<uint16_t> w(static_cast<size_t>(rows * kHeads));
    std::mt19937 rng(static_cast<uint32_t>(rows));
    for (uint16_t& v : w) v = static_cast<uint16_t>(0x3C00 + rng() % 256);  // ~2^-7 .. 2^-6
    DeviceBuffer dq = Upload(q), dw = Upload(w);
    DeviceBuffer dscores(static_cast<size_t>(rows * width) * 2);
    DeviceBuffer dindices(static_cast<size_t>(rows * kTopk) * 4);
    DeviceBuffer dmask(static_cast<size_t>(rows * width));
    // The split selections' GPU workspace (one buffer, the two calls run in stream order).
    const size_t ws_bytes = std::max(IndexerTopkCudaWorkspaceBytes(rows, width),
                                     CandidateBlocksCudaWorkspaceBytes(rows, width, 8));
    DeviceBuffer dws(std::max<size_t>(ws_bytes, 8));

    IndexerScoreParams sp;
    sp.tokens = rows;
    sp.heads = kHeads;
    sp.head_dim = kDim;
    sp.width = width;
    sp.start_pos = width - rows;
    sp.ratio = 1;
    sp.q = dq.get<uint16_t>();
    sp.q_stride = kHeads * kDim;
    sp.k = dk.get<uint16_t>();
    sp.k_stride = kDim;
    sp.w = dw.get<uint16_t>();
    sp.w_stride = kHeads;
    sp.scores = dscores.get<uint16_t>();
    sp.scores_stride = width;
    IndexerTopkParams tp;
    tp.tokens = rows;
    tp.width = width;
    tp.start_pos = sp.start_pos;
    tp.ratio = 1;
    tp.index_topk = kTopk;
    tp.offset = 128;
    tp.scores = sp.scores;
    tp.scores_stride = width;
    tp.indices = dindices.get<int32_t>();
    tp.indices_stride = kTopk;
    tp.workspace = dws.get();
    tp.workspace_bytes = ws_bytes;
    CandidateBlocksParams cp;
    cp.tokens = rows;
    cp.width = width;
    cp.start_pos = sp.start_pos;
    cp.ratio = 1;
    cp.block_size = 8;
    cp.topk_blocks = 2048;
    cp.scores = sp.scores;
    cp.scores_stride = width;
    cp.candidates = dmask.get<uint8_t>();
    cp.candidates_stride = width;
    cp.workspace = dws.get();
    cp.workspace_bytes = ws_bytes;

    IndexerScoreParams rows_p = sp;  // the same keys as FP4 serving rows
    rows_p.k = nullptr;
    rows_p.k_stride = 0;
    rows_p.k_rows = dkrows.get<uint8_t>();
    rows_p.k_row_stride = formats::IndexKRowBytes(kDim);
    IndexerScoreParams rows_exact = rows_p;
    rows_exact.cuda_exact_only = true;
    IndexerScoreParams rows_lean = rows_p;
    rows_lean.cuda_i8_lean = true;
    {  // the lean kernel's deferred warp tiles (left to its patch launch)
      DeviceBuffer ddeferred(sizeof(unsigned long long));
      CUDA_CHECK(cudaMemset(ddeferred.get(), 0, sizeof(unsigned long long)));
      IndexerScoreParams counted = rows_lean;
      counted.cuda_i8_deferred = ddeferred.get<unsigned long long>();
      CHECK_OK(LaunchIndexerScore(counted, nullptr));
      unsigned long long deferred = 0;
      CUDA_CHECK(cudaDeviceSynchronize());
      ddeferred.CopyToHost(&deferred, sizeof(deferred));
      std::printf("rows %ld: the lean kernel deferred %llu of %ld warp tiles\n",
                  static_cast<long>(rows), deferred,
                  static_cast<long>((rows + 7) / 8 * ((width + 31) / 32)));
    }
    Verify(rows, q, w, k, krows.data(), dscores, dindices, tp, "int8 lean scorer, k_rows");
    std::vector<uint16_t> lean_scores(static_cast<size_t>(rows * width));
    dscores.CopyToHost(lean_scores.data(), lean_scores.size() * 2);
    CUDA_CHECK(cudaMemset(dscores.get(), 0xFF, lean_scores.size() * 2));  // poison: NaN
    const double rows_rate = CountedScore(rows_p, rows);
    Verify(rows, q, w, k, krows.data(), dscores, dindices, tp, "int8 scorer, k_rows");
    {  // every score of the lean kernel and its patch against the default launch's
      std::vector<uint16_t> scores(lean_scores.size());
      dscores.CopyToHost(scores.data(), scores.size() * 2);
      int64_t differ = 0;
      for (size_t i = 0; i < scores.size(); ++i) differ += scores[i] != lean_scores[i];
      std::printf("rows %ld: %ld of %zu lean scores differ from the default launch's\n",
                  static_cast<long>(rows), static_cast<long>(differ), scores.size());
      if (differ > 0) ++failures_;
    }
    CHECK_OK(LaunchIndexerScore(rows_exact, nullptr));
    Verify(rows, q, w, k, krows.data(), dscores, dindices, tp, "exact scorer, k_rows");
    CHECK_OK(LaunchIndexerScore(sp, nullptr));
    CHECK_OK(LaunchIndexerTopk(tp, nullptr));
    Verify(rows, q, w, k, nullptr, dscores, dindices, tp);
    CHECK_OK(LaunchCandidateBlocks(cp, nullptr));
    VerifyCandidates(rows, dscores, dmask, cp);

    const double key_bytes = static_cast<double>(width) * kDim * 2;
    const double score_bytes = static_cast<double>(rows) * width * 2;
    const double qw_bytes = static_cast<double>(q.size() + w.size()) * 2;
    const double flops = 2.0 * kHeads * kDim * static_cast<double>(width) * rows;
    const double index_bytes = static_cast<double>(rows) * kTopk * 4;
    const double mask_bytes = static_cast<double>(rows) * width;
    const double row_bytes = static_cast<double>(width) * formats::IndexKRowBytes(kDim);
    Add("score", rows, key_bytes + score_bytes + qw_bytes, flops,
        [&] { CHECK_OK(LaunchIndexerScore(sp, nullptr)); });
    Add(
        "score_rows", rows, row_bytes + score_bytes + qw_bytes, flops,
        [&] { CHECK_OK(LaunchIndexerScore(rows_p, nullptr)); }, kInt8);
    rows_.back().fallback = rows_rate;
    Add("score_rows_exact", rows, row_bytes + score_bytes + qw_bytes, flops,
        [&] { CHECK_OK(LaunchIndexerScore(rows_exact, nullptr)); });
    Add(
        "score_rows_lean", rows, row_bytes + score_bytes + qw_bytes, flops,
        [&] { CHECK_OK(LaunchIndexerScore(rows_lean, nullptr)); }, kInt8);
    Add("topk512", rows, score_bytes + index_bytes, 0,
        [&] { CHECK_OK(LaunchIndexerTopk(tp, nullptr)); });
    Add("score+topk512", rows, key_bytes + qw_bytes + index_bytes, flops, [&] {
      CHECK_OK(LaunchIndexerScore(sp, nullptr));
      CHECK_OK(LaunchIndexerTopk(tp, nullptr));
    });
    Add("cand_blocks", rows, score_bytes + mask_bytes, 0,
        [&] { CHECK_OK(LaunchCandidateBlocks(cp, nullptr)); });

    // A Reindex layer's call at this width: the k_rows scores restricted to the candidate blocks
    // of these rows' own scores (2,048 blocks of 8 per row; the mask CandidateBlocks just wrote).
    // Checked against the unmasked int8 scores (−inf off the mask); bytes: the key rows of the
    // rows' union of blocks, the mask and the scores rows; FLOPs: the kept positions'.
    CHECK_OK(LaunchCandidateBlocks(cp, nullptr));
    DeviceBuffer dscores_cand(static_cast<size_t>(rows * width) * 2);
    IndexerScoreParams cand_p = rows_p;
    cand_p.candidates = dmask.get<uint8_t>();
    cand_p.candidates_stride = width;
    cand_p.scores = dscores_cand.get<uint16_t>();
    CHECK_OK(LaunchIndexerScore(rows_p, nullptr));
    CHECK_OK(LaunchIndexerScore(cand_p, nullptr));
    CUDA_CHECK(cudaDeviceSynchronize());
    const size_t n = static_cast<size_t>(rows * width);
    std::vector<uint16_t> full(n), masked(n);
    std::vector<uint8_t> mask(n);
    dscores.CopyToHost(full.data(), n * 2);
    dscores_cand.CopyToHost(masked.data(), n * 2);
    dmask.CopyToHost(mask.data(), n);
    int64_t bad = 0, kept = 0, union_keys = 0;
    for (size_t i = 0; i < n; ++i) {
      bad += masked[i] != (mask[i] != 0 ? full[i] : uint16_t{0xFF80});
      kept += mask[i] != 0;
    }
    for (int64_t t = 0; t < width; ++t) {
      bool any = false;
      for (int64_t r = 0; r < rows; ++r) any = any || mask[r * width + t] != 0;
      union_keys += any;
    }
    std::printf(
        "rows %ld, candidate blocks (%ld positions per row, union %ld): %ld score mismatches vs "
        "the unmasked k_rows scores\n",
        static_cast<long>(rows), static_cast<long>(kept / rows), static_cast<long>(union_keys),
        static_cast<long>(bad));
    if (bad != 0) ++failures_;
    Add(
        "score_rows_cand", rows,
        static_cast<double>(union_keys) * formats::IndexKRowBytes(kDim) + score_bytes + mask_bytes +
            qw_bytes,
        2.0 * kHeads * kDim * static_cast<double>(kept),
        [&] { CHECK_OK(LaunchIndexerScore(cand_p, nullptr)); }, kInt8);
  }

  // B decode sequences of kDecodeKeys keys each (see the file comment).
  void RunBatch(int64_t seqs, const std::vector<uint8_t>& krows) {
    constexpr int64_t kDecodeKeys = 65536;
    const int64_t rb = formats::IndexKRowBytes(kDim);
    const int64_t pool_rows = seqs * kDecodeKeys;
    const int64_t src_rows = static_cast<int64_t>(krows.size()) / rb;
    std::vector<uint8_t> pool(static_cast<size_t>(pool_rows * rb));
    for (int64_t r = 0; r < pool_rows; ++r) {
      std::copy_n(krows.begin() + (r % src_rows) * rb, rb, pool.begin() + r * rb);
    }
    DeviceBuffer dpool(pool.size());
    dpool.CopyFromHost(pool.data(), pool.size());
    const std::vector<uint16_t> q = Fp4Dequantised(seqs * kHeads * kDim, 101 + seqs);
    std::vector<uint16_t> w(static_cast<size_t>(seqs * kHeads));
    std::mt19937 rng(static_cast<uint32_t>(seqs));
    for (uint16_t& v : w) v = static_cast<uint16_t>(0x3C00 + rng() % 256);
    DeviceBuffer dq = Upload(q), dw = Upload(w);
    std::vector<int64_t> offsets(static_cast<size_t>(seqs));
    for (int64_t b = 0; b < seqs; ++b) offsets[static_cast<size_t>(b)] = b * kDecodeKeys;
    const std::vector<int32_t> widths(static_cast<size_t>(seqs), kDecodeKeys);
    DeviceBuffer doff(offsets.size() * 8), dwidths(widths.size() * 4);
    doff.CopyFromHost(offsets.data(), offsets.size() * 8);
    dwidths.CopyFromHost(widths.data(), widths.size() * 4);
    const size_t n_scores = static_cast<size_t>(seqs * kDecodeKeys);
    DeviceBuffer dscores(n_scores * 2), dscores_seq(n_scores * 2);
    DeviceBuffer dindices(static_cast<size_t>(seqs * kTopk) * 4), dindices_seq(dindices.bytes());
    const size_t ws_bytes = IndexerTopkCudaWorkspaceBytes(seqs, kDecodeKeys);
    DeviceBuffer dws(std::max<size_t>(ws_bytes, 8));

    IndexerScoreBatchParams bp;
    bp.batch = seqs;
    bp.heads = kHeads;
    bp.head_dim = kDim;
    bp.max_width = kDecodeKeys;
    bp.q = dq.get<uint16_t>();
    bp.q_stride = kHeads * kDim;
    bp.w = dw.get<uint16_t>();
    bp.w_stride = kHeads;
    bp.k_rows = dpool.get<uint8_t>();
    bp.k_row_stride = rb;
    bp.k_row_offsets = doff.get<int64_t>();
    bp.widths = dwidths.get<int32_t>();
    bp.scores = dscores.get<uint16_t>();
    bp.scores_stride = kDecodeKeys;
    IndexerTopkBatchParams tb;
    tb.batch = seqs;
    tb.max_width = kDecodeKeys;
    tb.index_topk = kTopk;
    tb.offset = 128;
    tb.widths = dwidths.get<int32_t>();
    tb.scores = bp.scores;
    tb.scores_stride = kDecodeKeys;
    tb.indices = dindices.get<int32_t>();
    tb.indices_stride = kTopk;
    tb.workspace = dws.get();
    tb.workspace_bytes = ws_bytes;
    // The per-sequence form (one launch per sequence), into the *_seq buffers.
    auto seq_scores = [&] {
      for (int64_t b = 0; b < seqs; ++b) {
        IndexerScoreParams p;
        p.tokens = 1;
        p.heads = kHeads;
        p.head_dim = kDim;
        p.width = kDecodeKeys;
        p.start_pos = kDecodeKeys - 1;
        p.q = dq.get<uint16_t>() + b * kHeads * kDim;
        p.q_stride = kHeads * kDim;
        p.w = dw.get<uint16_t>() + b * kHeads;
        p.w_stride = kHeads;
        p.k_rows = dpool.get<uint8_t>() + b * kDecodeKeys * rb;
        p.k_row_stride = rb;
        p.scores = dscores_seq.get<uint16_t>() + b * kDecodeKeys;
        p.scores_stride = kDecodeKeys;
        CHECK_OK(LaunchIndexerScore(p, nullptr));
      }
    };
    auto seq_topk = [&] {
      for (int64_t b = 0; b < seqs; ++b) {
        IndexerTopkParams p;
        p.tokens = 1;
        p.width = kDecodeKeys;
        p.start_pos = kDecodeKeys - 1;
        p.index_topk = kTopk;
        p.offset = 128;
        p.scores = dscores_seq.get<uint16_t>() + b * kDecodeKeys;
        p.scores_stride = kDecodeKeys;
        p.indices = dindices_seq.get<int32_t>() + b * kTopk;
        p.indices_stride = kTopk;
        p.workspace = dws.get();
        p.workspace_bytes = ws_bytes;
        CHECK_OK(LaunchIndexerTopk(p, nullptr));
      }
    };
    CHECK_OK(LaunchIndexerScoreBatch(bp, nullptr));
    CHECK_OK(LaunchIndexerTopkBatch(tb, nullptr));
    seq_scores();
    seq_topk();
    CUDA_CHECK(cudaDeviceSynchronize());
    std::vector<uint16_t> s1(n_scores), s2(n_scores);
    dscores.CopyToHost(s1.data(), n_scores * 2);
    dscores_seq.CopyToHost(s2.data(), n_scores * 2);
    std::vector<int32_t> i1(static_cast<size_t>(seqs * kTopk)), i2(i1.size());
    dindices.CopyToHost(i1.data(), i1.size() * 4);
    dindices_seq.CopyToHost(i2.data(), i2.size() * 4);
    int64_t bad_s = 0, bad_i = 0;
    for (size_t i = 0; i < n_scores; ++i) bad_s += s1[i] != s2[i];
    for (size_t i = 0; i < i1.size(); ++i) bad_i += i1[i] != i2[i];
    std::printf(
        "batched decode, %ld sequences x %ld keys: %ld score, %ld top-k mismatches vs the "
        "per-sequence launches\n",
        static_cast<long>(seqs), static_cast<long>(kDecodeKeys), static_cast<long>(bad_s),
        static_cast<long>(bad_i));
    if (bad_s != 0 || bad_i != 0) ++failures_;
    // The lean kernel and its patch (cuda_i8_lean) into the poisoned buffer: the batched launch's
    // scores (s1) byte for byte; its deferred warp tiles counted once.
    IndexerScoreBatchParams bp_lean = bp;
    bp_lean.cuda_i8_lean = true;
    {
      DeviceBuffer ddeferred(sizeof(unsigned long long));
      CUDA_CHECK(cudaMemset(ddeferred.get(), 0, sizeof(unsigned long long)));
      CUDA_CHECK(cudaMemset(dscores.get(), 0xFF, n_scores * 2));
      IndexerScoreBatchParams counted = bp_lean;
      counted.cuda_i8_deferred = ddeferred.get<unsigned long long>();
      CHECK_OK(LaunchIndexerScoreBatch(counted, nullptr));
      CUDA_CHECK(cudaDeviceSynchronize());
      unsigned long long deferred = 0;
      ddeferred.CopyToHost(&deferred, sizeof(deferred));
      std::vector<uint16_t> s3(n_scores);
      dscores.CopyToHost(s3.data(), n_scores * 2);
      int64_t bad_l = 0;
      for (size_t i = 0; i < n_scores; ++i) bad_l += s3[i] != s1[i];
      std::printf(
          "batched decode, %ld sequences: %ld lean scores differ from the batched launch's; the "
          "lean kernel deferred %llu of %ld warp tiles\n",
          static_cast<long>(seqs), static_cast<long>(bad_l), deferred,
          static_cast<long>(seqs * ((kDecodeKeys + 31) / 32)));
      if (bad_l != 0) ++failures_;
    }

    const double keys = static_cast<double>(pool_rows);
    const double score_bytes = keys * (rb + 2) + static_cast<double>(q.size() + w.size()) * 2;
    const double flops = 2.0 * kHeads * kDim * keys;
    const double topk_bytes = keys * 2 + static_cast<double>(seqs) * kTopk * 4;
    Add(
        "batch_score", seqs, score_bytes, flops,
        [&] { CHECK_OK(LaunchIndexerScoreBatch(bp, nullptr)); }, kInt8);
    Add(
        "batch_score_lean", seqs, score_bytes, flops,
        [&] { CHECK_OK(LaunchIndexerScoreBatch(bp_lean, nullptr)); }, kInt8);
    Add("seq_score", seqs, score_bytes, flops, seq_scores, kInt8);
    Add("batch_topk512", seqs, topk_bytes, 0,
        [&] { CHECK_OK(LaunchIndexerTopkBatch(tb, nullptr)); });
    Add("seq_topk512", seqs, topk_bytes, 0, seq_topk);

    // A Reindex layer's call: candidate blocks (blocks of 8 positions, each kept with probability
    // 1/4) as the mask. Its scores must be the unmasked ones where the mask is set and −inf
    // elsewhere (checked first); bytes and FLOPs count the candidate positions' keys only.
    std::vector<uint8_t> mask(n_scores);
    std::mt19937_64 mrng(7 + static_cast<uint64_t>(seqs));
    int64_t kept = 0;
    for (size_t i = 0; i < n_scores; i += 8) {
      const uint8_t keep = mrng() % 4 == 0 ? 1 : 0;
      std::fill_n(mask.begin() + static_cast<std::ptrdiff_t>(i), 8, keep);
      kept += 8 * keep;
    }
    DeviceBuffer dmask(mask.size());
    dmask.CopyFromHost(mask.data(), mask.size());
    IndexerScoreBatchParams bm = bp;
    bm.candidates = dmask.get<uint8_t>();
    bm.candidates_stride = kDecodeKeys;
    bm.scores = dscores_seq.get<uint16_t>();
    CHECK_OK(LaunchIndexerScoreBatch(bp, nullptr));
    CHECK_OK(LaunchIndexerScoreBatch(bm, nullptr));
    CUDA_CHECK(cudaDeviceSynchronize());
    dscores.CopyToHost(s1.data(), n_scores * 2);
    dscores_seq.CopyToHost(s2.data(), n_scores * 2);
    int64_t bad_m = 0;
    for (size_t i = 0; i < n_scores; ++i)
      bad_m += s2[i] != (mask[i] != 0 ? s1[i] : uint16_t{0xFF80});
    std::printf(
        "batched decode, %ld sequences, candidate blocks (%.1f %% of positions): %ld "
        "score mismatches vs the unmasked scores\n",
        static_cast<long>(seqs), 100.0 * static_cast<double>(kept) / keys,
        static_cast<long>(bad_m));
    if (bad_m != 0) ++failures_;
    const double kept_d = static_cast<double>(kept);
    Add(
        "batch_score_cand", seqs,
        kept_d * rb + keys * 3 + static_cast<double>(q.size() + w.size()) * 2,
        2.0 * kHeads * kDim * kept_d, [&] { CHECK_OK(LaunchIndexerScoreBatch(bm, nullptr)); },
        kInt8);
  }

  int Print(const std::string& command) const {
    std::printf(
        "\nroofs: d2d copy %.0f GB/s (read + write), bf16 tensor %.0f TFLOP/s, int8 tensor %.0f "
        "TOP/s (fmt: the rate of the op's FLOPs)\n",
        copy_gbps_, tc_tflops_, int8_tops_);
    std::printf("%-16s %5s %11s %10s %9s %8s %11s %7s %9s %5s\n", "op", "rows", "median_us", "MB",
                "GFLOP", "TFLOP/s", "roofline_us", "ratio", "fallback", "fmt");
    for (const Row& r : rows_) {
      char fallback[32] = "-";
      if (r.fallback >= 0) {
        std::snprintf(fallback, sizeof(fallback), "%.3f%%", 100.0 * r.fallback);
      }
      std::printf("%-16s %5ld %11.1f %10.1f %9.1f %8.2f %11.1f %7.3f %9s %5s\n", r.op.c_str(),
                  static_cast<long>(r.rows), r.us, r.mb, r.gflop, r.gflop / r.us / 1e3, r.roof_us,
                  r.roof_us / r.us, fallback, r.int8 ? "int8" : "bf16");
    }
    std::printf(
        "\ncorrectness (scores of the first %ld positions, full top-k rows and candidate "
        "masks vs CPU): %s\n",
        static_cast<long>(kCheckWidth), failures_ == 0 ? "OK" : "MISMATCH");
    std::printf("command: %s\n", command.c_str());
    return failures_ == 0 ? 0 : 1;
  }

 private:
  // `int8`: the op computes in int8 (the int8 scorer), so its FLOPs count at the int8 rate.
  void Add(const char* op, int64_t rows, double bytes, double flops,
           const std::function<void()>& launch, bool int8 = false) {
    const double us = MedianEventMicros(o_.warmup, o_.iters, launch);
    const double rate = int8 ? int8_tops_ : tc_tflops_;
    const double roof = std::max(bytes / copy_gbps_ / 1e3, flops / rate / 1e6);
    rows_.push_back({op, rows, us, bytes / 1e6, flops / 1e9, roof, int8});
  }

  // Runs `p` once with a fresh device counter; returns fallbacks per dot product.
  double CountedScore(IndexerScoreParams p, int64_t rows) {
    DeviceBuffer dcount(sizeof(unsigned long long));
    CUDA_CHECK(cudaMemset(dcount.get(), 0, sizeof(unsigned long long)));
    p.cuda_rechecks = dcount.get<unsigned long long>();
    CHECK_OK(LaunchIndexerScore(p, nullptr));
    unsigned long long count = 0;
    CUDA_CHECK(cudaDeviceSynchronize());
    dcount.CopyToHost(&count, sizeof(count));
    return static_cast<double>(count) / (static_cast<double>(rows) * o_.width * kHeads);
  }

  // The GPU's scores (and, unless scores_only names the scorer, its top-k) against the CPU.
  // krows: the keys as FP4 rows (the CPU then reads them through k_rows), or null.
  void Verify(int64_t rows, const std::vector<uint16_t>& q, const std::vector<uint16_t>& w,
              const std::vector<uint16_t>& k, const uint8_t* krows, const DeviceBuffer& dscores,
              const DeviceBuffer& dindices, const IndexerTopkParams& tp,
              const char* scores_only = nullptr) {
    const int64_t width = o_.width;
    CUDA_CHECK(cudaDeviceSynchronize());
    std::vector<uint16_t> scores(static_cast<size_t>(rows * width));
    dscores.CopyToHost(scores.data(), scores.size() * 2);
    std::vector<int32_t> indices(static_cast<size_t>(rows * kTopk));
    dindices.CopyToHost(indices.data(), indices.size() * 4);
    ThreadPool pool(4);
    int64_t bad_scores = 0, bad_indices = 0;
    const int64_t cw = std::min(width, kCheckWidth);
    for (int64_t r = 0; r < rows; ++r) {
      // Row r alone over the first cw positions (all visible to every row).
      std::vector<uint16_t> want(static_cast<size_t>(cw));
      IndexerScoreParams p;
      p.tokens = 1;
      p.heads = kHeads;
      p.head_dim = kDim;
      p.width = cw;
      p.start_pos = cw - 1;
      p.q = q.data() + r * kHeads * kDim;
      p.q_stride = kHeads * kDim;
      if (krows != nullptr) {
        p.k_rows = krows;
        p.k_row_stride = formats::IndexKRowBytes(kDim);
      } else {
        p.k = k.data();
        p.k_stride = kDim;
      }
      p.w = w.data() + r * kHeads;
      p.w_stride = kHeads;
      p.scores = want.data();
      p.scores_stride = cw;
      CHECK_OK(IndexerScoreCpu(p, &pool));
      for (int64_t t = 0; t < cw; ++t) bad_scores += want[t] != scores[r * width + t];
    }
    if (scores_only != nullptr) {
      std::printf("rows %ld (%s): %ld of %ld checked scores differ from the CPU\n",
                  static_cast<long>(rows), scores_only, static_cast<long>(bad_scores),
                  static_cast<long>(rows * cw));
      if (bad_scores > 0) ++failures_;
      return;
    }
    std::vector<int32_t> want(indices.size());
    std::vector<uint64_t> ws(static_cast<size_t>(width));
    IndexerTopkParams cpu = tp;
    cpu.scores = scores.data();
    cpu.indices = want.data();
    cpu.workspace = ws.data();
    cpu.workspace_bytes = IndexerTopkWorkspaceBytes(width, 1);
    CHECK_OK(IndexerTopkCpu(cpu, nullptr));
    for (size_t i = 0; i < want.size(); ++i) bad_indices += want[i] != indices[i];
    std::printf("rows %ld: %ld of %ld checked scores and %ld of %zu indices differ from the CPU\n",
                static_cast<long>(rows), static_cast<long>(bad_scores),
                static_cast<long>(rows * cw), static_cast<long>(bad_indices), want.size());
    if (bad_scores + bad_indices > 0) ++failures_;
  }

  // The candidate masks of the GPU's scores against the CPU body, every position of every row.
  void VerifyCandidates(int64_t rows, const DeviceBuffer& dscores, const DeviceBuffer& dmask,
                        const CandidateBlocksParams& cp) {
    const int64_t width = o_.width;
    CUDA_CHECK(cudaDeviceSynchronize());
    std::vector<uint16_t> scores(static_cast<size_t>(rows * width));
    dscores.CopyToHost(scores.data(), scores.size() * 2);
    std::vector<uint8_t> mask(static_cast<size_t>(rows * width));
    dmask.CopyToHost(mask.data(), mask.size());
    std::vector<uint8_t> want(mask.size());
    std::vector<uint64_t> ws(static_cast<size_t>(CandidateBlockCount(width, cp.block_size)));
    CandidateBlocksParams cpu = cp;
    cpu.scores = scores.data();
    cpu.candidates = want.data();
    cpu.workspace = ws.data();
    cpu.workspace_bytes = CandidateBlocksWorkspaceBytes(width, cp.block_size, 1);
    CHECK_OK(CandidateBlocksCpu(cpu, nullptr));
    int64_t bad = 0;
    for (size_t i = 0; i < want.size(); ++i) bad += want[i] != mask[i];
    std::printf("rows %ld: %ld of %zu candidate mask entries differ from the CPU\n",
                static_cast<long>(rows), static_cast<long>(bad), want.size());
    if (bad > 0) ++failures_;
  }

  Options o_;
  double copy_gbps_, tc_tflops_, int8_tops_;
  std::vector<Row> rows_;
  int failures_ = 0;
};

int Main(int argc, char** argv) {
  Options o;
  std::string command = argv[0];
  if (!ParseBenchFlags(
          argc, argv,
          {{"--iters", &o.iters}, {"--warmup", &o.warmup}, {"--width", &o.width, kTopk}},
          &command)) {
    return 2;
  }
  if (!CudaDeviceAvailable()) {
    std::fprintf(stderr, "bench_indexer: no CUDA device\n");
    return 1;
  }
  cudaDeviceProp prop{};
  CUDA_CHECK(cudaGetDeviceProperties(&prop, 0));
  std::printf("device: %s, %d SMs, L2 %d MB; median of %d launches after %d warm-up; width %ld\n",
              prop.name, prop.multiProcessorCount, prop.l2CacheSize >> 20, o.iters, o.warmup,
              static_cast<long>(o.width));
  const std::vector<uint16_t> k = Fp4Dequantised(o.width * kDim, 7);
  DeviceBuffer dk = Upload(k), copy(k.size() * 2);
  // The same keys as FP4 serving rows (the CPU encoder; they decode to k's values).
  const int64_t row_bytes = formats::IndexKRowBytes(kDim);
  std::vector<uint8_t> krows(static_cast<size_t>(o.width * row_bytes));
  for (int64_t t = 0; t < o.width; ++t) {
    CHECK_OK(
        formats::EncodeIndexKRow({k.data() + t * kDim, static_cast<size_t>(kDim)},
                                 {krows.data() + t * row_bytes, static_cast<size_t>(row_bytes)}));
  }
  DeviceBuffer dkrows(krows.size());
  dkrows.CopyFromHost(krows.data(), krows.size());
  const double copy_us = MedianEventMicros(o.warmup, o.iters, [&] {
    CUDA_CHECK(cudaMemcpyAsync(copy.get(), dk.get(), k.size() * 2, cudaMemcpyDeviceToDevice));
  });
  const double copy_gbps = 2.0 * static_cast<double>(k.size()) * 2 / copy_us / 1e3;
  const attn_bench::Bf16TensorRates rates = attn_bench::MeasureBf16TensorRates();
  std::printf("bf16 tensor rates: mma.sync %.0f, cuBLAS %.0f TFLOP/s (%s)\n", rates.mma,
              rates.cublas, rates.cublas_source.c_str());
  const attn_bench::Int8TensorRates int8 = attn_bench::MeasureInt8TensorRates();
  std::printf("int8 tensor rates: mma.sync %.0f, cuBLAS %.0f TOP/s (%s)\n", int8.mma, int8.cublas,
              int8.cublas_source.c_str());
  Bench bench(o, copy_gbps, rates.dense, int8.dense);
  for (int64_t rows : {1, 8}) bench.Run(rows, k, dk, krows, dkrows);
  for (int64_t seqs : {8, 64}) bench.RunBatch(seqs, krows);
  return bench.Print(command);
}

}  // namespace
}  // namespace flashserve::kernels

int main(int argc, char** argv) { return flashserve::kernels::Main(argc, argv); }
