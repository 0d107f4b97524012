// Host-side validation of the CUDA launchers' params, the workspace layout and the tile-size
// choice. No CUDA here, so the checks are tested on machines without a GPU.
#include <algorithm>
#include <cstdint>
#include <initializer_list>
#include <limits>
#include <string>
#include <utility>

#include "absl/status/status.h"
#include "absl/strings/str_format.h"
#include "common/base/status_macros.h"
#include "kernels/moe/moe_cuda.h"
#include "kernels/moe/moe_cuda_internal.h"
#include "kernels/moe/moe_internal.h"
#include "kernels/moe/moe_shared_cuda.h"

namespace flashserve::kernels {
namespace {

// Slot rows are int32 on the device; dims stay far below int32 too.
constexpr int64_t kMaxSlots = std::numeric_limits<int32_t>::max();
constexpr int64_t kMaxDim = int64_t{1} << 20;
constexpr int64_t kMaxStride = int64_t{1} << 32;

absl::Status Invalid(const char* op, const char* field, const std::string& why) {
  return absl::InvalidArgumentError(absl::StrFormat("%s: %s %s", op, field, why));
}

absl::Status CheckNonNull(const char* op,
                          std::initializer_list<std::pair<const char*, const void*>> fields) {
  for (const auto& [name, ptr] : fields) {
    if (ptr == nullptr) return Invalid(op, name, "is null");
  }
  return absl::OkStatus();
}

absl::Status CheckAligned(const char* op, const char* field, const void* ptr, uintptr_t align) {
  if (reinterpret_cast<uintptr_t>(ptr) % align != 0) {
    return Invalid(op, field, absl::StrFormat("must be %d-byte aligned", align));
  }
  return absl::OkStatus();
}

// A bf16 row-major tensor read or written 16 bytes at a time.
absl::Status CheckRows16(const char* op, const char* field, const char* stride_field,
                         const void* ptr, int64_t stride, int64_t dim) {
  RETURN_IF_ERROR(CheckAligned(op, field, ptr, 16));
  if (stride < dim || stride > kMaxStride || stride % 8 != 0) {
    return Invalid(op, stride_field,
                   absl::StrFormat("is %d, must be >= %d and a multiple of 8", stride, dim));
  }
  return absl::OkStatus();
}

absl::Status CheckDim(const char* op, const char* field, int64_t v) {
  if (v <= 0 || v > kMaxDim || v % kMoeCudaDimMultiple != 0) {
    return Invalid(op, field,
                   absl::StrFormat("is %d, must be a positive multiple of %d up to %d", v,
                                   kMoeCudaDimMultiple, kMaxDim));
  }
  return absl::OkStatus();
}

absl::Status CheckExpertsTopK(const char* op, int64_t n_experts, int64_t top_k) {
  if (n_experts < 1 || n_experts > kMoeCudaMaxExperts) {
    return Invalid(op, "n_experts",
                   absl::StrFormat("is %d, must be in [1, %d]", n_experts, kMoeCudaMaxExperts));
  }
  const int64_t max_k = std::min(n_experts, kMoeCudaMaxTopK);
  if (top_k < 1 || top_k > max_k) {
    return Invalid(op, "top_k", absl::StrFormat("is %d, must be in [1, %d]", top_k, max_k));
  }
  return absl::OkStatus();
}

absl::Status CheckSlots(const char* op, const char* field, int64_t m, int64_t top_k) {
  if (m < 0 || m > kMaxSlots / std::max<int64_t>(top_k, 1)) {
    return Invalid(op, field, absl::StrFormat("is %d, m·top_k must be in [0, 2^31)", m));
  }
  return absl::OkStatus();
}

// with_rs: the list's or stage's tiles may be the register-sourced GEMM's 48- / 80- / 96-row
// ones (MoeCudaIsRsOnlyTileRows; the permute writes them, a stage runs them only with wgmma_rs,
// CheckWgmmaRs). The other GEMMs and the regroup into 128-row tiles need tile rows that divide 128.
absl::Status CheckTileRows(const char* op, int64_t tile_rows, bool with_rs) {
  if (tile_rows != kMoeCudaStreamTileRows && tile_rows != 16 && tile_rows != 32 &&
      tile_rows != 64 && tile_rows != kMoeCudaWgmmaTileRows &&
      !(with_rs && MoeCudaIsRsOnlyTileRows(tile_rows))) {
    return Invalid(
        op, "tile_rows",
        with_rs ? absl::StrFormat("is %d, must be 8, 16, 32, 48, 64, 80, 96 or 128", tile_rows)
                : absl::StrFormat("is %d, must be 8, 16, 32, 64 or 128", tile_rows));
  }
  return absl::OkStatus();
}

// The streaming GEMM (tile_rows 8, or 16 with `stream`) keeps a tile's activation rows of K in
// shared memory; `stream` selects it at tile_rows 16 only.
absl::Status CheckStream(const char* op, const char* field, int64_t tile_rows, bool stream,
                         int64_t k) {
  if (stream && tile_rows != kMoeCudaStreamTileRows && tile_rows != kMoeCudaStream16TileRows &&
      tile_rows != kMoeCudaStream32TileRows) {
    return Invalid(op, "stream",
                   absl::StrFormat("is set but tile_rows is %d (the streaming GEMM takes tile_rows "
                                   "8, 16 or 32)",
                                   tile_rows));
  }
  if (tile_rows == kMoeCudaStreamTileRows && k > kMoeCudaStreamMaxK) {
    return Invalid(op, field,
                   absl::StrFormat("is %d, the streaming GEMM (tile_rows 8) takes K <= %d", k,
                                   kMoeCudaStreamMaxK));
  }
  if (stream && tile_rows == kMoeCudaStream16TileRows && k > kMoeCudaStream16MaxK) {
    return Invalid(op, field,
                   absl::StrFormat("is %d, the streaming GEMM at tile_rows 16 takes K <= %d", k,
                                   kMoeCudaStream16MaxK));
  }
  if (stream && tile_rows == kMoeCudaStream32TileRows && k > kMoeCudaStreamMaxK) {
    return Invalid(op, field,
                   absl::StrFormat("is %d, the streaming GEMM at tile_rows 32 takes K <= %d", k,
                                   kMoeCudaStreamMaxK));
  }
  return absl::OkStatus();
}

absl::Status CheckGemmKind(const char* op, const char* field, MoeCudaGemm gemm) {
  const int v = static_cast<int>(gemm);
  if (v < static_cast<int>(MoeCudaGemm::kAuto) || v > static_cast<int>(MoeCudaGemm::kStreamRing)) {
    return Invalid(op, field,
                   absl::StrFormat("is %d, must be kAuto, kTiled, kStream, kWgmma, kWgmmaRs, "
                                   "kStream16, kStream32 or kStreamRing",
                                   v));
  }
  return absl::OkStatus();
}

absl::Status CheckRingCut(const char* op, MoeCudaRingCut cut) {
  if (static_cast<int>(cut) < 0 ||
      static_cast<int>(cut) > static_cast<int>(MoeCudaRingCut::kDynamic)) {
    return Invalid(
        op, "ring_cut",
        absl::StrFormat("is %d (kAuto 0, kStatic 1 or kDynamic 2)", static_cast<int>(cut)));
  }
  return absl::OkStatus();
}

// The TMA-ring GEMM: tile_rows 8, its partials and cut.
absl::Status CheckRing(const char* op, bool ring, MoeCudaRingCut cut, int64_t tile_rows,
                       int64_t slots, const float* partials, int64_t bytes, int64_t cols) {
  RETURN_IF_ERROR(CheckRingCut(op, cut));
  if (!ring) return absl::OkStatus();
  if (tile_rows != kMoeCudaStreamTileRows) {
    return Invalid(op, "ring",
                   absl::StrFormat("is set but tile_rows is %d (must be 8)", tile_rows));
  }
  RETURN_IF_ERROR(CheckNonNull(op, {{"ring_partials", partials}}));
  RETURN_IF_ERROR(CheckAligned(op, "ring_partials", partials, 16));
  const int64_t need = MoeCudaRingPartialBytes(slots, cols);
  if (bytes < need) {
    return Invalid(op, "ring_partials_bytes", absl::StrFormat("is %d, needs %d", bytes, need));
  }
  return absl::OkStatus();
}

// The register-sourced wgmma GEMM runs on the wgmma GEMM's 128-row tiles, or on 32- / 48- / 64- /
// 80- / 96-row tiles where MoeCudaRsTileRows gives them.
absl::Status CheckWgmmaRs(const char* op, bool wgmma_rs, bool stream, int64_t tile_rows,
                          int64_t ctas, int64_t slots, int64_t n_experts) {
  if (ctas < 0) {
    return Invalid(op, "wgmma_rs_ctas",
                   absl::StrFormat("is %d (0 = one per SM, or positive)", ctas));
  }
  if (wgmma_rs && stream) {
    return Invalid(op, "wgmma_rs", "and stream are both set (one GEMM runs a stage)");
  }
  if (!wgmma_rs && MoeCudaIsRsOnlyTileRows(tile_rows)) {
    return Invalid(
        op, "tile_rows",
        absl::StrFormat("is %d, which only the register-sourced GEMM (wgmma_rs) runs", tile_rows));
  }
  if (!wgmma_rs || tile_rows == kMoeCudaWgmmaTileRows) return absl::OkStatus();
  // A table height where MoeCudaRsTileRows gives it (any other value gives 128 or another height).
  if (MoeCudaRsTileRows(slots, n_experts, tile_rows) == tile_rows) return absl::OkStatus();
  std::string takes = absl::StrFormat("%d", kMoeCudaWgmmaTileRows);
  for (const MoeCudaRsTileHeight& h : kMoeCudaRsTileHeights) {
    absl::StrAppendFormat(&takes, ", %d at <= %d", h.rows, h.max_slots_per_expert);
  }
  return Invalid(op, "wgmma_rs",
                 absl::StrFormat("is set but tile_rows is %d (the register-sourced wgmma GEMM "
                                 "takes tile_rows %s slot rows per expert)",
                                 tile_rows, takes));
}

absl::Status CheckGemmCommon(const char* op, const MoeCudaWeights* w, int64_t slots,
                             int64_t tile_rows, const int32_t* offsets, const int32_t* tiles,
                             const int32_t* num_tiles) {
  if (w == nullptr) return Invalid(op, "weights", "is null");
  RETURN_IF_ERROR(Validate(*w)) << op;
  if (slots < 0 || slots > kMaxSlots) return Invalid(op, "slots", "must be in [0, 2^31)");
  RETURN_IF_ERROR(CheckTileRows(op, tile_rows, /*with_rs=*/true));
  if (slots == 0) return absl::OkStatus();
  return CheckNonNull(op, {{"offsets", offsets}, {"tiles", tiles}, {"num_tiles", num_tiles}});
}

absl::Status CheckStreamRowTiles(const char* op, int row_tiles) {
  if (row_tiles < 0 || row_tiles > 2) {
    return Invalid(op, "stream_row_tiles", absl::StrFormat("is %d, must be 0, 1 or 2", row_tiles));
  }
  return absl::OkStatus();
}

absl::Status CheckKStep(const char* op, const char* field, int64_t k_step, int64_t k) {
  if (k_step != kMoeCudaKStepAuto && k_step != 128 && k_step != 256) {
    return Invalid(op, field, absl::StrFormat("is %d, must be 0 (automatic), 128 or 256", k_step));
  }
  if (k_step == 256 && k % 256 != 0) {
    return Invalid(op, field, absl::StrFormat("is 256 but K = %d is not a multiple of 256", k));
  }
  return absl::OkStatus();
}

size_t Align256(size_t v) { return (v + 255) & ~size_t{255}; }

absl::Status CheckPath(const char* op, const char* field, MoeCudaPath path) {
  const int v = static_cast<int>(path);
  if (v < static_cast<int>(MoeCudaPath::kAuto) || v > static_cast<int>(MoeCudaPath::kLarge)) {
    return Invalid(op, field, absl::StrFormat("is %d, must be kAuto, kSmall or kLarge", v));
  }
  return absl::OkStatus();
}

}  // namespace

MoeCudaPath MoeCudaRoutePath(int64_t m, MoeCudaPath path) {
  if (path != MoeCudaPath::kAuto) return path;
  return m >= kMoeCudaRouteWarpMinTokens ? MoeCudaPath::kLarge : MoeCudaPath::kSmall;
}

MoeCudaSortPlan MoeCudaPlanSort(int64_t slots, MoeCudaPath path, bool has_scratch) {
  MoeCudaSortPlan plan;
  if (path == MoeCudaPath::kAuto) {
    path = has_scratch && slots >= kMoeCudaSortMultiBlockMinSlots ? MoeCudaPath::kLarge
                                                                  : MoeCudaPath::kSmall;
  }
  plan.path = path;
  if (path != MoeCudaPath::kLarge) return plan;
  const int64_t s = std::max<int64_t>(slots, 1);
  const int64_t per_block = (s + kMoeCudaSortMaxBlocks - 1) / kMoeCudaSortMaxBlocks;
  plan.chunk =
      std::max<int64_t>(1, (per_block + kMoeCudaSortChunkUnit - 1) / kMoeCudaSortChunkUnit) *
      kMoeCudaSortChunkUnit;
  plan.blocks = (s + plan.chunk - 1) / plan.chunk;
  return plan;
}

absl::Status Validate(const MoeCudaWeights& w) {
  constexpr const char* kOp = "MoeCudaWeights";
  if (w.n_experts < 1 || w.n_experts > kMoeCudaMaxExperts) {
    return Invalid(kOp, "n_experts",
                   absl::StrFormat("is %d, must be in [1, %d]", w.n_experts, kMoeCudaMaxExperts));
  }
  RETURN_IF_ERROR(CheckDim(kOp, "dim", w.dim));
  RETURN_IF_ERROR(CheckDim(kOp, "inter", w.inter));
  RETURN_IF_ERROR(CheckNonNull(kOp, {{"w1", w.w1},
                                     {"w1_scale", w.w1_scale},
                                     {"w3", w.w3},
                                     {"w3_scale", w.w3_scale},
                                     {"w2", w.w2},
                                     {"w2_scale", w.w2_scale}}));
  for (const auto& [name, ptr] :
       {std::pair<const char*, const void*>{"w1", w.w1}, {"w3", w.w3}, {"w2", w.w2}}) {
    RETURN_IF_ERROR(CheckAligned(kOp, name, ptr, 16));
  }
  for (const auto& [name, ptr] : {std::pair<const char*, const void*>{"w1_scale", w.w1_scale},
                                  {"w3_scale", w.w3_scale},
                                  {"w2_scale", w.w2_scale}}) {
    RETURN_IF_ERROR(CheckAligned(kOp, name, ptr, 4));
  }
  if (w.code_order != MoeFp4CodeOrder::kDevice) {
    return Invalid(kOp, "code_order",
                   "must be kDevice: convert the codes once after upload (MoeFp4CodesToDeviceOrder "
                   "or LaunchMoeFp4ToDeviceOrder)");
  }
  return absl::OkStatus();
}

namespace moe_cuda_internal {

absl::Status ValidateMoeFp4Conversion(const uint8_t* codes, int64_t bytes) {
  constexpr const char* kOp = "LaunchMoeFp4ToDeviceOrder";
  if (bytes < 0 || bytes % 4 != 0) {
    return Invalid(kOp, "bytes",
                   absl::StrFormat("is %d, must be a non-negative multiple of 4", bytes));
  }
  if (bytes == 0) return absl::OkStatus();
  RETURN_IF_ERROR(CheckNonNull(kOp, {{"codes", codes}}));
  return CheckAligned(kOp, "codes", codes, 4);
}

absl::Status ValidateMoeRouteCuda(const MoeRouteParams& p, MoeCudaPath path) {
  constexpr const char* kOp = "LaunchMoeRoute";
  RETURN_IF_ERROR(CheckPath(kOp, "path", path));
  RETURN_IF_ERROR(CheckExpertsTopK(kOp, p.n_experts, p.options.top_k));
  RETURN_IF_ERROR(moe_internal::ValidateMoeOptions(p.options, p.n_experts, kOp));
  RETURN_IF_ERROR(CheckSlots(kOp, "m", p.m, p.options.top_k));
  if (p.is_image != nullptr && p.bias_vl == nullptr) {
    return Invalid(kOp, "bias_vl", "is null but is_image is given");
  }
  if (p.m == 0) return absl::OkStatus();
  return CheckNonNull(
      kOp,
      {{"logits", p.logits}, {"expert_ids", p.expert_ids}, {"expert_weights", p.expert_weights}});
}

}  // namespace moe_cuda_internal

absl::Status Validate(const MoePermuteParams& p) {
  constexpr const char* kOp = "LaunchMoePermute";
  RETURN_IF_ERROR(CheckExpertsTopK(kOp, p.n_experts, p.top_k));
  RETURN_IF_ERROR(CheckSlots(kOp, "m", p.m, p.top_k));
  RETURN_IF_ERROR(CheckDim(kOp, "dim", p.dim));
  RETURN_IF_ERROR(CheckTileRows(kOp, p.tile_rows, /*with_rs=*/true));
  RETURN_IF_ERROR(CheckPath(kOp, "path", p.path));
  if (p.path == MoeCudaPath::kLarge && p.sort_scratch == nullptr) {
    return Invalid(kOp, "sort_scratch", "is null but path is kLarge (the multi-block sort)");
  }
  RETURN_IF_ERROR(CheckAligned(kOp, "sort_scratch", p.sort_scratch, 4));
  RETURN_IF_ERROR(CheckAligned(kOp, "ring_counters", p.ring_counters, 4));
  if (p.m == 0) return absl::OkStatus();
  RETURN_IF_ERROR(CheckNonNull(kOp, {{"expert_ids", p.expert_ids},
                                     {"expert_weights", p.expert_weights},
                                     {"x", p.x},
                                     {"offsets", p.offsets},
                                     {"slot_token", p.slot_token},
                                     {"slot_weight", p.slot_weight},
                                     {"token_slot", p.token_slot},
                                     {"tiles", p.tiles},
                                     {"num_tiles", p.num_tiles},
                                     {"xg", p.xg}}));
  RETURN_IF_ERROR(CheckRows16(kOp, "x", "x_stride", p.x, p.x_stride, p.dim));
  RETURN_IF_ERROR(CheckAligned(kOp, "xg", p.xg, 16));
  return CheckAligned(kOp, "x_codes", p.x_codes, 16);
}

absl::Status ValidateMoeRoutePermute(const MoeRouteParams& route, const MoePermuteParams& permute) {
  constexpr const char* kOp = "LaunchMoeRoutePermute";
  RETURN_IF_ERROR(moe_cuda_internal::ValidateMoeRouteCuda(route, MoeCudaPath::kAuto));
  RETURN_IF_ERROR(Validate(permute));
  if (permute.m != route.m || permute.n_experts != route.n_experts ||
      permute.top_k != route.options.top_k) {
    return Invalid(
        kOp, "permute",
        absl::StrFormat("m %d, n_experts %d, top_k %d differ from the route's %d, %d, %d",
                        permute.m, permute.n_experts, permute.top_k, route.m, route.n_experts,
                        route.options.top_k));
  }
  if (!MoeCudaFrontFits(route.m)) {
    return Invalid(kOp, "m",
                   absl::StrFormat("is %d; the fused front takes at most %d tokens (use "
                                   "LaunchMoeRoute + LaunchMoePermute)",
                                   route.m, kMoeCudaFrontMaxTokens));
  }
  if (permute.path == MoeCudaPath::kLarge) {
    return Invalid(kOp, "permute.path", "is kLarge; the fused front is the one-block sort");
  }
  if (route.m == 0) return absl::OkStatus();
  if (permute.expert_ids != route.expert_ids || permute.expert_weights != route.expert_weights) {
    return Invalid(kOp, "permute.expert_ids",
                   "and expert_weights must be the route's expert_ids / expert_weights");
  }
  return absl::OkStatus();
}

int64_t MoeCudaRsMinSlotsPerExpertFor(double dram_bytes_per_sm_cycle) {
  return dram_bytes_per_sm_cycle > 0 &&
                 dram_bytes_per_sm_cycle < kMoeCudaRsLowBandwidthBytesPerSmCycle
             ? kMoeCudaWgmmaMinSlotsPerExpertLowBandwidth
             : kMoeCudaWgmmaMinSlotsPerExpert;
}

MoeCudaGemm MoeCudaChooseGemm(int64_t m, int64_t top_k, int64_t n_experts, MoeCudaGemm gemm,
                              int64_t max_k, int64_t rs_min_slots_per_expert) {
  if (gemm != MoeCudaGemm::kAuto) return gemm;
  const int64_t slots = m * top_k;
  // The register-sourced wgmma GEMM from 8 (the H200) or 4 (the H100) slot rows per expert on
  // average, on tiles of 32, 64, 96 or 128 rows by that mean (MoeCudaRsTileRows; 48 / 80 asked
  // for). slots >= rs_min · E, without the product (rs_min may be any positive value).
  if (slots / n_experts >= rs_min_slots_per_expert) return MoeCudaGemm::kWgmmaRs;
  // Below it the weights stream, where max(D, I) fits the streaming GEMM's shared memory.
  if (max_k <= kMoeCudaStreamMaxK) {
    // Its TMA-ring form, from one token up to 4 slots per expert (MoeCudaRingMaxSlots; the
    // workspace holds its partials there).
    if (slots <= MoeCudaRingMaxSlots(n_experts)) return MoeCudaGemm::kStreamRing;
    // An n8 tile per expert up to ~6 slots on average; then two n8 slot tiles per decoded weight
    // where 16-row tiles fit (at 8, about a third of the experts need a second 8-row tile, which
    // re-reads their weights).
    if (slots <= kMoeCudaStream8MaxSlotsPerExpert * n_experts || max_k > kMoeCudaStream16MaxK) {
      return MoeCudaGemm::kStream;
    }
    return MoeCudaGemm::kStream16;
  }
  return MoeCudaGemm::kTiled;
}

bool MoeCudaDownRsAfterOtherUp(int64_t m, int64_t top_k, int64_t n_experts, MoeCudaGemm gemm,
                               MoeCudaGemm down_gemm, int64_t max_k,
                               int64_t rs_min_slots_per_expert) {
  if (down_gemm != MoeCudaGemm::kWgmmaRs) return false;
  const MoeCudaGemm up =
      MoeCudaChooseGemm(m, top_k, n_experts, gemm, max_k, rs_min_slots_per_expert);
  if (up == MoeCudaGemm::kWgmmaRs) return false;
  return up != MoeCudaGemm::kStreamRing || m * top_k > MoeCudaRingMaxSlots(n_experts);
}

absl::Status Validate(const MoeRegroupTilesParams& p) {
  constexpr const char* kOp = "LaunchMoeRegroupTiles";
  if (p.n_experts < 1 || p.n_experts > kMoeCudaMaxExperts) {
    return Invalid(kOp, "n_experts",
                   absl::StrFormat("is %d, must be in [1, %d]", p.n_experts, kMoeCudaMaxExperts));
  }
  if (p.slots < 0) return Invalid(kOp, "slots", absl::StrFormat("is %d, must be >= 0", p.slots));
  // Regrouping keeps the tiles that start a 128-row block: the list's rows must divide 128.
  RETURN_IF_ERROR(CheckTileRows(kOp, p.tile_rows, /*with_rs=*/false));
  return CheckNonNull(kOp, {{"offsets", p.offsets},
                            {"tiles", p.tiles},
                            {"num_tiles", p.num_tiles},
                            {"tiles_out", p.tiles_out},
                            {"num_tiles_out", p.num_tiles_out}});
}

int64_t MoeCudaRsTileRows(int64_t slots, int64_t n_experts, int64_t rs_tile_rows) {
  // 0: the first automatic height that applies; a height asked for: that one where it applies.
  for (const MoeCudaRsTileHeight& h : kMoeCudaRsTileHeights) {
    if ((rs_tile_rows == 0 ? h.automatic : rs_tile_rows == h.rows) &&
        slots <= h.max_slots_per_expert * n_experts) {
      return h.rows;
    }
  }
  return kMoeCudaWgmmaTileRows;
}

int64_t MoeCudaTileRows(int64_t m, int64_t top_k, int64_t n_experts, MoeCudaGemm gemm,
                        int64_t max_k, int64_t rs_min_slots_per_expert) {
  switch (MoeCudaChooseGemm(m, top_k, n_experts, gemm, max_k, rs_min_slots_per_expert)) {
    case MoeCudaGemm::kStream:
    case MoeCudaGemm::kStreamRing:
      return kMoeCudaStreamTileRows;
    case MoeCudaGemm::kStream16:
      return kMoeCudaStream16TileRows;
    case MoeCudaGemm::kStream32:
      return kMoeCudaStream32TileRows;
    case MoeCudaGemm::kWgmma:
      return kMoeCudaWgmmaTileRows;
    case MoeCudaGemm::kWgmmaRs:
      return MoeCudaRsTileRows(m * top_k, n_experts, 0);
    default:
      break;
  }
  const int64_t slots = m * top_k;
  if (slots <= 12 * n_experts) return 16;
  if (slots <= 40 * n_experts) return 32;
  return 64;
}

const char* MoeCudaGemmName(MoeCudaGemm gemm) {
  switch (gemm) {
    case MoeCudaGemm::kAuto:
      return "auto";
    case MoeCudaGemm::kTiled:
      return "tiled";
    case MoeCudaGemm::kStream:
      return "streaming";
    case MoeCudaGemm::kStream16:
      return "streaming 16-row";
    case MoeCudaGemm::kStream32:
      return "streaming 32-row";
    case MoeCudaGemm::kWgmma:
      return "wgmma";
    case MoeCudaGemm::kWgmmaRs:
      return "wgmma RS";
    case MoeCudaGemm::kStreamRing:
      return "streaming ring";
  }
  return "unknown";
}

absl::Status Validate(const MoeExpertUpParams& p) {
  constexpr const char* kOp = "LaunchMoeExpertUp";
  RETURN_IF_ERROR(
      CheckGemmCommon(kOp, p.weights, p.slots, p.tile_rows, p.offsets, p.tiles, p.num_tiles));
  if (p.slots == 0) return absl::OkStatus();
  RETURN_IF_ERROR(CheckKStep(kOp, "k_step", p.k_step, p.weights->dim));
  RETURN_IF_ERROR(CheckStream(kOp, "weights.dim", p.tile_rows, p.stream, p.weights->dim));
  RETURN_IF_ERROR(CheckWgmmaRs(kOp, p.wgmma_rs, p.stream, p.tile_rows, p.wgmma_rs_ctas, p.slots,
                               p.weights->n_experts));
  RETURN_IF_ERROR(CheckStreamRowTiles(kOp, p.stream_row_tiles));
  RETURN_IF_ERROR(CheckRing(kOp, p.ring, p.ring_cut, p.tile_rows, p.slots, p.ring_partials,
                            p.ring_partials_bytes, 2 * p.weights->inter));
  RETURN_IF_ERROR(CheckNonNull(kOp, {{"xg", p.xg}, {"slot_weight", p.slot_weight}, {"ag", p.ag}}));
  RETURN_IF_ERROR(CheckAligned(kOp, "xg", p.xg, 16));
  RETURN_IF_ERROR(CheckAligned(kOp, "ag", p.ag, 16));
  return CheckAligned(kOp, "act", p.act, 16);
}

absl::Status Validate(const MoeExpertDownParams& p) {
  constexpr const char* kOp = "LaunchMoeExpertDown";
  RETURN_IF_ERROR(
      CheckGemmCommon(kOp, p.weights, p.slots, p.tile_rows, p.offsets, p.tiles, p.num_tiles));
  if (p.slots == 0) return absl::OkStatus();
  RETURN_IF_ERROR(CheckKStep(kOp, "k_step", p.k_step, p.weights->inter));
  RETURN_IF_ERROR(CheckStream(kOp, "weights.inter", p.tile_rows, p.stream, p.weights->inter));
  RETURN_IF_ERROR(CheckWgmmaRs(kOp, p.wgmma_rs, p.stream, p.tile_rows, p.wgmma_rs_ctas, p.slots,
                               p.weights->n_experts));
  RETURN_IF_ERROR(CheckStreamRowTiles(kOp, p.stream_row_tiles));
  RETURN_IF_ERROR(CheckRing(kOp, p.ring, p.ring_cut, p.tile_rows, p.slots, p.ring_partials,
                            p.ring_partials_bytes, p.weights->dim));
  RETURN_IF_ERROR(CheckNonNull(kOp, {{"ag", p.ag}, {"ye", p.ye}}));
  RETURN_IF_ERROR(CheckAligned(kOp, "ag", p.ag, 16));
  return CheckAligned(kOp, "ye", p.ye, 16);
}

// MoeHcPost's pointers and strides for m tokens of D columns (`op`.hc_post.*).
// The bytes [begin, end) of `rows` rows of `stride` bf16 elements whose last row holds `width`.
struct Bf16Span {
  uintptr_t begin = 0, end = 0;
};
Bf16Span SpanOf(const void* ptr, int64_t rows, int64_t stride, int64_t width) {
  const auto b = reinterpret_cast<uintptr_t>(ptr);
  return {b, b + static_cast<uintptr_t>(((rows - 1) * stride + width) * 2)};
}
bool Overlap(const Bf16Span& a, const Bf16Span& b) { return a.begin < b.end && b.begin < a.end; }

// MoeHcPost's pointers and strides for m tokens of D columns (`op`.hc_post.*): out must equal
// residual (in place, the same stride) or overlap neither it nor y.
absl::Status CheckHcPost(const char* op, const MoeHcPost& h, int64_t m, int64_t dim,
                         const uint16_t* y, int64_t y_stride) {
  RETURN_IF_ERROR(CheckNonNull(op, {{"hc_post.post", h.post},
                                    {"hc_post.comb", h.comb},
                                    {"hc_post.residual", h.residual},
                                    {"hc_post.out", h.out}}));
  RETURN_IF_ERROR(CheckAligned(op, "hc_post.post", h.post, 16));
  RETURN_IF_ERROR(CheckAligned(op, "hc_post.comb", h.comb, 16));
  RETURN_IF_ERROR(CheckRows16(op, "hc_post.residual", "hc_post.residual_stride", h.residual,
                              h.residual_stride, 4 * dim));
  RETURN_IF_ERROR(
      CheckRows16(op, "hc_post.out", "hc_post.out_stride", h.out, h.out_stride, 4 * dim));
  if (h.out == h.residual && h.out_stride != h.residual_stride) {
    return Invalid(op, "hc_post.out_stride", "differs from residual_stride with out == residual");
  }
  const Bf16Span out = SpanOf(h.out, m, h.out_stride, 4 * dim);
  if (h.out != h.residual && Overlap(out, SpanOf(h.residual, m, h.residual_stride, 4 * dim))) {
    return Invalid(op, "hc_post.out", "overlaps hc_post.residual (give the same pointer or none)");
  }
  if (y != nullptr && Overlap(out, SpanOf(y, m, y_stride, dim))) {
    return Invalid(op, "hc_post.out", "overlaps y");
  }
  return absl::OkStatus();
}

absl::Status Validate(const MoeCombineParams& p) {
  constexpr const char* kOp = "LaunchMoeCombine";
  if (p.top_k < 1 || p.top_k > kMoeCudaMaxTopK) {
    return Invalid(kOp, "top_k",
                   absl::StrFormat("is %d, must be in [1, %d]", p.top_k, kMoeCudaMaxTopK));
  }
  RETURN_IF_ERROR(CheckSlots(kOp, "m", p.m, p.top_k));
  RETURN_IF_ERROR(CheckDim(kOp, "dim", p.dim));
  if (p.m == 0) return absl::OkStatus();
  RETURN_IF_ERROR(CheckNonNull(
      kOp, {{"expert_ids", p.expert_ids}, {"token_slot", p.token_slot}, {"ye", p.ye}}));
  RETURN_IF_ERROR(CheckAligned(kOp, "ye", p.ye, 16));
  if (p.hc_post.out != nullptr) {
    RETURN_IF_ERROR(CheckHcPost(kOp, p.hc_post, p.m, p.dim, p.y, p.y_stride));
  }
  if (p.y != nullptr || p.hc_post.out == nullptr) {
    RETURN_IF_ERROR(CheckNonNull(kOp, {{"y", p.y}}));
    RETURN_IF_ERROR(CheckRows16(kOp, "y", "y_stride", p.y, p.y_stride, p.dim));
  }
  if (p.shared_y != nullptr) {
    RETURN_IF_ERROR(
        CheckRows16(kOp, "shared_y", "shared_y_stride", p.shared_y, p.shared_y_stride, p.dim));
  }
  return absl::OkStatus();
}

namespace moe_cuda_internal {

MoeCudaLayout ComputeMoeCudaLayout(int64_t n_experts, int64_t dim, int64_t inter,
                                   int64_t max_tokens, int64_t top_k, size_t shared_bytes) {
  const size_t s = static_cast<size_t>(std::max<int64_t>(max_tokens, 0) * top_k);
  const size_t e = static_cast<size_t>(n_experts);
  MoeCudaLayout l;
  size_t at = 0;
  auto take = [&at](size_t bytes) {
    const size_t here = at;
    at = Align256(at + bytes);
    return here;
  };
  l.counts = take(4 * e);
  l.sort_scratch = take(static_cast<size_t>(MoeCudaSortScratchBytes(n_experts)));
  l.offsets = take(4 * (e + 1));
  l.num_tiles = take(4);
  l.tiles = take(8 * s);
  l.ids = take(4 * s);
  l.weights = take(4 * s);
  l.slot_token = take(4 * s);
  l.slot_weight = take(4 * s);
  l.token_slot = take(4 * s);
  l.xg = take(2 * s * static_cast<size_t>(dim));
  l.ag = take(2 * s * static_cast<size_t>(inter));
  l.ring_partials = take(static_cast<size_t>(
      MoeCudaRingPartialBytes(std::min<int64_t>(static_cast<int64_t>(s), MoeCudaRingMaxSlots(e)),
                              std::max(2 * inter, dim))));
  if (shared_bytes > 0) {
    l.shared_y =
        take(2 * static_cast<size_t>(std::max<int64_t>(max_tokens, 0)) * static_cast<size_t>(dim));
    l.shared_ws = take(shared_bytes);
  }
  l.total = at + 256;
  return l;
}

// The shared expert's workspace bytes (0 without one), after checking its D against the experts'.
absl::StatusOr<size_t> SharedExpertBytes(const char* op, const MoeSharedExpertWeights* shared,
                                         int64_t dim, int64_t max_tokens) {
  if (shared == nullptr) return size_t{0};
  ASSIGN_OR_RETURN(const MoeSharedExpertDims d, MoeSharedExpertDimsOf(*shared), op);
  if (d.dim != dim) {
    return Invalid(op, "shared", absl::StrFormat("has D = %d, the experts D = %d", d.dim, dim));
  }
  return MoeSharedExpertWorkspaceBytes(*shared, max_tokens);
}

absl::Status ValidateMoeCudaParamsCore(const MoeCudaParams& p) {
  constexpr const char* kOp = "MoeCuda";
  if (p.weights == nullptr) return Invalid(kOp, "weights", "is null");
  RETURN_IF_ERROR(Validate(*p.weights)) << kOp;
  const MoeCudaWeights& w = *p.weights;
  RETURN_IF_ERROR(moe_internal::ValidateMoeOptions(p.options, w.n_experts, kOp));
  RETURN_IF_ERROR(CheckExpertsTopK(kOp, w.n_experts, p.options.top_k));
  RETURN_IF_ERROR(CheckSlots(kOp, "m", p.m, p.options.top_k));
  if (p.is_image != nullptr && w.gate_bias_vl == nullptr) {
    return Invalid(kOp, "weights.gate_bias_vl", "is null but is_image is given");
  }
  RETURN_IF_ERROR(CheckKStep(kOp, "gemm_k_step", p.gemm_k_step, w.dim));
  RETURN_IF_ERROR(CheckKStep(kOp, "gemm_k_step", p.gemm_k_step, w.inter));
  if (p.gemm_stream_row_tiles < 0 || p.gemm_stream_row_tiles > 2) {
    return Invalid(kOp, "gemm_stream_row_tiles", "must be 0, 1 or 2");
  }
  RETURN_IF_ERROR(CheckPath(kOp, "route_path", p.route_path));
  RETURN_IF_ERROR(CheckPath(kOp, "sort_path", p.sort_path));
  RETURN_IF_ERROR(CheckGemmKind(kOp, "gemm", p.gemm));
  if (p.down_gemm != MoeCudaGemm::kAuto && p.down_gemm != MoeCudaGemm::kWgmmaRs) {
    return Invalid(
        kOp, "down_gemm",
        absl::StrFormat("is %d, must be kAuto (0) or kWgmmaRs (4)", static_cast<int>(p.down_gemm)));
  }
  if (p.rs_min_slots_per_expert < 0) {
    return Invalid(
        kOp, "rs_min_slots_per_expert",
        absl::StrFormat("is %d, must be 0 (the device's) or positive", p.rs_min_slots_per_expert));
  }
  if (!MoeCudaIsRsTileRowsChoice(p.rs_tile_rows)) {
    return Invalid(
        kOp, "rs_tile_rows",
        absl::StrFormat("is %d, must be 0, %d, %d, %d, %d, %d or %d", p.rs_tile_rows,
                        kMoeCudaRsNarrowTileRows, kMoeCudaRs48TileRows, kMoeCudaRsMidTileRows,
                        kMoeCudaRs80TileRows, kMoeCudaRsWideTileRows, kMoeCudaWgmmaTileRows));
  }
  if ((p.gemm == MoeCudaGemm::kStream || p.gemm == MoeCudaGemm::kStreamRing) &&
      std::max(w.dim, w.inter) > kMoeCudaStreamMaxK) {
    return Invalid(kOp, "gemm",
                   absl::StrFormat("is kStream / kStreamRing but max(D, I) = %d is above %d",
                                   std::max(w.dim, w.inter), kMoeCudaStreamMaxK));
  }
  if (p.gemm == MoeCudaGemm::kStream16 && std::max(w.dim, w.inter) > kMoeCudaStream16MaxK) {
    return Invalid(kOp, "gemm",
                   absl::StrFormat("is kStream16 but max(D, I) = %d is above %d",
                                   std::max(w.dim, w.inter), kMoeCudaStream16MaxK));
  }
  if (p.gemm == MoeCudaGemm::kStream32 && std::max(w.dim, w.inter) > kMoeCudaStreamMaxK) {
    return Invalid(kOp, "gemm",
                   absl::StrFormat("is kStream32 but max(D, I) = %d is above %d",
                                   std::max(w.dim, w.inter), kMoeCudaStreamMaxK));
  }
  if (p.shared != nullptr && p.shared_y != nullptr) {
    return Invalid(kOp, "shared", "and shared_y are both given (give one)");
  }
  if (p.shared_y_ready != nullptr && p.shared_y == nullptr) {
    return Invalid(kOp, "shared_y_ready", "is given without shared_y");
  }
  RETURN_IF_ERROR(SharedExpertBytes(kOp, p.shared, w.dim, 0).status());
  if (p.hc_post_ready != nullptr && p.hc_post.out == nullptr) {
    return Invalid(kOp, "hc_post_ready", "is given without hc_post.out");
  }
  if (p.m == 0) return absl::OkStatus();
  RETURN_IF_ERROR(CheckNonNull(kOp, {{"logits", p.logits}, {"x", p.x}}));
  RETURN_IF_ERROR(CheckRows16(kOp, "x", "x_stride", p.x, p.x_stride, w.dim));
  if (p.hc_post.out != nullptr) {
    RETURN_IF_ERROR(CheckHcPost(kOp, p.hc_post, p.m, w.dim, p.y, p.y_stride));
  }
  if (p.y != nullptr || p.hc_post.out == nullptr) {
    RETURN_IF_ERROR(CheckNonNull(kOp, {{"y", p.y}}));
    RETURN_IF_ERROR(CheckRows16(kOp, "y", "y_stride", p.y, p.y_stride, w.dim));
  }
  if (p.shared_y != nullptr) {
    RETURN_IF_ERROR(
        CheckRows16(kOp, "shared_y", "shared_y_stride", p.shared_y, p.shared_y_stride, w.dim));
  }
  return absl::OkStatus();
}

}  // namespace moe_cuda_internal

absl::StatusOr<size_t> MoeCudaWorkspaceBytes(const MoeCudaWeights& weights, int64_t max_tokens,
                                             int64_t top_k, const MoeSharedExpertWeights* shared) {
  constexpr const char* kOp = "MoeCudaWorkspaceBytes";
  if (weights.n_experts < 1 || weights.n_experts > kMoeCudaMaxExperts) {
    return Invalid(kOp, "weights.n_experts", "is out of range");
  }
  RETURN_IF_ERROR(CheckDim(kOp, "weights.dim", weights.dim));
  RETURN_IF_ERROR(CheckDim(kOp, "weights.inter", weights.inter));
  RETURN_IF_ERROR(CheckExpertsTopK(kOp, weights.n_experts, top_k));
  RETURN_IF_ERROR(CheckSlots(kOp, "max_tokens", max_tokens, top_k));
  ASSIGN_OR_RETURN(const size_t shared_bytes,
                   moe_cuda_internal::SharedExpertBytes(kOp, shared, weights.dim, max_tokens));
  return moe_cuda_internal::ComputeMoeCudaLayout(weights.n_experts, weights.dim, weights.inter,
                                                 max_tokens, top_k, shared_bytes)
      .total;
}

absl::Status Validate(const MoeCudaParams& p) {
  RETURN_IF_ERROR(moe_cuda_internal::ValidateMoeCudaParamsCore(p));
  RETURN_IF_ERROR(CheckRingCut("MoeCuda", p.ring_cut));
  if (p.m == 0) return absl::OkStatus();
  ASSIGN_OR_RETURN(const size_t shared_bytes,
                   moe_cuda_internal::SharedExpertBytes("MoeCuda", p.shared, p.weights->dim, p.m));
  const size_t need =
      moe_cuda_internal::ComputeMoeCudaLayout(p.weights->n_experts, p.weights->dim,
                                              p.weights->inter, p.m, p.options.top_k, shared_bytes)
          .total;
  if (p.workspace == nullptr || p.workspace_bytes < need) {
    return Invalid("MoeCuda", "workspace",
                   absl::StrFormat("has %d bytes, needs %d", p.workspace_bytes, need));
  }
  return absl::OkStatus();
}

}  // namespace flashserve::kernels
