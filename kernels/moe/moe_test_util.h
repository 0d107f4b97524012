// Host-side helpers of the MoE CUDA tests and bench (no CUDA): deterministic expert weights and
// their CPU Linears, activations and gate logits without near-tie routing, the host references
// of each GPU stage (counting sort, FP8 QDQ in operand order, SwiGLU with a correctly rounded exp)
// and the comparison statistics.
//
// Exact-arithmetic inputs (WeightKind::kExactArith weights, SmallIntActivations): every weight is
// a multiple of 2^-5 and at most 24 in magnitude, every activation an integer in [-3, 3] (FP8
// QDQ leaves those unchanged). Each product is then a multiple of 2^-5, and while Σ|x·w| < 2^15
// every partial sum of a dot product, in any order and with any grouping, is a multiple of 2^-5
// below 2^15 — exactly representable in fp32 (24 bits), also after a tensor core aligns its
// addends to the largest one. So the GPU's sums equal LinearCpu's bit for bit; ExactSumBound
// checks the premise on the actual data.
#pragma once

#include <array>
#include <cstdint>
#include <memory>
#include <vector>

#include "kernels/gemm/prepared_linear.h"
#include "kernels/moe/moe.h"
#include "kernels/moe/moe_cuda.h"
#include "kernels/moe/moe_test_weights.h"

namespace flashserve::kernels::moe_test {

struct LayerSpec {
  int64_t n_experts = 8;
  int64_t dim = 256;    // D
  int64_t inter = 128;  // I
  uint64_t seed = 1;
  WeightKind kind = WeightKind::kRealistic;
};

int64_t ProjRows(const LayerSpec& s, int proj);  // N of the projection
int64_t ProjCols(const LayerSpec& s, int proj);  // K of the projection

// One projection of one expert in checkpoint layout.
struct HostFp4 {
  std::vector<uint8_t> codes;   // [N, K/2]
  std::vector<uint8_t> scales;  // [N, K/32]
};
HostFp4 GenerateProjection(const LayerSpec& s, int proj, int64_t expert);

// The routed experts as PreparedLinears (codes only) for MoeCpu / LinearCpu: real ones for the
// experts set, one zero Linear per shape for the others (experts no token reaches; MoeCpu only
// checks their shapes).
class CpuExperts {
 public:
  CpuExperts(int64_t n_experts, int64_t dim, int64_t inter);
  void Set(int64_t expert, int proj, const HostFp4& w);
  const PreparedLinear* const* w(int proj) const { return ptr_[proj].data(); }
  const PreparedLinear& Get(int proj, int64_t expert) const { return *ptr_[proj][expert]; }

 private:
  int64_t dim_, inter_;
  std::vector<std::unique_ptr<PreparedLinear>> owned_;
  std::vector<const PreparedLinear*> ptr_[3];
};
// Experts with used[e] (all when `used` is empty) generated from the spec.
std::unique_ptr<CpuExperts> BuildCpuExperts(const LayerSpec& s, const std::vector<bool>& used);

// A kF32 gate [E, D] with bf16-representable N(0, 1/D) values (the checkpoint's bf16 gate).
std::unique_ptr<PreparedLinear> RandomGate(int64_t n_experts, int64_t dim, uint64_t seed);
// Uniform in [lo, hi).
std::vector<float> RandomUniform(int64_t n, double lo, double hi, uint64_t seed);
// Uniform in [-scale, scale].
std::vector<float> RandomBias(int64_t n, float scale, uint64_t seed);

// bf16 [m, dim]: N(0, 1) times a per-row 2^[-2, 2], 1 % of values × 16, a few all-zero blocks.
std::vector<uint16_t> RealisticActivations(int64_t m, int64_t dim, uint64_t seed);
// bf16 [m, dim]: integers in [-3, 3], nonzero with probability 1/density_den.
std::vector<uint16_t> SmallIntActivations(int64_t m, int64_t dim, int64_t density_den,
                                          uint64_t seed);

// fp32 [m, E]: the gate Linear in exact mode (what MoeCpu computes internally).
std::vector<float> GateLogits(const PreparedLinear& gate, const std::vector<uint16_t>& x,
                              int64_t m);

// True when the top_k + 1 best biased scores of the token (recomputed in double) are pairwise
// separated by more than 1e-5 relative: then the fp32 CPU and GPU recipes, which differ by an
// ulp at most, rank them identically.
bool RouteIsClear(const float* logits, int64_t n_experts, const float* bias, const MoeOptions& o);
// fp32 [m, E] logits drawn N(0, 3²) from mt19937(seed), each token's row redrawn until its
// route is clear (RouteIsClear) under its bias (bias_vl where is_image[t] != 0).
std::vector<float> ClearRouteLogits(int64_t m, int64_t n_experts, const float* bias,
                                    const float* bias_vl, const uint8_t* is_image,
                                    const MoeOptions& o, uint32_t seed);
// Redraws activation rows (RealisticActivations with other seeds) until every token's route is
// clear under its bias (bias_vl for image tokens); returns the logits of the final x.
std::vector<float> ClearRoutingActivations(const PreparedLinear& gate, const float* bias,
                                           const float* bias_vl, const uint8_t* is_image,
                                           const MoeOptions& o, int64_t m, int64_t dim,
                                           uint64_t seed, std::vector<uint16_t>* x);

// MoeCpu's counting sort of the (token, rank) slots.
struct HostPermutation {
  std::vector<int32_t> offsets;     // [E + 1]
  std::vector<int32_t> slot_token;  // [m·k]
  std::vector<float> slot_weight;   // [m·k]
  std::vector<int32_t> token_slot;  // [m·k]
  std::vector<int32_t> counts;      // [E]
};
HostPermutation CountingSort(const std::vector<int32_t>& ids, const std::vector<float>& weights,
                             int64_t m, int64_t k, int64_t n_experts);
// Weights for validation tests (null-ness and alignment only, nothing is read): E 8, D 256, I 128,
// every code pointer `buf`, every scale pointer buf + 64, device code order. `buf` must be
// 16-byte aligned.
MoeCudaWeights StandInCudaWeights(const uint8_t* buf);
// The tile list LaunchMoePermute writes for these offsets.
std::vector<int32_t> TileList(const std::vector<int32_t>& offsets, int64_t tile_rows);
// The register-sourced GEMM's tiles (kMoeCudaWgmmaTileRows slot rows of one expert, TileList) of
// a call whose slots' experts are `ids`, counted by the width each would take with every narrow
// width available (MoeRsTileWidth): [0] <= 16 rows, [1] 17–32, [2] 33–64, [3] 65–96, [4] 97–128.
std::array<int64_t, 5> RsTilesByWidth(const std::vector<int32_t>& ids, int64_t n_experts);

// Logical to operand order (MoeOperandColumn; with rs MoeRsOperandColumn, the register-sourced
// GEMM's) of a row of n (multiple of 32) bf16 values.
std::vector<uint16_t> ToOperandOrder(const uint16_t* row, int64_t n, bool rs = false);
// LinearCpu's activation QDQ of a row (formats::QuantizeFp8Ue8m0B32 then dequantised), logical
// order; codes / scales optional outputs.
std::vector<uint16_t> QdqRow(const uint16_t* row, int64_t n, std::vector<uint8_t>* codes = nullptr,
                             std::vector<uint8_t>* scales = nullptr);
// MoeSwiGluRow with a correctly rounded exp (the GPU's); weight null = no multiply.
uint16_t SwiGluCr(uint16_t g, uint16_t u, float limit, const float* weight);

// y = w · x^T for one bf16 row, LinearCpu exact mode, bf16 out [N].
std::vector<uint16_t> LinearRow(const PreparedLinear& w, const uint16_t* x);
// max over outputs of Σ_k |QDQ(x)_k · w_nk| in units of 2^-5 (see the file comment: < 2^20
// keeps the exact-arithmetic premise).
double ExactSumBound(const LayerSpec& s, int proj, int64_t expert, const uint16_t* x);

// A random FP8 shared expert (kFp8Block32, N(0,1)·2^-7-ish values) and its bf16 output per token
// as MoeCpu computes it (exact mode): w2(swiglu(w1 x, w3 x)), no routing weight.
struct SharedExpert {
  std::unique_ptr<PreparedLinear> w1, w3, w2;
};
SharedExpert RandomSharedExpert(int64_t dim, int64_t inter, uint64_t seed);
std::vector<uint16_t> SharedExpertOutput(const SharedExpert& s, const std::vector<uint16_t>& x,
                                         int64_t m, int64_t dim, float swiglu_limit);

struct CpuRun {
  std::vector<uint16_t> y;
  std::vector<int32_t> ids;
  std::vector<float> weights;
};
// MoeCpu in exact mode with a 4-thread pool.
CpuRun RunMoeCpu(const MoeWeights& w, const MoeOptions& o, const std::vector<uint16_t>& x,
                 int64_t m, const uint8_t* is_image);

// got vs want (bf16): rel_rms = ‖got − want‖₂ / ‖want‖₂, max_abs, max |want|, how many are
// within one bf16 ulp of want, how many bit-identical.
struct Diff {
  double rel_rms = 0, max_abs = 0, max_ref = 0;
  int64_t within_ulp = 0, identical = 0, n = 0;
};
Diff Compare(const std::vector<uint16_t>& got, const std::vector<uint16_t>& want);
// The bf16 spacing at |v|.
double Bf16Ulp(double v);
// Distance in fp32 ulps (of want) between two floats.
double F32Ulps(float got, float want);

}  // namespace flashserve::kernels::moe_test
