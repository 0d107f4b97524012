// bench_moe's correctness check against MoeCpu (moe_bench_check.h).
#include "kernels/moe/moe_bench_check.h"

#include <cstdint>
#include <cstdio>
#include <vector>

#include "common/base/check.h"
#include "kernels/common/cuda_check.h"
#include "kernels/moe/moe_gpu_test_util.h"

namespace flashserve::kernels {
namespace {

// The check line's note of the RS GEMM's tile rows asked for (MoeCudaParams::rs_tile_rows; 32 / 48
// / 64 / 80 / 96 run only where MoeCudaRsTileRows gives them, else 128; none: by the slot rows per
// expert).
const char* RsTilesTag(int64_t rs_tile_rows) {
  switch (rs_tile_rows) {
    case kMoeCudaRsNarrowTileRows:
      return " (32-row tiles)";
    case kMoeCudaRsMidTileRows:
      return " (64-row tiles)";
    case kMoeCudaRsWideTileRows:
      return " (96-row tiles)";
    case kMoeCudaRs48TileRows:
      return " (48-row tiles)";
    case kMoeCudaRs80TileRows:
      return " (80-row tiles)";
    case kMoeCudaWgmmaTileRows:
      return " (128-row tiles)";
    default:
      return "";
  }
}

}  // namespace

bool CheckMoeCudaAgainstCpu(const moe_test::LayerSpec& spec, const MoeOptions& o,
                            const MoeCudaWeights& w, int64_t m,
                            const moe_test::SharedExpert* shared,
                            const MoeSharedExpertWeights* dev_shared) {
  const int64_t kE = spec.n_experts, kD = spec.dim, kK = o.top_k;
  const auto gate = moe_test::RandomGate(kE, kD, 99 + m);
  std::vector<uint16_t> x;
  const auto logits =
      moe_test::ClearRoutingActivations(*gate, nullptr, nullptr, nullptr, o, m, kD, 5 + m, &x);
  std::vector<int32_t> ids(m * kK);
  std::vector<float> wts(m * kK);
  MoeRouteParams rp{o, m, kE, logits.data(), nullptr, nullptr, nullptr, ids.data(), wts.data()};
  CHECK_OK(MoeRouteCpu(rp, nullptr));
  std::vector<bool> used(kE, false);
  for (int32_t id : ids) used[id] = true;
  const auto experts = moe_test::BuildCpuExperts(spec, used);
  const MoeWeights cw{kE,
                      gate.get(),
                      nullptr,
                      nullptr,
                      experts->w(moe_test::kW1),
                      experts->w(moe_test::kW3),
                      experts->w(moe_test::kW2),
                      shared != nullptr ? shared->w1.get() : nullptr,
                      shared != nullptr ? shared->w3.get() : nullptr,
                      shared != nullptr ? shared->w2.get() : nullptr};
  const auto cpu = moe_test::RunMoeCpu(cw, o, x, m, nullptr);
  DeviceBuffer d_logits = ToDevice(logits), d_x = ToDevice(x), y(m * kD * 2), d_ids(m * kK * 4);
  DeviceBuffer ws(*MoeCudaWorkspaceBytes(w, m, kK, dev_shared));
  bool all_ok = true;
  // The expert GEMMs against the same CPU run, the RS GEMM also on 128- / 32- / 64- / 96- / 48- /
  // 80-row tiles
  // (MoeCudaParams::rs_tile_rows; 0 = by the slot rows per expert), and the 16-row streaming up
  // GEMM with the RS down GEMM after it (MoeCudaParams::down_gemm).
  struct Gemms {
    MoeCudaGemm gemm, down;
    int64_t rs_tile_rows = 0;
  };
  constexpr MoeCudaGemm kAuto = MoeCudaGemm::kAuto;
  for (const Gemms gg : {Gemms{MoeCudaGemm::kTiled, kAuto}, Gemms{MoeCudaGemm::kStream, kAuto},
                         Gemms{MoeCudaGemm::kWgmma, kAuto}, Gemms{MoeCudaGemm::kWgmmaRs, kAuto},
                         Gemms{MoeCudaGemm::kWgmmaRs, kAuto, kMoeCudaWgmmaTileRows},
                         Gemms{MoeCudaGemm::kWgmmaRs, kAuto, kMoeCudaRsNarrowTileRows},
                         Gemms{MoeCudaGemm::kWgmmaRs, kAuto, kMoeCudaRsMidTileRows},
                         Gemms{MoeCudaGemm::kWgmmaRs, kAuto, kMoeCudaRsWideTileRows},
                         Gemms{MoeCudaGemm::kWgmmaRs, kAuto, kMoeCudaRs48TileRows},
                         Gemms{MoeCudaGemm::kWgmmaRs, kAuto, kMoeCudaRs80TileRows},
                         Gemms{MoeCudaGemm::kStreamRing, kAuto},
                         Gemms{MoeCudaGemm::kStream16, MoeCudaGemm::kWgmmaRs}}) {
    const MoeCudaGemm gemm = gg.gemm;
    MoeCudaParams p;
    p.weights = &w;
    p.options = o;
    p.m = m;
    p.logits = d_logits.get<float>();
    p.x = d_x.get<uint16_t>();
    p.x_stride = kD;
    p.y = y.get<uint16_t>();
    p.y_stride = kD;
    p.expert_ids = d_ids.get<int32_t>();
    p.shared = dev_shared;
    p.workspace = ws.get();
    p.workspace_bytes = ws.bytes();
    p.gemm = gemm;
    p.down_gemm = gg.down;
    p.rs_tile_rows = gg.rs_tile_rows;
    CHECK_OK(MoeCuda(p, nullptr));
    const auto g_y = ToHost<uint16_t>(y, m * kD);
    const bool ids_ok = ToHost<int32_t>(d_ids, m * kK) == cpu.ids;
    const moe_test::Diff d = moe_test::Compare(g_y, cpu.y);
    const bool ok = ids_ok && d.rel_rms <= 0x1.0p-8 && d.max_abs <= 0x1.0p-5 * d.max_ref &&
                    d.within_ulp >= 0.95 * d.n;
    std::printf(
        "check m %ld%s, %s GEMM%s%s vs MoeCpu (exact): ids %s, rel-RMS %.2e, max abs %.3g (max "
        "|y| %.3g), %.3f %% within 1 ulp -> %s\n",
        static_cast<long>(m), dev_shared != nullptr ? " + shared expert" : "",
        MoeCudaGemmName(gemm), RsTilesTag(gg.rs_tile_rows),
        gg.down == MoeCudaGemm::kWgmmaRs ? " + RS down" : "", ids_ok ? "identical" : "DIFFER",
        d.rel_rms, d.max_abs, d.max_ref, 100.0 * d.within_ulp / d.n, ok ? "OK" : "MISMATCH");
    all_ok = all_ok && ok;
  }
  return all_ok;
}

}  // namespace flashserve::kernels
