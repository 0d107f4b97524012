// Shared by the attention GPU tests (sparse_attn_gpu_test.cc, sparse_attn_rows_gpu_test.cc): the
// cases' layouts and params, LaunchSparseAttn run beside SparseAttnCpu on the same inputs, and the
// tensor-core paths' tolerance check (README.md "CUDA"). Test code; links the CUDA launcher.
#pragma once

#include <cstdint>
#include <vector>

#include "kernels/attention/attention.h"
#include "kernels/attention/attention_test_util.h"

namespace flashserve {
class ThreadPool;
}  // namespace flashserve

namespace flashserve::kernels::testing {

inline constexpr uint16_t kPoison = 0xFFC1;  // a NaN: any unwritten element fails every comparison

// One pool for every CPU reference run (hardware threads − 1).
ThreadPool* Pool();

// Element pitches of one run: heads and tokens padded by q_pad / out_pad elements, KV rows by
// kv_pad (a pad that is not a multiple of 8 sends a head_dim-128 case down the scalar path).
struct Layout {
  int64_t q_pad = 0;
  int64_t kv_pad = 0;
  int64_t out_pad = 0;
  int64_t ws_offset = 0;  // bytes: the device workspace starts this far into its allocation
};

// Params over host or device copies of `c` in layout `l` (q and out use head pitch d + pad and
// token pitch heads · (d + pad) + pad); no pointers set.
SparseAttnParams LayoutParams(const AttnCase& c, const Layout& l);

struct Outputs {
  std::vector<uint16_t> gpu;
  std::vector<uint16_t> cpu;
};

// Runs LaunchSparseAttn and SparseAttnCpu on the same (padded) inputs; packed outputs.
Outputs RunBoth(const AttnCase& c, const Layout& l = {});

// The tensor-core path's tolerance against SparseAttnCpu, per element (README.md "CUDA"):
//   |gpu − cpu| <= 2^-8 · (|cpu| + mass) + 1e-6
// (one bf16(p) rounding flip moves a term by ≤ 2^-8 relative, the output rounding by ≤ 1 ulp).
// Also checks the GPU against the double reference with the CPU body's own bound, and reports
// bit-identical elements, the largest difference in output ulps and the relative RMS difference.
struct Stats {
  int64_t outside = 0;
  int64_t outside_double = 0;
  int64_t bit_diffs = 0;
  int max_ulps = 0;
  double rel_rms = 0;      // gpu vs cpu
  double rel_rms_gpu = 0;  // gpu vs the double reference
  double rel_rms_cpu = 0;  // cpu vs the double reference
  double worst_ratio = 0;
};

Stats Compare(const AttnCase& c, const Outputs& o, const char* label);

// Compare, then expects every element inside both bounds and the GPU no less accurate than the CPU.
void ExpectClose(const AttnCase& c, const Outputs& o, const char* label);

// A decode-like list per token: `window` entries from the window rows [0, window) (the first
// `leading_invalid` of them -1, as while the ring fills), then `selected` distinct-ish random
// compressed rows from [window, n_kv) with about `invalid_frac` of them -1.
AttnCase DecodeCase(int64_t tokens, int64_t heads, int64_t d, int64_t window, int64_t selected,
                    int64_t n_compressed, double invalid_frac, uint32_t seed);

}  // namespace flashserve::kernels::testing
