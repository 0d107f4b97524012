// Helpers shared by the attention tests: seeded data, a case holder that runs SparseAttnCpu, the
// scalar transcription of the reference recipe and a double-precision softmax with the sink.
#pragma once

#include <cstdint>
#include <vector>

#include "absl/status/status.h"
#include "kernels/attention/attention.h"
#include "kernels/norm_rope/rope_table.h"

namespace flashserve {
class ThreadPool;
}  // namespace flashserve

namespace flashserve::kernels::testing {

// n bf16 values ~ N(0, scale^2) rounded from fp32, from a fixed seed.
std::vector<uint16_t> RandomBf16(int64_t n, float scale, uint32_t seed);
// n fp32 values uniform in [lo, hi).
std::vector<float> RandomFloats(int64_t n, float lo, float hi, uint32_t seed);

// One attention problem with packed layouts: q/out [tokens, heads, head_dim], kv [n_kv, head_dim],
// indices [tokens, width].
struct AttnCase {
  int64_t tokens = 0;
  int64_t heads = 0;
  int64_t head_dim = 0;
  int64_t n_kv = 0;
  int64_t width = 0;
  float scale = 0.0f;
  std::vector<uint16_t> q;
  std::vector<uint16_t> kv;
  std::vector<int32_t> indices;
  std::vector<float> sink;
};

// Random q (σ = 1), kv (σ = 1) and sink (uniform [-1, 3]); scale = head_dim^-0.5; indices drawn
// uniformly from [0, n_kv) with about `invalid_frac` of them set to -1.
AttnCase RandomCase(int64_t tokens, int64_t heads, int64_t head_dim, int64_t n_kv, int64_t width,
                    double invalid_frac, uint32_t seed);

// Fills the packed params for `c` writing to `out` (resized) with `workspace` (resized for pool).
SparseAttnParams MakeParams(const AttnCase& c, const ThreadPool* pool, std::vector<uint16_t>* out,
                            std::vector<uint8_t>* workspace);

// Runs SparseAttnCpu on `c` and returns the bf16 output; fails the status on a rejected case.
absl::Status RunKernel(const AttnCase& c, ThreadPool* pool, std::vector<uint16_t>* out);

// A literal, one (token, head) at a time transcription of the reference port (kernel_cpu.py
// sparse_attn): -1 entries as -inf logits with zeroed rows, every list entry carried through the
// block sums, acc·α + Σ_block bf16(p)·v, denom·α + Σ_block p, sink after the last block.
std::vector<uint16_t> ScalarReference(const AttnCase& c);

// Plain softmax attention in double over the valid entries, the sink as an extra denominator
// term: ref[t,h,i] = Σ_e exp(l_e − M) v_e[i] / (Σ_e exp(l_e − M) + exp(sink − M)), and
// mass[t,h,i] = Σ_e exp(l_e − M) |v_e[i]| / (same denominator), which bounds what rounding the
// probabilities to bf16 can move. Rows without a valid entry give 0 and 0.
void DoubleReference(const AttnCase& c, std::vector<double>* ref, std::vector<double>* mass);

// Tolerance of the kernel against DoubleReference, per element:
//   |out − ref| <= 2^-8 · (|ref| + mass) + 1e-6
// bf16(p) moves each term by at most 2^-9 relative (≤ 2^-9·mass in all), the final rounding by
// at most 2^-9·|out|; fp32 sums and exp add ~1e-6 relative. 2^-8 leaves a factor ~2 of margin.
// Returns the number of elements outside it and the largest |out − ref| / bound seen.
int64_t CountOutsideTolerance(const std::vector<uint16_t>& out, const std::vector<double>& ref,
                              const std::vector<double>& mass, double* worst_ratio);

// The text model's RoPE table shape (theta 160000, YaRN 65536 × 16) with `rd` rotated dims, no
// cached positions: for the attention's rope tests.
RopeTable TextRopeTable(int64_t rd);

// Number of elements whose bit patterns differ.
int64_t CountBitDiffs(const std::vector<uint16_t>& a, const std::vector<uint16_t>& b);

// A case's KV rows in the serving formats (attention.h SparseAttnKvRows), host copies.
struct KvRowPools {
  int64_t n_window = 0;
  int64_t n_compressed = 0;
  int64_t window_stride = 0;      // bytes
  int64_t compressed_stride = 0;  // bytes
  std::vector<uint8_t> window;
  std::vector<uint8_t> compressed;
};

// Encodes rows [0, n_window) of c->kv as window rows (quant kSwaKv) and the rest as compressed rows
// (kMainKv) with EncodeRowsCpu, each row followed by `pad` spare bytes (filled with 0xEE), and
// replaces c->kv by their exact decode (DecodeRowsCpu): the bf16 form on *c is then the row form's
// reference. Row-form indices are c's indices unchanged.
KvRowPools EncodeKvRows(AttnCase* c, int64_t n_window, int64_t pad = 0);

// Points p at the row form of `pools` (host or device copies at `window` / `compressed`; null for
// an empty pool) and clears kv / n_kv.
void SetKvRows(const KvRowPools& pools, const uint8_t* window, const uint8_t* compressed,
               SparseAttnParams* p);

}  // namespace flashserve::kernels::testing
