// Plan, workspace sizing and validation of the CUDA FP8 Linear (gemm_cuda.h). Host-only, no
// CUDA: built into fs_kernels_gemm so the CPU test covers it.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <string>
#include <utility>

#include "absl/strings/str_format.h"
#include "kernels/gemm/gemm_cuda.h"

namespace flashserve::kernels {
namespace {

// CTAs a plan aims for before it stops splitting K: two per SM of a 132-SM H100 / H200. A
// constant, not the device's SM count, so the bits never depend on the device.
constexpr int64_t kTargetCtas = 264;
constexpr int64_t kWgmmaTargetCtas = 132;  // the wgmma kernel: one CTA per SM
// The weight-streaming kernel: two 256-thread CTAs per SM (its register ring holds the bytes in
// flight; README "CUDA: the weight-streaming decode kernel").
constexpr int64_t kStreamTargetCtas = 264;
// The automatic plan considers a wgmma kernel from this M (one 128-row tile) and N (one tile:
// 128 columns for the FP8 kernel, 256 for the bf16-expansion one) on.
constexpr int64_t kWgmmaMinM = 128;
constexpr int64_t kMaxN = int64_t{65535} * kLinearCudaTileN;  // grid.y limit
constexpr int64_t kMaxM = (int64_t{1} << 31) - 1;

int64_t CeilDiv(int64_t a, int64_t b) { return (a + b - 1) / b; }
size_t AlignUp(size_t v, size_t a) { return (v + a - 1) / a * a; }

bool Aligned(const void* p, uintptr_t a) { return reinterpret_cast<uintptr_t>(p) % a == 0; }

absl::Status Invalid(const char* field, const std::string& why) {
  return absl::InvalidArgumentError(absl::StrFormat("LaunchLinearFp8: %s %s", field, why));
}

// The activation region of a plan: none for the stream kernel (it quantises into shared memory).
size_t QdqBytes(const LinearCudaPlan& plan, int64_t m, int64_t k) {
  return plan.kernel == LinearCudaKernel::kStream ? 0 : LinearCudaActivationBytes(m, k);
}

// Fills k_steps (K in units of p.k_step) and the splits: split_k when forced, else enough to
// bring the m × n tiles up to `target` CTAs (at most kLinearCudaMaxSplits); every split gets at
// least one step.
void FillSplits(LinearCudaPlan& p, int64_t k, int64_t split_k, int64_t target) {
  p.k_steps = CeilDiv(k, p.k_step);
  const int64_t tiles = std::max<int64_t>(1, p.m_tiles * p.n_tiles);
  int64_t splits = 1;
  if (split_k > 0) {
    splits = split_k;
  } else if (tiles < target) {
    splits = std::min(kLinearCudaMaxSplits, target / tiles);
  }
  splits = std::clamp<int64_t>(splits, 1, std::max<int64_t>(1, p.k_steps));
  p.steps_per_split = CeilDiv(p.k_steps, splits);
  p.splits = p.steps_per_split > 0 ? CeilDiv(p.k_steps, p.steps_per_split) : 1;
}

// The stream kernel: x rows as the mma's n8 operand (tile_rows 8), up to 16 rows and
// kLinearCudaStreamCols weight rows per CTA, K in units of kLinearCudaKStep. The splits are
// planned on ceil(N / 128) CTAs along N; then, when the grid is still below kStreamTargetCtas,
// n_tiles (grid.x) grows toward it, up to one m16 tile per CTA: CTA c takes the 16-row tiles
// c, c + n_tiles, .. (one per warp), so the SMs get even shares of the weight instead of 128
// consecutive rows per CTA (engram.wkv: 200 CTAs of 8 warps on 264 slots left 64 SMs with half
// the work of the other 68).
// The stream kernels' common plan fields: x rows as the n8 operand, up to 16 per m tile, 128
// weight rows per CTA (n_tiles = ceil(N / 128)), K in units of kLinearCudaKStep; no splits yet.
LinearCudaPlan StreamBasePlan(int64_t m, int64_t n) {
  LinearCudaPlan p;
  p.kernel = LinearCudaKernel::kStream;
  p.tile_rows = kLinearCudaStreamRows;
  p.tile_cols = kLinearCudaStreamCols;
  p.k_step = kLinearCudaKStep;
  p.m_tiles = CeilDiv(m, kLinearCudaStreamMaxRows);
  p.n_tiles = CeilDiv(n, p.tile_cols);
  return p;
}

// stream_ctas: the CTA target (LinearCudaParams::stream_ctas; 0: kStreamTargetCtas).
LinearCudaPlan StreamPlan(int64_t m, int64_t n, int64_t k, int64_t split_k, int64_t stream_ctas) {
  const int64_t target = stream_ctas > 0 ? stream_ctas : kStreamTargetCtas;
  LinearCudaPlan p = StreamBasePlan(m, n);
  FillSplits(p, k, split_k, target);
  const int64_t spread = target / std::max<int64_t>(1, p.splits * p.m_tiles);
  if (spread > p.n_tiles) p.n_tiles = std::min(CeilDiv(n, 16), spread);
  return p;
}

// The TMA-ring variant's plan (LinearCudaStreamTmaPays): one m tile, 128-row tiles (n_tiles =
// ceil(N / 128)), K in units of kLinearCudaKStep; its persistent CTAs (one per SM: a constant
// 132, so the bits never depend on the device) walk the (tile, split) items. Automatic splits: the
// s in 1 .. 32 minimising the busiest CTA's work, ceil(tiles · s / 132) items of (K units per
// split + 1) — the + 1 an item's cost beyond its units (its partials, the reduction's share,
// the switch between items), fitted on the H200 (stream_kernel.md "Session 31": engram.wkv
// measured 53.9 / 56.9 / 50.1 / 52.2 / 51.4 / 52.6 / 60.3 µs at 1 / 2 / 3 / 4 / 6 / 8 / 16 splits,
// the model's order but for 8; wo_b 21.2 at 3, 21.7 at 6, 24-26 at 2, 4, 8, 16; wq_b 19.1 unsplit,
// 22.0 at 2). Ties: the fewer splits.
constexpr int64_t kTmaRingCtas = 132;
LinearCudaPlan StreamTmaPlan(int64_t m, int64_t n, int64_t k, int64_t split_k) {
  LinearCudaPlan p = StreamBasePlan(m, n);
  p.tma_ring = true;
  if (split_k > 0) {
    FillSplits(p, k, split_k, kStreamTargetCtas);
    return p;
  }
  const int64_t k_steps = CeilDiv(k, p.k_step);
  int64_t best = 1, best_cost = -1;
  for (int64_t s = 1; s <= std::min(kLinearCudaMaxSplits, k_steps); ++s) {
    const int64_t steps = CeilDiv(k_steps, s);
    if (CeilDiv(k_steps, steps) != s) continue;  // the same plan as a smaller s
    const int64_t cost = CeilDiv(p.n_tiles * s, kTmaRingCtas) * (steps + 1);
    if (best_cost < 0 || cost < best_cost) best = s, best_cost = cost;
  }
  FillSplits(p, k, best, kStreamTargetCtas);
  return p;
}

// The register-sourced wgmma kernel: 256 weight rows and up to 128 x rows per CTA, K in units
// of kLinearCudaKStep, one CTA per SM (splits to fill kWgmmaTargetCtas).
LinearCudaPlan RsPlan(int64_t m, int64_t n, int64_t k, int64_t split_k) {
  LinearCudaPlan p;
  p.kernel = LinearCudaKernel::kWgmmaRs;
  p.tile_rows = kLinearCudaRsRows;
  p.tile_cols = kLinearCudaRsCols;
  p.k_step = kLinearCudaKStep;
  p.m_tiles = CeilDiv(m, kLinearCudaRsMaxRows);
  p.n_tiles = CeilDiv(n, p.tile_cols);
  FillSplits(p, k, split_k, kWgmmaTargetCtas);
  return p;
}

// The plan for a resolved tile_rows (no automatic choice left).
LinearCudaPlan PlanFor(int64_t m, int64_t n, int64_t k, int64_t tile_rows, int64_t split_k,
                       bool wgmma_bf16, bool wgmma_ws, bool expand_weights, bool stream_k_tail,
                       int64_t stream_ctas = 0) {
  if (tile_rows == kLinearCudaStreamRows) return StreamPlan(m, n, k, split_k, stream_ctas);
  if (tile_rows == kLinearCudaRsRows) return RsPlan(m, n, k, split_k);
  LinearCudaPlan p;
  p.tile_rows = tile_rows;
  const bool wgmma = tile_rows == kLinearCudaWgmmaRows;
  p.kernel = !wgmma ? LinearCudaKernel::kMmaSync
                    : (wgmma_bf16 ? LinearCudaKernel::kWgmmaBf16 : LinearCudaKernel::kWgmmaFp8);
  // The mma.sync kernel's stage is 128 wide at every tile size (a whole 128-byte line of each
  // weight row; two CTAs per SM), the bf16 wgmma kernel's 64 (one 128-byte swizzled bf16 row),
  // the FP8 wgmma kernel's 128 (one 128-byte swizzled row of codes); one wgmma CTA per SM.
  // Steps and splits count the kernel's unit, never anything else.
  switch (p.kernel) {
    case LinearCudaKernel::kMmaSync:
      p.k_step = kLinearCudaKStep;
      p.tile_cols = kLinearCudaTileN;
      break;
    case LinearCudaKernel::kWgmmaBf16:
      p.k_step = kLinearCudaWgmmaKStep;
      p.tile_cols = kLinearCudaWgmmaCols;
      break;
    case LinearCudaKernel::kWgmmaFp8:
      p.k_step = kLinearCudaWgmmaFp8KStep;
      p.tile_cols = kLinearCudaWgmmaFp8Cols;
      break;
    case LinearCudaKernel::kStream:
    case LinearCudaKernel::kWgmmaRs:
      break;  // StreamPlan, RsPlan
  }
  p.m_tiles = CeilDiv(m, p.tile_rows);
  p.n_tiles = CeilDiv(n, p.tile_cols);
  FillSplits(p, k, split_k, wgmma ? kWgmmaTargetCtas : kTargetCtas);
  p.warp_specialised = p.kernel == LinearCudaKernel::kWgmmaBf16 && wgmma_ws;
  p.expand_weights = p.warp_specialised && expand_weights && m >= kLinearCudaExpandMinRows;
  // On expanded weights the tile width is chosen by waves (LinearCudaWsTileCols), and unsplit
  // narrow tiles beat K splits once they fill half the SMs (wkv at 1,024 rows, 32 such tiles,
  // keeps its 8 splits: 25.5 against 37.5 µs unsplit).
  if (split_k == 0 && p.expand_weights && p.splits > 1 &&
      LinearCudaWsUnsplitPays(p.m_tiles, n, 1)) {
    FillSplits(p, k, /*split_k=*/1, kWgmmaTargetCtas);
  }
  if (p.warp_specialised && p.splits == 1 && stream_k_tail) {
    p.tail = LinearCudaTailPlan(p.m_tiles * p.n_tiles, p.k_steps);
  } else {
    p.tail.begin = p.m_tiles * p.n_tiles;
  }
  return p;
}

size_t PartialBytes(const LinearCudaPlan& plan, int64_t m, int64_t n) {
  return plan.splits > 1 ? AlignUp(static_cast<size_t>(4 * plan.splits * m * n), 256) : 0;
}

// The stream kernel's split-K arrival counters: one 64-bit word per CTA of a split (m tile, n
// tile).
size_t CounterBytes(const LinearCudaPlan& plan) {
  return plan.kernel == LinearCudaKernel::kStream && plan.splits > 1
             ? AlignUp(static_cast<size_t>(8 * plan.m_tiles * plan.n_tiles), 256)
             : 0;
}

// The stream-K tail's range partials (fp32 128 × 256 per range item; at most kLinearCudaTailSlots
// items).
constexpr size_t kTailItemBytes = 4 * kLinearCudaWgmmaRows * kLinearCudaWgmmaCols;
size_t TailPartialBytes(const LinearCudaPlan& plan) {
  const int64_t items = (plan.m_tiles * plan.n_tiles - plan.tail.begin) * plan.tail.ranges;
  return plan.tail.ranges > 1 ? AlignUp(static_cast<size_t>(items) * kTailItemBytes, 256) : 0;
}
size_t ExpandedBytes(const LinearCudaPlan& plan, int64_t n, int64_t k) {
  return plan.expand_weights ? AlignUp(static_cast<size_t>(2 * n * k), 256) : 0;
}

}  // namespace

absl::Status Validate(const Fp8LinearDevice& w) {
  if (w.n <= 0 || w.n > kMaxN) {
    return absl::InvalidArgumentError(
        absl::StrFormat("Fp8LinearDevice: n %d must be in [1, %d]", w.n, kMaxN));
  }
  if (w.k <= 0 || w.k % 32 != 0 || w.k > kLinearCudaMaxK) {
    return absl::InvalidArgumentError(
        absl::StrFormat("Fp8LinearDevice: k %d must be a positive multiple of 32, at most %d", w.k,
                        kLinearCudaMaxK));
  }
  if (w.codes == nullptr || !Aligned(w.codes, 16)) {
    return absl::InvalidArgumentError(
        absl::StrFormat("Fp8LinearDevice: codes %p must be non-null and 16-byte aligned",
                        static_cast<const void*>(w.codes)));
  }
  if (w.scales == nullptr) return absl::InvalidArgumentError("Fp8LinearDevice: scales is null");
  if (w.bias != nullptr && !Aligned(w.bias, 4)) {
    return absl::InvalidArgumentError("Fp8LinearDevice: bias must be 4-byte aligned");
  }
  if (w.expanded != nullptr && !Aligned(w.expanded, 16)) {
    return absl::InvalidArgumentError("Fp8LinearDevice: expanded must be 16-byte aligned");
  }
  return absl::OkStatus();
}

const char* LinearCudaKernelName(LinearCudaKernel kernel) {
  switch (kernel) {
    case LinearCudaKernel::kMmaSync:
      return "mma.sync";
    case LinearCudaKernel::kWgmmaBf16:
      return "wgmma-bf16";
    case LinearCudaKernel::kWgmmaFp8:
      return "wgmma-fp8";
    case LinearCudaKernel::kStream:
      return "stream";
    case LinearCudaKernel::kWgmmaRs:
      return "wgmma-rs";
  }
  return "?";
}

size_t LinearCudaActivationBytes(int64_t m, int64_t k) {
  const size_t qdq = static_cast<size_t>(2 * m * k);
  const size_t codes = AlignUp(static_cast<size_t>(m * k), 256) +
                       static_cast<size_t>(m * LinearCudaActScaleStride(k));
  return AlignUp(std::max(qdq, codes), 256);
}

LinearCudaWorkspaceLayout LinearCudaLayout(const LinearCudaPlan& plan, int64_t m, int64_t n,
                                           int64_t k) {
  LinearCudaWorkspaceLayout l;
  l.activations = 0;
  l.partials = QdqBytes(plan, m, k);
  l.counters = l.partials + PartialBytes(plan, m, n);
  l.tail_partials = l.counters + CounterBytes(plan);
  l.expanded = l.tail_partials + TailPartialBytes(plan);
  l.end = l.expanded + ExpandedBytes(plan, n, k);
  return l;
}

LinearCudaPlan PlanLinearCuda(int64_t m, int64_t n, int64_t k, int64_t tile_rows, int64_t split_k,
                              bool wgmma_bf16, bool wgmma_ws, bool expand_weights,
                              bool stream_k_tail, int64_t stream_ctas) {
  if (tile_rows != 0) {
    return PlanFor(m, n, k, tile_rows, split_k, wgmma_bf16, wgmma_ws, expand_weights, stream_k_tail,
                   stream_ctas);
  }
  if (LinearCudaStreamTmaPays(m, n, k)) return StreamTmaPlan(m, n, k, split_k);
  if (LinearCudaStreamPays(m)) return StreamPlan(m, n, k, split_k, stream_ctas);
  if (LinearCudaRsPays(m, n, k)) return RsPlan(m, n, k, split_k);
  const int64_t mma_rows = m <= 16 ? 16 : (m <= 32 ? 32 : 64);
  const int64_t min_n = wgmma_bf16 ? kLinearCudaWgmmaCols : kLinearCudaWgmmaFp8Cols;
  if (m >= kWgmmaMinM && n >= min_n) {
    // The A/B on the H200 (README "CUDA: plan rule"): the wgmma kernels lose to mma.sync where
    // the plan leaves each CTA only a few K steps (wq_a / shared_w2 at M = 128 - 256: 256 - 448
    // of K per split; K = 512 shapes at every M), and win from 640 on.
    const LinearCudaPlan w = PlanFor(m, n, k, kLinearCudaWgmmaRows, split_k, wgmma_bf16, wgmma_ws,
                                     expand_weights, stream_k_tail);
    if (w.steps_per_split * w.k_step >= kLinearCudaWgmmaMinSplitK) return w;
  }
  return PlanFor(m, n, k, mma_rows, split_k, wgmma_bf16, wgmma_ws, expand_weights, stream_k_tail);
}

LinearCudaTail LinearCudaTailPlan(int64_t tiles, int64_t k_steps) {
  LinearCudaTail t;
  t.begin = std::max<int64_t>(tiles, 0);
  const int64_t whole = tiles / kLinearCudaTailSlots * kLinearCudaTailSlots;
  const int64_t r = tiles - whole;
  if (r <= 0 || k_steps <= 0) return t;
  const int64_t s = std::min(
      {kLinearCudaTailSlots / r, k_steps / kLinearCudaTailMinSteps, kLinearCudaTailMaxRanges});
  if (s < 2) return t;
  t.steps = CeilDiv(k_steps, s);
  t.ranges = CeilDiv(k_steps, t.steps);  // >= 2: s <= k_steps / 4
  t.begin = whole;
  return t;
}

// A tile's fixed share in the by-waves rule, in columns. Any value in (32, 128) makes the same
// choices on every measured shape (kernels/gemm/fused_linears.md): above 32 the stacked wq_a | wkv
// (N 1,792, M 4,096) keeps 256 columns (2 waves; 160 columns take 3 and measured 150 µs against
// 110); below 128 wo_b at M 2,048 keeps 160. Session 63's 16 narrowed the stacked Linear.
constexpr int64_t kWsTileFixedCols = 64;

int64_t LinearCudaWsTileCols(int64_t m, int64_t n, int64_t splits, int64_t sms) {
  const int64_t m_tiles = CeilDiv(std::max<int64_t>(m, 1), kLinearCudaWgmmaRows);
  const int64_t slots = std::max<int64_t>(sms, 1);
  int64_t best = kLinearCudaWgmmaCols, best_cost = -1;
  for (int64_t cols : {int64_t{256}, int64_t{192}, int64_t{160}, int64_t{128}}) {
    const int64_t tiles =
        m_tiles * CeilDiv(std::max<int64_t>(n, 1), cols) * std::max<int64_t>(splits, 1);
    const int64_t cost = CeilDiv(tiles, slots) * (cols + kWsTileFixedCols);
    if (best_cost < 0 || cost < best_cost) {
      best = cols;
      best_cost = cost;
    }
  }
  return best;
}

bool LinearCudaWsUnsplitPays(int64_t m_tiles, int64_t n, int64_t groups) {
  return m_tiles * CeilDiv(std::max<int64_t>(n, 1), int64_t{128}) * std::max<int64_t>(groups, 1) >=
         kWgmmaTargetCtas / 2;
}

bool LinearCudaWsTileColsValid(int64_t cols) {
  return cols == 0 || cols == 128 || cols == 160 || cols == 192 || cols == 256;
}

int64_t LinearCudaWsTileColsFor(int64_t requested, int64_t m, int64_t n, int64_t splits,
                                int64_t sms) {
  return requested == 0 ? LinearCudaWsTileCols(m, n, splits, sms) : requested;
}

size_t LinearCudaWorkspaceBytes(const Fp8LinearDevice& w, int64_t max_m, int64_t tile_rows,
                                int64_t split_k, bool wgmma_bf16, bool wgmma_ws,
                                bool expand_weights, bool stream_k_tail, int64_t stream_ctas) {
  if (max_m <= 0) return 0;
  size_t activations = 0, partials = 0, counters = 0, tail = 0, expanded = 0;
  // Beyond 64 · kTargetCtas rows every plan has at least kTargetCtas tiles (the wgmma plan
  // kWgmmaTargetCtas tiles beyond 128 · kWgmmaTargetCtas, the same count), so the automatic
  // plan never splits, and a forced split's partials grow with m: max_m covers the rest.
  static_assert(128 * kWgmmaTargetCtas <= 64 * kTargetCtas);
  const int64_t scan = std::min<int64_t>(max_m, 64 * kTargetCtas);
  auto add = [&](int64_t m) {
    const LinearCudaPlan plan =
        PlanLinearCuda(m, w.n, w.k, tile_rows, split_k, wgmma_bf16, wgmma_ws, expand_weights,
                       stream_k_tail, stream_ctas);
    activations = std::max(activations, QdqBytes(plan, m, w.k));
    partials = std::max(partials, PartialBytes(plan, m, w.n));
    counters = std::max(counters, CounterBytes(plan));
    // A tail's items never exceed kLinearCudaTailSlots: reserve that much wherever one may
    // appear (an m beyond the scan may have a larger tail than max_m's own plan).
    if (plan.warp_specialised && plan.splits == 1 && stream_k_tail) {
      tail = std::max(tail, AlignUp(kLinearCudaTailSlots * kTailItemBytes, 256));
    }
    // A kept expansion (Fp8LinearDevice::expanded) is read in place of the workspace's region.
    if (w.expanded == nullptr) expanded = std::max(expanded, ExpandedBytes(plan, w.n, w.k));
  };
  for (int64_t m = 1; m <= scan; ++m) add(m);
  add(max_m);
  return activations + partials + counters + tail + expanded;
}

namespace {

// x_norm (when set) against x, y and the workspace; m > 0 and the weight valid.
absl::Status ValidateXNorm(const LinearCudaParams& p) {
  const LinearXNorm& n = p.x_norm;
  if (n.weight == nullptr) return absl::OkStatus();
  const int64_t k = p.weight->k;
  if (!Aligned(n.weight, 2)) return Invalid("x_norm.weight", "is not 2-byte aligned");
  if (!std::isfinite(n.eps) || !(n.eps > 0.f)) {
    return Invalid("x_norm.eps", absl::StrFormat("%g is not finite and > 0", n.eps));
  }
  if (n.out == nullptr || !Aligned(n.out, 2)) {
    return Invalid("x_norm.out", "must be non-null and 2-byte aligned");
  }
  if (n.out_stride < k) {
    return Invalid("x_norm.out_stride", absl::StrFormat("%d < K = %d", n.out_stride, k));
  }
  if (p.x_qdq) return Invalid("x_qdq", "must be false with x_norm");
  // Byte ranges [first, last) of the row-strided regions.
  auto span = [&](const void* base, int64_t rows, int64_t stride, int64_t cols, int64_t size) {
    const auto b = reinterpret_cast<uintptr_t>(base);
    return std::pair<uintptr_t, uintptr_t>{
        b, b + static_cast<uintptr_t>(((rows - 1) * stride + cols) * size)};
  };
  auto overlap = [](std::pair<uintptr_t, uintptr_t> a, std::pair<uintptr_t, uintptr_t> b) {
    return a.first < b.second && b.first < a.second;
  };
  const auto out = span(n.out, p.m, n.out_stride, k, 2);
  if (overlap(out, span(p.x_bf16, p.m, p.x_stride, k, 2))) {
    return Invalid("x_norm.out", "overlaps x");
  }
  const bool bf16 = p.y_bf16 != nullptr;
  if (overlap(out, span(bf16 ? static_cast<const void*>(p.y_bf16) : p.y_f32, p.m, p.y_stride,
                        p.weight->n, bf16 ? 2 : 4))) {
    return Invalid("x_norm.out", "overlaps y");
  }
  if (p.workspace != nullptr && p.workspace_bytes > 0 &&
      overlap(out, span(p.workspace, 1, 0, static_cast<int64_t>(p.workspace_bytes), 1))) {
    return Invalid("x_norm.out", "overlaps the workspace");
  }
  return absl::OkStatus();
}

}  // namespace

absl::Status ValidateLinearCudaParams(const LinearCudaParams& p) {
  if (p.weight == nullptr) return Invalid("weight", "is null");
  if (p.m < 0 || p.m > kMaxM) return Invalid("m", absl::StrFormat("%d is not in [0, 2^31)", p.m));
  if (p.tile_rows != 0 && p.tile_rows != kLinearCudaStreamRows && p.tile_rows != 16 &&
      p.tile_rows != 32 && p.tile_rows != 64 && p.tile_rows != kLinearCudaWgmmaRows &&
      p.tile_rows != kLinearCudaRsRows) {
    return Invalid("tile_rows",
                   absl::StrFormat("%d is not 0, 8, 16, 32, 64, 128 or 256", p.tile_rows));
  }
  if (!LinearCudaWsTileColsValid(p.ws_tile_cols)) {
    return Invalid("ws_tile_cols",
                   absl::StrFormat("%d is not 0 (by waves), 128, 160, 192 or 256", p.ws_tile_cols));
  }
  if (p.stream_k_tail && p.ws_tile_cols != 0 && p.ws_tile_cols != kLinearCudaWgmmaCols) {
    return Invalid("ws_tile_cols",
                   absl::StrFormat("%d must be 0 or 256 with stream_k_tail", p.ws_tile_cols));
  }
  if (p.ws_multicast && p.stream_k_tail) {
    return Invalid("ws_multicast", "cannot be combined with stream_k_tail");
  }
  if (p.split_k < 0 || p.split_k > kLinearCudaMaxSplits) {
    return Invalid("split_k",
                   absl::StrFormat("%d is not in [0, %d]", p.split_k, kLinearCudaMaxSplits));
  }
  if (p.stream_ctas < 0 || p.stream_ctas > kLinearCudaMaxStreamCtas) {
    return Invalid("stream_ctas", absl::StrFormat("%d is not in [0, %d]", p.stream_ctas,
                                                  kLinearCudaMaxStreamCtas));
  }
  if (p.m == 0) return absl::OkStatus();
  if (absl::Status s = Validate(*p.weight); !s.ok()) {
    return Invalid("weight", std::string(s.message()));
  }
  const Fp8LinearDevice& w = *p.weight;
  if (p.x_bf16 == nullptr) return Invalid("x_bf16", "is null");
  if (p.x_stride < w.k) return Invalid("x_stride", absl::StrFormat("%d < K = %d", p.x_stride, w.k));
  if ((p.y_bf16 == nullptr) == (p.y_f32 == nullptr)) {
    return Invalid("y_bf16/y_f32", "must have exactly one non-null pointer");
  }
  if (p.y_stride < w.n) return Invalid("y_stride", absl::StrFormat("%d < N = %d", p.y_stride, w.n));
  if (p.y_bf16 != nullptr && !Aligned(p.y_bf16, 2))
    return Invalid("y_bf16", "is not 2-byte aligned");
  if (p.y_f32 != nullptr && !Aligned(p.y_f32, 4)) return Invalid("y_f32", "is not 4-byte aligned");
  if (absl::Status s = ValidateXNorm(p); !s.ok()) return s;
  const LinearCudaPlan plan =
      PlanLinearCuda(p.m, w.n, w.k, p.tile_rows, p.split_k, p.wgmma_bf16, p.wgmma_ws,
                     p.expand_weights, p.stream_k_tail, p.stream_ctas);
  if (plan.kernel == LinearCudaKernel::kStream && plan.m_tiles > 65535) {
    return Invalid("m", absl::StrFormat("%d is above %d for the stream kernel (tile_rows %d)", p.m,
                                        65535 * kLinearCudaStreamMaxRows, kLinearCudaStreamRows));
  }
  // The expansion region is the layout's last: a weight with a kept expansion needs none.
  const LinearCudaWorkspaceLayout layout = LinearCudaLayout(plan, p.m, w.n, w.k);
  const size_t need = w.expanded != nullptr ? layout.expanded : layout.end;
  if (p.workspace == nullptr || !Aligned(p.workspace, 16) || p.workspace_bytes < need) {
    return Invalid("workspace", absl::StrFormat("has %d bytes at %p; needs %d, 16-byte aligned",
                                                p.workspace_bytes, p.workspace, need));
  }
  return absl::OkStatus();
}

}  // namespace flashserve::kernels
