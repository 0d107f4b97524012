// Plan, workspace sizing and validation of the CUDA bf16 / fp32 Linear (gemm_float_cuda.h).
// Host-only, no CUDA: built into fs_kernels_gemm so the CPU test covers it.
#include <algorithm>
#include <cstring>
#include <string>

#include "absl/strings/str_format.h"
#include "kernels/gemm/gemm_cuda.h"
#include "kernels/gemm/gemm_float_cuda.h"

namespace flashserve::kernels {
namespace {

// CTAs a plan aims for before it stops splitting K: two per SM of a 132-SM H100 / H200. A
// constant, not the device's SM count, so the bits never depend on the device.
constexpr int64_t kTargetCtas = 264;
constexpr int64_t kWgmmaTargetCtas = 132;  // the wgmma kernel: one CTA per SM
// The swapped-role kernel splits K only below this many tiles: its split partials and second
// launch cost more than streaming with half the SMs (H200, wo_a at 16-256 tokens: 64 tiles
// unsplit 23-32 µs, split in 2: 25-37 µs, in 8: 30-81 µs; README "CUDA: the swapped-role bf16
// kernel").
constexpr int64_t kSwapTargetCtas = 64;
// The automatic plan takes the swapped-role kernel (bf16 x and W, TMA-able x) up to this M
// always, and up to kSwapMaxM unless the wgmma plan qualifies without a K split (measured to
// 1024).
constexpr int64_t kSwapAlwaysM = 256;
constexpr int64_t kSwapMaxM = 1024;
// The automatic plan considers the wgmma kernel from this M (one 128-row tile) and N (one
// 256-column tile) on; below, the mma.sync kernel's 16-64-row tiles waste less.
constexpr int64_t kWgmmaMinM = 128;
constexpr int64_t kWgmmaMinN = 256;
constexpr int64_t kMaxN = int64_t{65535} * kFloatLinearCudaTileN;  // grid.y limit
constexpr int64_t kMaxGridZ = 65535;
constexpr int64_t kMaxM = (int64_t{1} << 31) - 1;

int64_t CeilDiv(int64_t a, int64_t b) { return (a + b - 1) / b; }

bool Aligned(const void* p, uintptr_t a) { return reinterpret_cast<uintptr_t>(p) % a == 0; }

absl::Status Invalid(const char* field, const std::string& why) {
  return absl::InvalidArgumentError(absl::StrFormat("LaunchFloatLinear: %s %s", field, why));
}

// The weight is given only in its FP8 form (w_fp8 without w_bf16 or w_f32).
bool Fp8Only(const FloatLinearCudaParams& p) {
  return p.w_fp8 != nullptr && p.w_bf16 == nullptr && p.w_f32 == nullptr;
}

// Whether `plan` reads bf16 weights that p gives only in their FP8 form: the launcher then
// expands them into the workspace first.
bool PlanExpands(const FloatLinearCudaParams& p, const FloatLinearCudaPlan& plan) {
  return Fp8Only(p) && plan.tile_rows != kFloatLinearCudaGemvRows &&
         plan.tile_rows != kFloatLinearCudaSwapFp8Rows;
}

size_t RoundUp256(size_t v) { return (v + 255) / 256 * 256; }

size_t PartialBytes(const FloatLinearCudaPlan& plan, int64_t m, int64_t n, int64_t groups) {
  return plan.splits > 1 ? static_cast<size_t>(4 * groups * plan.splits * m * n) : 0;
}

// The workspace a plan needs at m rows: K-split partials, or x in the fragment order where the
// FP8 form's swapped-role kernel streams it (M > kFloatLinearCudaSwapFp8MaxM; M rounded up to
// whole row tiles).
size_t PlanWorkspaceBytes(const FloatLinearCudaPlan& plan, int64_t m, int64_t n, int64_t k,
                          int64_t groups) {
  if (plan.tile_rows == kFloatLinearCudaSwapFp8Rows && m > kFloatLinearCudaSwapFp8MaxM) {
    return static_cast<size_t>(2 * std::max<int64_t>(1, groups) *
                               FloatLinearCudaSwapFp8StreamPaddedRows(m) * k);
  }
  return PartialBytes(plan, m, n, groups);
}

// The whole workspace p's call needs under `plan` at m rows: the plan's own region, then, where
// it expands an FP8-only weight, the expansion.
size_t CallWorkspaceBytes(const FloatLinearCudaParams& p, const FloatLinearCudaPlan& plan,
                          int64_t m) {
  const size_t own = PlanWorkspaceBytes(plan, m, p.n, p.k, p.groups);
  if (!PlanExpands(p, plan)) return own;
  return RoundUp256(own) + FloatLinearCudaExpansionBytes(p);
}

// TMA reads bf16 x in 16-byte units: the base and every row start aligned (W is, validated).
bool XRowsTma(const FloatLinearCudaParams& p) {
  return Aligned(p.x_bf16, 16) && p.x_stride % 8 == 0 &&
         (p.groups <= 1 || p.x_group_stride % 8 == 0);
}

// Every x row starts 16-byte aligned (bf16 or fp32): the CUDA-core kernel's vector loads.
bool XRowsVec(const FloatLinearCudaParams& p) {
  const void* x = p.x_bf16 != nullptr ? static_cast<const void*>(p.x_bf16) : p.x_f32;
  const int64_t per16 = p.x_f32 != nullptr ? 4 : 8;
  return Aligned(x, 16) && p.x_stride % per16 == 0 &&
         (p.groups <= 1 || p.x_group_stride % per16 == 0);
}

// Why the FP8 form's swapped-role kernel cannot run p, or nullptr when it can: bf16 x with 16-byte
// aligned rows, K whole 128-K stages (up to its shared-memory limit where x is resident, M <= 8),
// codes 16-byte and scales 4-byte aligned. The plan's rule and the validation of tile_rows 8 both
// read it.
const char* SwapFp8Misfit(const FloatLinearCudaParams& p) {
  if (p.w_fp8 == nullptr || p.x_bf16 == nullptr) return "needs w_fp8 and x_bf16";
  if (p.k % kFloatLinearCudaSwapFp8KStep != 0) return "needs K a multiple of 128";
  if (p.m <= kFloatLinearCudaSwapFp8MaxM && p.k > kFloatLinearCudaSwapFp8MaxK) {
    return "needs K up to 12288 with x resident (M <= 8)";
  }
  if (!Aligned(p.w_fp8, 16) || !Aligned(p.w_fp8_scales, 4)) {
    return "needs w_fp8 16-byte and w_fp8_scales 4-byte aligned";
  }
  if (!XRowsVec(p)) return "needs x rows 16-byte aligned (x_bf16, x_stride and x_group_stride)";
  return nullptr;
}
static_assert(kFloatLinearCudaSwapFp8KStep == 128 && kFloatLinearCudaSwapFp8MaxK == 12288,
              "SwapFp8Misfit's message");

// Exactly one of two pointers set.
bool ExactlyOne(const void* a, const void* b) { return (a == nullptr) != (b == nullptr); }

}  // namespace

namespace {

// The plan for a resolved tile_rows.
FloatLinearCudaPlan PlanFor(const FloatLinearCudaParams& p, int64_t tile_rows) {
  FloatLinearCudaPlan plan;
  plan.tile_rows = tile_rows;
  const bool wgmma = plan.tile_rows == kFloatLinearCudaWgmmaRows;
  const bool swap = plan.tile_rows == kFloatLinearCudaSwapRows;
  if (plan.tile_rows == kFloatLinearCudaGemvRows ||
      plan.tile_rows == kFloatLinearCudaSwapFp8Rows) {  // one launch over all rows, no split
    plan.tile_cols = plan.tile_rows == kFloatLinearCudaGemvRows ? kFloatLinearCudaGemvCols
                                                                : kFloatLinearCudaSwapFp8Cols;
    plan.k_steps = CeilDiv(p.k, kFloatLinearCudaKStep);
    plan.steps_per_split = plan.k_steps;
    plan.m_tiles =
        plan.tile_rows == kFloatLinearCudaSwapFp8Rows && p.m > kFloatLinearCudaSwapFp8MaxM
            ? CeilDiv(p.m, kFloatLinearCudaSwapFp8StreamMaxBM)
            : 1;
    plan.n_tiles = CeilDiv(p.n, plan.tile_cols);
    return plan;
  }
  plan.tile_cols =
      wgmma ? kFloatLinearCudaWgmmaCols : (swap ? kFloatLinearCudaSwapCols : kFloatLinearCudaTileN);
  plan.k_steps = CeilDiv(p.k, kFloatLinearCudaKStep);
  plan.m_tiles = CeilDiv(p.m, swap ? kFloatLinearCudaSwapMaxRows : plan.tile_rows);
  plan.n_tiles = CeilDiv(p.n, plan.tile_cols);
  const int64_t groups = std::max<int64_t>(1, p.groups);
  const int64_t tiles = std::max<int64_t>(1, plan.m_tiles * plan.n_tiles * groups);
  // wgmma CTAs hold a whole SM (one per SM), mma.sync CTAs half of one; the swapped-role
  // kernel's CTAs a whole SM too, but it splits less (kSwapTargetCtas).
  const int64_t target = wgmma ? kWgmmaTargetCtas : (swap ? kSwapTargetCtas : kTargetCtas);
  int64_t splits = 1;
  if (p.split_k > 0) {
    splits = p.split_k;
  } else if (tiles < target) {
    splits = std::min(kFloatLinearCudaMaxSplits, target / tiles);
  }
  splits = std::min(splits, std::max<int64_t>(1, kMaxGridZ / groups));
  splits = std::clamp<int64_t>(splits, 1, std::max<int64_t>(1, plan.k_steps));
  plan.warp_specialised = wgmma && p.wgmma_ws && XRowsTma(p);
  // The warp-specialised kernel's width is chosen by waves: unsplit narrow tiles beat the K
  // splits once they fill half the SMs (LinearCudaWsUnsplitPays; H100, session 67: the
  // compressor's wkv at 4,096 rows 57.9 -> 43.9 µs, the gate 49.4 -> 44.4, the ratio-2 pair at
  // 2,048 58.0 -> 46.5; the gate at 2,048, 48 such tiles, keeps its 4 splits: 32.6 against 38.1).
  // Above kSwapMaxM only, so that the choice against the swapped-role kernel stays as measured.
  if (p.split_k == 0 && plan.warp_specialised && splits > 1 && p.m > kSwapMaxM &&
      LinearCudaWsUnsplitPays(plan.m_tiles, p.n, groups)) {
    splits = 1;
  }
  plan.steps_per_split = CeilDiv(plan.k_steps, splits);
  plan.splits = plan.steps_per_split > 0 ? CeilDiv(plan.k_steps, plan.steps_per_split) : 1;
  return plan;
}

}  // namespace

FloatLinearCudaPlan PlanFloatLinearCuda(const FloatLinearCudaParams& p) {
  if (p.tile_rows != 0) return PlanFor(p, p.tile_rows);
  const bool bf16_only = p.x_f32 == nullptr && p.w_f32 == nullptr;
  // README "CUDA: the CUDA-core kernel" (H200 A/B): at one to four rows a Linear is a weight
  // stream; the tensor-core plans' K splits and reduction launch cost more than fma on the CUDA
  // cores, except for large bf16 weights (wo_a), which the swapped-role kernel streams faster.
  // With the weight's FP8 form the stream halves (README "CUDA: bf16 weights that are FP8
  // values"): the CUDA-core kernel at any weight size up to kFloatLinearCudaGemvFp8MaxM rows.
  if (p.w_fp8 != nullptr && p.m <= kFloatLinearCudaGemvFp8MaxM && XRowsVec(p)) {
    return PlanFor(p, kFloatLinearCudaGemvRows);
  }
  // From 2 to 8 rows the FP8 form's swapped-role kernel (fp8_weight_form.md, session 81, H100:
  // wo_a 23.8 / 24.2 / 25.6 µs at M = 2 / 4 / 8 against 28.5 / 28.4 / 29.0 on the bf16 weight),
  // where its requirements hold.
  // A weight given only in its FP8 form keeps it up to kFloatLinearCudaSwapFp8OnlyMaxM rows,
  // where the bf16 plans would expand it first (the constant's note), and where the swapped-role
  // kernel cannot run (fp32 x, K not whole 128-K stages, misaligned codes or x) up to 4 rows on
  // the CUDA-core kernel (which takes any x dtype).
  const bool fp8_only = Fp8Only(p);
  const int64_t swap_fp8_max_m =
      fp8_only ? kFloatLinearCudaSwapFp8OnlyMaxM : kFloatLinearCudaSwapFp8AutoMaxM;
  if (p.w_fp8 != nullptr && p.m <= swap_fp8_max_m && SwapFp8Misfit(p) == nullptr) {
    return PlanFor(p, kFloatLinearCudaSwapFp8Rows);
  }
  if (fp8_only && p.m <= kFloatLinearCudaGemvMaxM && XRowsVec(p)) {
    return PlanFor(p, kFloatLinearCudaGemvRows);
  }
  if (p.m <= kFloatLinearCudaGemvMaxM && XRowsVec(p) &&
      !(bf16_only &&
        std::max<int64_t>(1, p.groups) * p.n * p.k >= kFloatLinearCudaGemvMaxBf16Weights)) {
    return PlanFor(p, kFloatLinearCudaGemvRows);
  }
  const int64_t max_rows = p.x_f32 != nullptr ? 32 : 64;
  // README "CUDA: plan rule" (H200 A/B): the swapped-role kernel wins at every bf16 shape up to
  // 256 rows (wo_a at 64 tokens 40.6 -> 25.2 µs) and against mma.sync up to 1024 (the
  // compressor's wkv at 1024: 32.9 -> 19.2 µs); wo_a's wgmma plan wins at 384 .. 1024.
  const bool swap = bf16_only && p.m <= kSwapMaxM && XRowsTma(p);
  if (swap && p.m <= kSwapAlwaysM) return PlanFor(p, kFloatLinearCudaSwapRows);
  if (bf16_only && p.m >= kWgmmaMinM && p.n >= kWgmmaMinN) {
    // wgmma loses where the plan leaves each CTA under kFloatLinearCudaWgmmaMinSplitK of K (the
    // compressor's wkv at M = 128 / 256: 128 / 192; K = 512 shapes), and wins from 640 on (wo_a
    // at M = 128: 1024).
    // Against the swapped-role kernel it wins only where it needs no K split (wo_a from 384
    // rows; the compressor's wkv at 1024 rows takes 8 splits: 32.9 against 19.2 µs).
    const FloatLinearCudaPlan w = PlanFor(p, kFloatLinearCudaWgmmaRows);
    if (w.steps_per_split * kFloatLinearCudaKStep >= kFloatLinearCudaWgmmaMinSplitK &&
        (!swap || w.splits == 1)) {
      return w;
    }
  }
  if (swap) return PlanFor(p, kFloatLinearCudaSwapRows);
  return PlanFor(p, std::min<int64_t>(max_rows, p.m <= 16 ? 16 : (p.m <= 32 ? 32 : 64)));
}

int64_t FloatLinearCudaWsTileCols(const FloatLinearCudaParams& p, const FloatLinearCudaPlan& plan,
                                  int64_t sms) {
  return LinearCudaWsTileColsFor(
      p.ws_tile_cols, plan.m_tiles * kFloatLinearCudaWgmmaRows * p.groups, p.n, plan.splits, sms);
}

int FloatLinearCudaSwapFp8Warpgroups(const FloatLinearCudaParams& p) {
  if (p.swap_fp8_warpgroups != 0) return p.swap_fp8_warpgroups;
  return p.m <= kFloatLinearCudaSwapFp8ThreeWgsMaxM && p.swap_fp8_chains == 1 ? 3 : 2;
}

size_t FloatLinearCudaExpansionBytes(const FloatLinearCudaParams& p) {
  const int64_t copies = p.w_group_stride == 0 ? 1 : std::max<int64_t>(1, p.groups);
  return static_cast<size_t>(2 * copies * p.n * p.k);
}

int64_t FloatLinearCudaExpansionOffset(const FloatLinearCudaParams& p,
                                       const FloatLinearCudaPlan& plan) {
  if (!PlanExpands(p, plan)) return -1;
  return static_cast<int64_t>(RoundUp256(PlanWorkspaceBytes(plan, p.m, p.n, p.k, p.groups)));
}

size_t FloatLinearCudaWorkspaceBytes(const FloatLinearCudaParams& p, int64_t max_m) {
  if (max_m <= 0) return 0;
  // Both x dtypes (the tile cap differs). Beyond 64 · kTargetCtas rows every plan has at least
  // kTargetCtas tiles, so the automatic plan never splits; a forced split grows with m.
  // Likewise the wgmma plan beyond 128 · kWgmmaTargetCtas rows (the same count). All four
  // dtype pairs: the plan depends on which operands are fp32.
  static_assert(128 * kWgmmaTargetCtas <= 64 * kTargetCtas);
  // Both x row alignments too: the automatic plan takes the swapped-role kernel only for
  // TMA-able x rows (an odd x_stride marks them not).
  static const float kF32Marker = 0.f;
  size_t bytes = 0;
  for (const float* xf : {static_cast<const float*>(nullptr), &kF32Marker}) {
    for (const float* wf : {static_cast<const float*>(nullptr), &kF32Marker}) {
      for (bool x_tma : {true, false}) {
        if (!x_tma && p.tile_rows != 0) continue;  // forced tiles do not depend on it
        FloatLinearCudaParams q = p;
        if (!x_tma) q.x_stride = 1;
        q.x_f32 = xf;
        if (wf != nullptr && Fp8Only(p)) continue;  // no fp32 form of an FP8-only weight
        q.w_f32 = wf;
        if (wf != nullptr) q.w_bf16 = nullptr;
        if (xf != nullptr && q.tile_rows == 64) continue;  // invalid, never launched
        if ((xf != nullptr || wf != nullptr) &&
            (q.tile_rows == kFloatLinearCudaWgmmaRows || q.tile_rows == kFloatLinearCudaSwapRows)) {
          continue;
        }
        const int64_t scan = std::min<int64_t>(max_m, 64 * kTargetCtas);
        for (int64_t m = 1; m <= scan; ++m) {
          q.m = m;
          bytes = std::max(bytes, CallWorkspaceBytes(q, PlanFloatLinearCuda(q), m));
        }
        q.m = max_m;
        bytes = std::max(bytes, CallWorkspaceBytes(q, PlanFloatLinearCuda(q), max_m));
      }
    }
  }
  return bytes;
}

bool NarrowFloatLinearWeight(const float* w, size_t count, uint16_t* bf16_out) {
  for (size_t i = 0; i < count; ++i) {
    uint32_t bits;
    std::memcpy(&bits, w + i, 4);
    if ((bits & 0xFFFFu) != 0) return false;
    bf16_out[i] = static_cast<uint16_t>(bits >> 16);
  }
  return true;
}

absl::Status ValidateFloatLinearCudaParams(const FloatLinearCudaParams& p) {
  if (p.m < 0 || p.m > kMaxM) return Invalid("m", absl::StrFormat("%d is not in [0, 2^31)", p.m));
  if (p.n <= 0 || p.n > kMaxN) {
    return Invalid("n", absl::StrFormat("%d is not in [1, %d]", p.n, kMaxN));
  }
  if (p.k <= 0 || p.k % 8 != 0 || p.k > kFloatLinearCudaMaxK) {
    return Invalid("k", absl::StrFormat("%d is not a positive multiple of 8 up to %d", p.k,
                                        kFloatLinearCudaMaxK));
  }
  if (p.groups < 1 || p.groups > kMaxGridZ) {
    return Invalid("groups", absl::StrFormat("%d is not in [1, %d]", p.groups, kMaxGridZ));
  }
  if (p.tile_rows != 0 && p.tile_rows != kFloatLinearCudaGemvRows &&
      p.tile_rows != kFloatLinearCudaSwapFp8Rows && p.tile_rows != 16 && p.tile_rows != 32 &&
      p.tile_rows != 64 && p.tile_rows != kFloatLinearCudaWgmmaRows &&
      p.tile_rows != kFloatLinearCudaSwapRows) {
    return Invalid("tile_rows",
                   absl::StrFormat("%d is not 0, 1, 8, 16, 32, 64, 128 or 256", p.tile_rows));
  }
  if (p.tile_rows == kFloatLinearCudaGemvRows && p.m > kFloatLinearCudaGemvMaxM) {
    return Invalid("tile_rows", absl::StrFormat("1 (the CUDA-core kernel) takes at most %d rows",
                                                kFloatLinearCudaGemvMaxM));
  }
  if (p.tile_rows == 64 && p.x_f32 != nullptr) {
    return Invalid("tile_rows", "64 is not available with x_f32 (at most 32)");
  }
  if (p.tile_rows == kFloatLinearCudaWgmmaRows && (p.x_f32 != nullptr || p.w_f32 != nullptr)) {
    return Invalid("tile_rows", "128 (the wgmma kernel) needs bf16 x and bf16 W");
  }
  if (p.tile_rows == kFloatLinearCudaSwapRows && (p.x_f32 != nullptr || p.w_f32 != nullptr)) {
    return Invalid("tile_rows", "256 (the swapped-role wgmma kernel) needs bf16 x and bf16 W");
  }
  if (p.swap_fp8_warpgroups < 0 || p.swap_fp8_warpgroups > 3) {
    return Invalid("swap_fp8_warpgroups",
                   absl::StrFormat("%d is not 0 (automatic), 1, 2 or 3", p.swap_fp8_warpgroups));
  }
  if (p.swap_fp8_chains != 1 && p.swap_fp8_chains != 4) {
    return Invalid("swap_fp8_chains", absl::StrFormat("%d is not 1 or 4", p.swap_fp8_chains));
  }
  if (p.split_k < 0 || p.split_k > kFloatLinearCudaMaxSplits) {
    return Invalid("split_k",
                   absl::StrFormat("%d is not in [0, %d]", p.split_k, kFloatLinearCudaMaxSplits));
  }
  if (!LinearCudaWsTileColsValid(p.ws_tile_cols)) {
    return Invalid("ws_tile_cols",
                   absl::StrFormat("%d is not 0 (by waves), 128, 160, 192 or 256", p.ws_tile_cols));
  }
  if (p.m == 0) return absl::OkStatus();
  const bool fp8_only = Fp8Only(p);
  if (!fp8_only && !ExactlyOne(p.w_bf16, p.w_f32)) {
    return Invalid("w_bf16/w_f32",
                   "must have exactly one non-null pointer (or neither, with w_fp8 alone)");
  }
  if (!fp8_only) {
    const void* w = p.w_bf16 != nullptr ? static_cast<const void*>(p.w_bf16) : p.w_f32;
    if (!Aligned(w, 16)) return Invalid(p.w_bf16 ? "w_bf16" : "w_f32", "is not 16-byte aligned");
  }
  if (p.w_group_stride < 0 || p.w_group_stride % 8 != 0) {
    return Invalid("w_group_stride",
                   absl::StrFormat("%d is not a non-negative multiple of 8", p.w_group_stride));
  }
  if (p.w_fp8 != nullptr || p.w_fp8_scales != nullptr) {
    if (p.w_fp8 == nullptr || p.w_fp8_scales == nullptr || p.w_f32 != nullptr) {
      return Invalid("w_fp8/w_fp8_scales",
                     "need each other, and w_bf16 (the same weight) or no other weight form");
    }
    if (fp8_only && !Aligned(p.w_fp8, 16)) {
      return Invalid("w_fp8", "is not 16-byte aligned (FP8 only: the expansion's loads)");
    }
    if (fp8_only && p.k > kLinearCudaMaxK) {
      return Invalid("w_fp8",
                     absl::StrFormat("FP8 only needs K at most %d (K = %d)", kLinearCudaMaxK, p.k));
    }
    if (p.n % kFloatLinearFp8Block != 0 || p.k % kFloatLinearFp8Block != 0) {
      return Invalid("w_fp8", absl::StrFormat("needs N and K multiples of %d (N = %d, K = %d)",
                                              kFloatLinearFp8Block, p.n, p.k));
    }
    if (!Aligned(p.w_fp8, 8)) return Invalid("w_fp8", "is not 8-byte aligned");
    if (p.w_group_stride != 0 && p.w_group_stride != p.n * p.k) {
      return Invalid("w_group_stride", absl::StrFormat("%d with w_fp8 must be 0 or N · K = %d",
                                                       p.w_group_stride, p.n * p.k));
    }
  }
  if (p.bias != nullptr && !Aligned(p.bias, 4)) return Invalid("bias", "is not 4-byte aligned");
  if (!ExactlyOne(p.x_bf16, p.x_f32)) {
    return Invalid("x_bf16/x_f32", "must have exactly one non-null pointer");
  }
  if (p.x_bf16 != nullptr && !Aligned(p.x_bf16, 2)) {
    return Invalid("x_bf16", "is not 2-byte aligned");
  }
  if (p.x_f32 != nullptr && !Aligned(p.x_f32, 4)) {
    return Invalid("x_f32", "is not 4-byte aligned");
  }
  if (p.x_stride < p.k) return Invalid("x_stride", absl::StrFormat("%d < K = %d", p.x_stride, p.k));
  if (p.x_group_stride < 0) {
    return Invalid("x_group_stride", absl::StrFormat("%d is negative", p.x_group_stride));
  }
  if (!ExactlyOne(p.y_bf16, p.y_f32)) {
    return Invalid("y_bf16/y_f32", "must have exactly one non-null pointer");
  }
  if (p.y_bf16 != nullptr && !Aligned(p.y_bf16, 2)) {
    return Invalid("y_bf16", "is not 2-byte aligned");
  }
  if (p.y_f32 != nullptr && !Aligned(p.y_f32, 4)) {
    return Invalid("y_f32", "is not 4-byte aligned");
  }
  if (p.y_stride < p.n) return Invalid("y_stride", absl::StrFormat("%d < N = %d", p.y_stride, p.n));
  if (p.y_group_stride < 0) {
    return Invalid("y_group_stride", absl::StrFormat("%d is negative", p.y_group_stride));
  }
  if (p.tile_rows == kFloatLinearCudaGemvRows && !XRowsVec(p)) {
    return Invalid("tile_rows",
                   "1 (the CUDA-core kernel) needs x rows 16-byte aligned (the x pointer, "
                   "x_stride and x_group_stride)");
  }
  if (p.tile_rows == kFloatLinearCudaSwapFp8Rows) {
    if (const char* why = SwapFp8Misfit(p); why != nullptr) {
      return Invalid(
          "tile_rows",
          absl::StrFormat("8 (the FP8 form's swapped-role kernel) %s (K = %d)", why, p.k));
    }
  }
  if (p.tile_rows == kFloatLinearCudaSwapRows && !XRowsTma(p)) {
    return Invalid("tile_rows",
                   "256 (the swapped-role wgmma kernel) needs x rows 16-byte aligned "
                   "(x_bf16, x_stride and x_group_stride)");
  }
  const FloatLinearCudaPlan plan = PlanFloatLinearCuda(p);
  if (plan.m_tiles > kMaxM) return Invalid("m", "needs too many row tiles");
  const size_t need = CallWorkspaceBytes(p, plan, p.m);
  if (need > 0 &&
      (p.workspace == nullptr || !Aligned(p.workspace, 16) || p.workspace_bytes < need)) {
    return Invalid("workspace", absl::StrFormat("has %d bytes at %p; needs %d, 16-byte aligned",
                                                p.workspace_bytes, p.workspace, need));
  }
  return absl::OkStatus();
}

}  // namespace flashserve::kernels
