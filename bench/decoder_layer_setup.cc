// bench_decoder_layer_step's layer: its synthetic weights and activations, filled on the device
// (decoder_layer_step.h; the stage lists are in decoder_layer_step.cc).
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>
#include <memory>
#include <random>
#include <set>
#include <vector>

#include "absl/status/status.h"
#include "bench/bench_fill.h"
#include "bench/decoder_layer_step.h"
#include "common/base/check.h"
#include "kernels/attention/attention.h"
#include "kernels/common/cuda_check.h"
#include "kernels/gemm/gemm_cuda.h"
#include "kernels/indexer/indexer.h"
#include "kernels/mhc/mhc.h"
#include "kernels/moe/moe_cuda.h"
#include "kernels/moe/moe_gpu_test_util.h"
#include "kernels/moe/moe_shared_cuda.h"
#include "kernels/moe/moe_test_util.h"
#include "kernels/norm_rope/norm_rope.h"
#include "kernels/norm_rope/rope_table.h"

namespace flashserve::bench {
namespace {

void Ok(const absl::Status& s) { CHECK(s.ok()) << s.ToString(); }

DeviceBuffer Bf16Buffer(int64_t n) { return DeviceBuffer(static_cast<size_t>(n) * 2); }
DeviceBuffer F32Buffer(int64_t n) { return DeviceBuffer(static_cast<size_t>(n) * 4); }

}  // namespace

void LayerStep::AllocateWeights() {
  uint64_t seed = 100;
  auto fill_f32 = [&](DeviceBuffer& b, int64_t n, float lo, float hi) {
    b = F32Buffer(n);
    FillF32(seed++, static_cast<size_t>(n), lo, hi, b.get<float>());
  };
  auto fill_bf16 = [&](DeviceBuffer& b, int64_t n, float amp) {
    b = Bf16Buffer(n);
    FillBf16(seed++, static_cast<size_t>(n), amp, b.get<uint16_t>());
  };
  fill_f32(attn_fn_, 24 * kStreams * kD, -0.01f, 0.01f);
  fill_f32(attn_base_, 24, -1.f, 1.f);
  fill_f32(attn_scale_, 3, 0.5f, 1.5f);
  fill_f32(ffn_fn_, 24 * kStreams * kD, -0.01f, 0.01f);
  fill_f32(ffn_base_, 24, -1.f, 1.f);
  fill_f32(ffn_scale_, 3, 0.5f, 1.5f);
  if (opt_.mhc_prepared) {
    const int64_t bytes = kernels::MhcFnFragmentBytes(kD);
    attn_fn_frags_ = DeviceBuffer(static_cast<size_t>(bytes));
    ffn_fn_frags_ = DeviceBuffer(static_cast<size_t>(bytes));
    Ok(kernels::LaunchMhcPrepareFn(kD, attn_fn_.get<float>(), attn_fn_frags_.get(), bytes,
                                   nullptr));
    Ok(kernels::LaunchMhcPrepareFn(kD, ffn_fn_.get<float>(), ffn_fn_frags_.get(), bytes, nullptr));
  }
  fill_bf16(attn_norm_, kD, 1.0f);
  fill_bf16(ffn_norm_, kD, 1.0f);
  fill_bf16(q_norm_, kQLora, 1.0f);
  fill_bf16(kv_norm_, kHeadDim, 1.0f);
  fill_f32(sink_, kHeads, -1.f, 3.f);
  wq_a_ = std::make_unique<Fp8Weight>(seed++ * 7, kQLora, kD);
  wq_b_ = std::make_unique<Fp8Weight>(seed++ * 7, kHeads * kHeadDim, kQLora);
  wkv_ = std::make_unique<Fp8Weight>(seed++ * 7, kHeadDim, kD);
  wo_b_ = std::make_unique<Fp8Weight>(seed++ * 7, kD, kOGroups * kOLora);
  idx_wq_b_ = std::make_unique<Fp8Weight>(seed++ * 7, kIdxHeads * kIdxDim, kQLora);
  if (opt_.stack_qkv) wqa_wkv_ = std::make_unique<Fp8Weight>(*wq_a_, *wkv_);
  {
    // wo_a as its checkpoint holds it: E4M3 codes times 2^-17 .. 2^-14 per 32 × 32 block (|w| up
    // to 448 · 2^-14 ~ 0.027), converted exactly to bf16; the codes stay for --wo-a-fp8.
    const int64_t rows = kOGroups * kOLora, cols = kHeads * kHeadDim / kOGroups;
    wo_a_codes_ = DeviceBuffer(static_cast<size_t>(rows * cols));
    wo_a_scales_ = DeviceBuffer(static_cast<size_t>(rows * cols / 1024));
    const uint64_t wo_a_seed = seed++;  // one seed, as before: the later weights keep theirs
    FillFp8Codes(wo_a_seed, static_cast<size_t>(rows * cols), wo_a_codes_.get<uint8_t>());
    FillBytes(wo_a_seed ^ 0x5BD1E995u, static_cast<size_t>(rows * cols / 1024), 110, 113,
              wo_a_scales_.get<uint8_t>());
    wo_a_ = Bf16Buffer(rows * cols);
    Bf16FromFp8Blocks(wo_a_codes_.get<uint8_t>(), wo_a_scales_.get<uint8_t>(),
                      static_cast<size_t>(rows), static_cast<size_t>(cols), wo_a_.get<uint16_t>());
  }
  fill_bf16(weights_proj_, kIdxHeads * kD, 0.02f / 64);
  if (opt_.narrow_fp32) {
    fill_bf16(gate_, kExperts * kD, 0.02f);
  } else {
    fill_f32(gate_, kExperts * kD, -0.02f, 0.02f);
  }
  kernels::moe_test::LayerSpec spec;
  spec.n_experts = kExperts;
  spec.dim = kD;
  spec.inter = kInter;
  spec.seed = 7;
  spec.kind = kernels::moe_test::WeightKind::kRealistic;
  experts_ = kernels::moe_test::GenerateDeviceExperts(spec, {}, {});
  shared_ = kernels::moe_test::UploadSharedExpert(
      kernels::moe_test::RandomSharedExpert(kD, kInter, 11), /*fused=*/true);
  kernels::RopeSpec rs{kRope, 160000.0, 65536, 16.0, 32.0, 1.0};
  rope_ = std::make_unique<kernels::RopeTable>(kernels::RopeTable::Create(rs, 0).value());
}

void LayerStep::AllocateActivations() {
  const int64_t b = max_b_;
  uint64_t seed = 500;
  x_ = Bf16Buffer(b * kStreams * kD);
  FillBf16(seed++, static_cast<size_t>(b * kStreams * kD), 1.0f, x_.get<uint16_t>());
  pre_in_ = F32Buffer(b * kStreams);
  FillF32(seed++, static_cast<size_t>(b * kStreams), 0.2f, 0.3f, pre_in_.get<float>());
  a_pre_ = F32Buffer(b * 4);
  a_post_ = F32Buffer(b * 4);
  a_comb_ = F32Buffer(b * 16);
  f_pre_ = F32Buffer(b * 4);
  f_post_ = F32Buffer(b * 4);
  f_comb_ = F32Buffer(b * 16);
  mix_ws_ = F32Buffer(kernels::MhcMixesWorkspaceFloats(b, kD));
  x_attn_ = Bf16Buffer(b * kD);
  xn_ = Bf16Buffer(b * kD);
  qr_ = Bf16Buffer(b * kQLora);
  qa_ = Bf16Buffer(b * kQLora);  // wq_a's raw rows where wq_b applies q_norm (wqb_qnorm)
  q_ = Bf16Buffer(b * kHeads * kHeadDim);
  kv_ = Bf16Buffer(b * kHeadDim);
  if (opt_.stack_qkv) qkv_ = Bf16Buffer(b * kQkvCols);
  o_ = Bf16Buffer(b * kHeads * kHeadDim);
  o_lora_ = Bf16Buffer(b * kOGroups * kOLora);
  a_out_ = Bf16Buffer(b * kD);
  y_ = Bf16Buffer(b * kStreams * kD);
  x_ffn_ = Bf16Buffer(b * kD);
  fn_x_ = Bf16Buffer(b * kD);
  logits_ = F32Buffer(b * kExperts);
  f_out_ = Bf16Buffer(b * kD);
  z_ = Bf16Buffer(b * kStreams * kD);
  x_next_ = Bf16Buffer(b * kD);
  xn_next_ = Bf16Buffer(b * kD);
  expert_ids_ = DeviceBuffer(static_cast<size_t>(b * kTopkExperts * 4));

  // KV pool: each sequence's 128 window rows, then the shared compressed rows.
  const int64_t pool_rows = b * kWindow + kCompressedRows;
  pool_ = Bf16Buffer(pool_rows * kHeadDim);
  FillBf16(seed++, static_cast<size_t>(pool_rows * kHeadDim), 1.0f, pool_.get<uint16_t>());
  swa_rows_ = DeviceBuffer(static_cast<size_t>(b * kWindow * kSwaRowBytes));
  BuildServingRows();
  const int64_t pos = opt_.context - 1;
  const int64_t width = kWindow + kTopk;
  indices_host_.assign(static_cast<size_t>(b * width), -1);
  std::mt19937_64 rng(3);
  for (int64_t t = 0; t < b; ++t) {
    // Decode window list on a full ring: slots (pos+1)%W .. W−1, 0 .. pos%W (oldest first).
    for (int64_t i = 0; i < kWindow; ++i) {
      indices_host_[static_cast<size_t>(t * width + i)] =
          static_cast<int32_t>(t * kWindow + (pos + 1 + i) % kWindow);
    }
    std::set<int64_t> picked;
    while (static_cast<int64_t>(picked.size()) < kTopk) {
      picked.insert(static_cast<int64_t>(rng() % kCompressedRows));
    }
    int64_t e = kWindow;
    for (int64_t r : picked) {
      indices_host_[static_cast<size_t>(t * width + e++)] = static_cast<int32_t>(b * kWindow + r);
    }
  }
  indices_ = DeviceBuffer(indices_host_.size() * 4);
  indices_.CopyFromHost(indices_host_.data(), indices_host_.size() * 4);
  std::vector<int64_t> positions(static_cast<size_t>(b), pos);
  positions_ = DeviceBuffer(positions.size() * 8);
  positions_.CopyFromHost(positions.data(), positions.size() * 8);
  rope_cos_sin_ = DeviceBuffer(static_cast<size_t>(b * rope_->rope_dims()) * sizeof(float));
  kernels::RopeCosSinParams cs;
  cs.table = rope_.get();
  cs.tokens = b;
  cs.positions = positions_.get<int64_t>();
  cs.out = rope_cos_sin_.get<float>();
  Ok(kernels::LaunchRopeCosSin(cs, stream_));
  attn_ws_ = DeviceBuffer(kernels::SparseAttnCudaWorkspaceBytes(kHeads, kHeadDim));

  // GEMM workspace: the largest any Linear of the step needs at b rows.
  for (const Fp8Weight* w :
       {wq_a_.get(), wq_b_.get(), wkv_.get(), wo_b_.get(), idx_wq_b_.get(), wqa_wkv_.get()}) {
    if (w == nullptr) continue;  // wqa_wkv_ without Options::stack_qkv
    lin_ws_bytes_ = std::max(lin_ws_bytes_, kernels::LinearCudaWorkspaceBytes(w->view, b));
  }
  if (opt_.wqb_ctas > 0) {  // wq_b planned toward --wqb-ctas CTAs
    lin_ws_bytes_ =
        std::max(lin_ws_bytes_, kernels::LinearCudaWorkspaceBytes(wq_b_->view, b, 0, 0, true, true,
                                                                  true, false, opt_.wqb_ctas));
  }
  if (opt_.branch_splits > 0) {  // the forked wkv with its forced K splits (--branch-splits)
    lin_ws_bytes_ = std::max(
        lin_ws_bytes_, kernels::LinearCudaWorkspaceBytes(wkv_->view, b, 0, opt_.branch_splits));
  }
  lin_ws_ = DeviceBuffer(lin_ws_bytes_);
  kv_lin_ws_ = DeviceBuffer(lin_ws_bytes_);
  float_ws_ = DeviceBuffer(std::max<size_t>(FloatLinearWorkspace(b), 16));
  wo_a_ws_ =
      DeviceBuffer(std::max<size_t>(kernels::FloatLinearCudaWorkspaceBytes(WoAParams(b), b), 16));
  moe_ws_bytes_ =
      kernels::MoeCudaWorkspaceBytes(experts_->view, b, kTopkExperts, &shared_->view).value();
  moe_ws_ = DeviceBuffer(moe_ws_bytes_);
  shared_y_ = Bf16Buffer(b * kD);
  shared_ws_ = DeviceBuffer(
      kernels::MoeSharedExpertWorkspaceBytes(shared_->view, b, opt_.shared_splits, opt_.shared_ctas)
          .value());

  // Indexer: per sequence L index keys (bf16, FP4-representable values are not needed for
  // timing), layer 20's candidate mask, the scores and the top-k.
  key_seqs_ = 0;
  for (int64_t t : opt_.reindex_tokens) key_seqs_ = std::max(key_seqs_, t);
  key_seqs_ = std::min(key_seqs_, b);
  const int64_t l = opt_.context;
  iq_ = Bf16Buffer(b * kIdxHeads * kIdxDim);
  iw_ = Bf16Buffer(b * kIdxHeads);
  if (key_seqs_ > 0) {
    // The index-key cache in its serving form: 68-byte rows (64 bytes of E2M1 codes, 4 UE8M0
    // scales), scales 2^-5 .. 2^-3 so the exact integer scorer applies (kernels/indexer README).
    index_keys_ = DeviceBuffer(static_cast<size_t>(key_seqs_ * l * kIdxKRowBytes));
    FillBytes(seed++, static_cast<size_t>(key_seqs_ * l * kIdxKRowBytes), 0, 255,
              index_keys_.get<uint8_t>());
    FillRowBytes(seed++, static_cast<size_t>(key_seqs_ * l), kIdxKRowBytes, 64, 4, 122, 124,
                 index_keys_.get<uint8_t>());
    candidates_ = DeviceBuffer(static_cast<size_t>(key_seqs_ * l));
    if (opt_.candidate_blocks) {
      std::vector<uint8_t> mask(static_cast<size_t>(key_seqs_ * l));
      std::mt19937_64 rng(seed++);
      for (size_t i = 0; i < mask.size(); i += 8) {
        std::fill_n(mask.begin() + static_cast<std::ptrdiff_t>(i),
                    std::min<size_t>(8, mask.size() - i),
                    static_cast<uint8_t>(rng() % 4 == 0 ? 1 : 0));
      }
      candidates_.CopyFromHost(mask.data(), mask.size());
    } else {
      FillBytes(seed++, static_cast<size_t>(key_seqs_ * l), 0, 1, candidates_.get<uint8_t>());
    }
    scores_ = Bf16Buffer(key_seqs_ * l);
    idx_topk_ = DeviceBuffer(static_cast<size_t>(key_seqs_ * kTopk * 4));
    topk_ws_bytes_ = std::max<size_t>(kernels::IndexerTopkCudaWorkspaceBytes(key_seqs_, l), 16);
    topk_ws_ = DeviceBuffer(topk_ws_bytes_);
    // The batched entry points' per-sequence arrays: sequence t's keys are pool rows t·L ..
    std::vector<int64_t> offsets(static_cast<size_t>(key_seqs_));
    std::vector<int32_t> widths(static_cast<size_t>(key_seqs_), static_cast<int32_t>(l));
    for (int64_t t = 0; t < key_seqs_; ++t) offsets[static_cast<size_t>(t)] = t * l;
    seq_key_offsets_ = DeviceBuffer(offsets.size() * sizeof(int64_t));
    seq_key_offsets_.CopyFromHost(offsets.data(), offsets.size() * sizeof(int64_t));
    seq_widths_ = DeviceBuffer(widths.size() * sizeof(int32_t));
    seq_widths_.CopyFromHost(widths.data(), widths.size() * sizeof(int32_t));
  }
}

}  // namespace flashserve::bench
