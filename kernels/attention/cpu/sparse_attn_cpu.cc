// CPU body of SparseAttnCpu: the reference's blocked online softmax (tt-metal's kernel_cpu.py
// port of K41:296-403), per (token, group of 8 heads). Compiled with -ffp-contract=off so that
// acc·α + partial stays a rounded product and a rounded sum, as in the port.
//
// Two liberties, both exact (README.md "Why the shortcuts are exact"): invalid (-1) entries are
// skipped instead of carried as -inf logits with zeroed rows, and so are products with
// bf16(p) == 0; a block without any valid entry is skipped whole.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>

#include "absl/status/status.h"
#include "common/base/check.h"
#include "common/base/status_macros.h"
#include "common/base/thread_pool.h"
#include "common/formats/bf16.h"
#include "kernels/attention/attention.h"
#include "kernels/attention/sparse_attn_internal.h"
#include "kernels/norm_rope/norm_rope.h"
#include "kernels/norm_rope/rope_table.h"
#include "kernels/quant/quant.h"

namespace flashserve::kernels {
namespace {

using attention_internal::kAlign;
using attention_internal::SlotLayout;
using formats::Bf16BitsToFloat;
using formats::FloatToBf16Bits;
using formats::RoundToBf16;

constexpr int64_t kG = kSparseAttnHeadGroup;
constexpr int64_t kB = kSparseAttnBlock;
// The running max starts finite (K41:352-355), so exp(m - m') never sees -inf - -inf.
constexpr float kInitMax = -1e30f;

// Per-slot scratch, carved from the workspace.
struct Scratch {
  float* kv_block;
  float* q_t;
  float* acc;
  float* part;
  float* logits;
};

// Row `idx` of the pool as bf16: the kv row itself, or (row form) the serving row decoded into
// `decoded` by the quant module's DecodeRowsCpu (exact). Validated params: the decode cannot fail.
const uint16_t* RowBf16(const SparseAttnParams& p, int32_t idx, uint16_t* decoded) {
  if (!attention_internal::UsesKvRows(p)) return p.kv + static_cast<int64_t>(idx) * p.kv_stride;
  const SparseAttnKvRows& r = p.kv_rows;
  quant::DecodeRowsParams dp;
  dp.rows = 1;
  dp.channels = p.head_dim;
  if (idx < r.n_window) {
    dp.kind = quant::KvRowKind::kSwaKv;
    dp.rows_in = r.window + int64_t{idx} * r.window_stride;
    dp.row_stride = r.window_stride;
  } else {
    dp.kind = quant::KvRowKind::kMainKv;
    dp.rows_in = r.compressed + (int64_t{idx} - r.n_window) * r.compressed_stride;
    dp.row_stride = r.compressed_stride;
  }
  dp.out = decoded;
  dp.out_stride = p.head_dim;
  const absl::Status st = quant::DecodeRowsCpu(dp);
  CHECK(st.ok()) << "SparseAttnCpu: row decode: " << st.message();
  return decoded;
}

Scratch CarveSlot(uint8_t* slot, const SlotLayout& l) {
  auto* f = reinterpret_cast<float*>(slot);
  return {f + l.kv_block, f + l.q_t, f + l.acc, f + l.part, f + l.logits};
}

// logits[g * kB + v] = fp32(Σ_i q_g[i]·k_v[i]) × scale for the nv compacted rows and all 8 query
// slots. Each sum runs over i in ascending order; four rows are walked together only to give the
// CPU independent chains (the order inside each sum is unchanged). bf16·bf16 products are exact
// in fp32, so fusing them would not change a bit either.
void BlockLogits(const float* q_t, const float* kv_block, int64_t nv, int64_t d, float scale,
                 float* logits) {
  int64_t v = 0;
  for (; v + 4 <= nv; v += 4) {
    float s[4][kG] = {};
    const float* k0 = kv_block + v * d;
    const float* k1 = k0 + d;
    const float* k2 = k1 + d;
    const float* k3 = k2 + d;
    for (int64_t i = 0; i < d; ++i) {
      const float* qi = q_t + i * kG;
      for (int64_t g = 0; g < kG; ++g) {
        s[0][g] += qi[g] * k0[i];
        s[1][g] += qi[g] * k1[i];
        s[2][g] += qi[g] * k2[i];
        s[3][g] += qi[g] * k3[i];
      }
    }
    for (int64_t g = 0; g < kG; ++g) {
      for (int64_t r = 0; r < 4; ++r) logits[g * kB + v + r] = s[r][g] * scale;
    }
  }
  for (; v < nv; ++v) {
    float s[kG] = {};
    const float* k = kv_block + v * d;
    for (int64_t i = 0; i < d; ++i) {
      for (int64_t g = 0; g < kG; ++g) s[g] += q_t[i * kG + g] * k[i];
    }
    for (int64_t g = 0; g < kG; ++g) logits[g * kB + v] = s[g] * scale;
  }
}

// Folds one block (nv valid rows, logits of one head in `lg`) into that head's running state.
void FoldBlock(const float* kv_block, int64_t nv, int64_t d, float* lg, float* part, float* acc,
               float* m, float* denom) {
  float bmax = -std::numeric_limits<float>::infinity();
  for (int64_t v = 0; v < nv; ++v) bmax = std::max(bmax, lg[v]);
  const float m_new = std::max(*m, bmax);
  const float alpha = std::exp(*m - m_new);
  // fp32 p feeds the denominator (summed over the block first, in list order); bf16(p), taken
  // against the block-so-far max, feeds P·V.
  float bsum = 0.0f;
  for (int64_t v = 0; v < nv; ++v) {
    const float p = std::exp(lg[v] - m_new);
    bsum += p;
    lg[v] = RoundToBf16(p);
  }
  std::fill_n(part, d, 0.0f);
  for (int64_t v = 0; v < nv; ++v) {
    const float pb = lg[v];
    if (pb == 0.0f) continue;
    const float* row = kv_block + v * d;
    for (int64_t i = 0; i < d; ++i) part[i] += pb * row[i];
  }
  for (int64_t i = 0; i < d; ++i) acc[i] = acc[i] * alpha + part[i];
  *denom = *denom * alpha + bsum;
  *m = m_new;
}

// One work item: token t, heads g0 .. g0 + ng - 1.
void RunItem(const SparseAttnParams& p, const Scratch& w, int64_t t, int64_t g0) {
  const int64_t d = p.head_dim;
  const int64_t ng = std::min(kG, p.heads - g0);
  const uint16_t* q_tok = p.q + t * p.q_stride;
  // rope_q: the token's cos/sin, and each head's tail rotated as RopeCpu would store it.
  const int64_t pairs = p.rope_q ? p.rope->rope_dims() / 2 : 0;
  float cos[kMaxRopeDims / 2];
  float sin[kMaxRopeDims / 2];
  uint16_t tail[kMaxRopeDims];
  if (pairs > 0) p.rope->CosSin(p.rope_positions[t], cos, sin);
  for (int64_t g = 0; g < kG; ++g) {
    if (g >= ng) {  // missing heads of the last group: zero queries, results discarded
      for (int64_t i = 0; i < d; ++i) w.q_t[i * kG + g] = 0.0f;
      continue;
    }
    const uint16_t* qh = q_tok + (g0 + g) * p.q_head_stride;
    const int64_t nope = d - 2 * pairs;
    for (int64_t i = 0; i < nope; ++i) w.q_t[i * kG + g] = Bf16BitsToFloat(qh[i]);
    if (pairs > 0) RopeRotateInterleaved(qh + nope, cos, sin, pairs, tail);
    for (int64_t i = nope; i < d; ++i) w.q_t[i * kG + g] = Bf16BitsToFloat(tail[i - nope]);
  }
  std::fill_n(w.acc, ng * d, 0.0f);
  float m[kG];
  float denom[kG];
  std::fill_n(m, kG, kInitMax);
  std::fill_n(denom, kG, 0.0f);
  bool any_valid = false;
  uint16_t decoded[kSparseAttnMaxHeadDim];  // a serving row decoded to bf16 (row form)
  for (int64_t b0 = 0; b0 < p.width; b0 += kB) {
    const int32_t* ids = p.indices + t * p.indices_stride;
    const int64_t n = std::min(kB, p.width - b0);
    int64_t nv = 0;
    for (int64_t e = 0; e < n; ++e) {
      const int32_t idx = ids[b0 + e];
      if (idx < 0) continue;
      const uint16_t* row = RowBf16(p, idx, decoded);
      float* dst = w.kv_block + nv * d;
      for (int64_t i = 0; i < d; ++i) dst[i] = Bf16BitsToFloat(row[i]);
      ++nv;
    }
    if (nv == 0) continue;
    any_valid = true;
    BlockLogits(w.q_t, w.kv_block, nv, d, p.softmax_scale, w.logits);
    for (int64_t g = 0; g < ng; ++g) {
      FoldBlock(w.kv_block, nv, d, w.logits + g * kB, w.part, w.acc + g * d, &m[g], &denom[g]);
    }
  }
  uint16_t* out_tok = p.out + t * p.out_stride;
  for (int64_t g = 0; g < ng; ++g) {
    uint16_t* o = out_tok + (g0 + g) * p.out_head_stride;
    if (!any_valid) {
      std::fill_n(o, d, uint16_t{0});
      continue;
    }
    // The sink joins the denominator only, against the final running max.
    const float den = denom[g] + std::exp(p.attn_sink[g0 + g] - m[g]);
    const float* a = w.acc + g * d;
    for (int64_t i = 0; i < d; ++i) o[i] = FloatToBf16Bits(a[i] / den);
  }
}

}  // namespace

absl::Status SparseAttnCpu(const SparseAttnParams& p, ThreadPool* pool) {
  RETURN_IF_ERROR(ValidateSparseAttn(p, pool));
  if (p.tokens == 0) return absl::OkStatus();
  const SlotLayout layout = attention_internal::ComputeSlotLayout(p.head_dim);
  const auto base = reinterpret_cast<uintptr_t>(p.workspace);
  auto* ws = reinterpret_cast<uint8_t*>((base + kAlign - 1) / kAlign * kAlign);

  const int64_t groups = (p.heads + kG - 1) / kG;
  const int64_t items = p.tokens * groups;
  const int64_t slots =
      std::min<int64_t>(static_cast<int64_t>(attention_internal::NumSlots(pool)), items);
  // Slot s takes items s, s + slots, …: prefill rows get cheaper towards the start of the prompt
  // (fewer valid entries), so interleaving balances better than contiguous ranges.
  auto run_slot = [&](int64_t s) {
    const Scratch w = CarveSlot(ws + s * layout.slot_bytes, layout);
    for (int64_t it = s; it < items; it += slots) RunItem(p, w, it / groups, (it % groups) * kG);
  };
  if (pool == nullptr || slots == 1) {
    run_slot(0);
  } else {
    // n = slots <= pool size + 1 with min_chunk 1 gives one slot per chunk, so no two threads
    // ever share a slot's scratch.
    pool->ParallelFor(static_cast<size_t>(slots), 1, [&](size_t begin, size_t end) {
      for (size_t s = begin; s < end; ++s) run_slot(static_cast<int64_t>(s));
    });
  }
  if (!p.rope_out) return absl::OkStatus();
  // The output's inverse RoPE, in place: by definition the unfused recipe's second op.
  return RopeCpu(attention_internal::OutputRopeParams(p), pool);
}

}  // namespace flashserve::kernels
