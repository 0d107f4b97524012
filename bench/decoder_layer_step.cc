// bench_decoder_layer_step's layer: the stage lists (decoder_layer_step.h; its weights and
// activations are set up in decoder_layer_setup.cc).
#include "bench/decoder_layer_step.h"

#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "common/base/check.h"
#include "kernels/attention/attention.h"
#include "kernels/common/cuda_check.h"
#include "kernels/gemm/gemm_cuda.h"
#include "kernels/gemm/gemm_float_cuda.h"
#include "kernels/gemm/weight_prefetch.h"
#include "kernels/mhc/hc_boundary.h"
#include "kernels/mhc/mhc.h"
#include "kernels/moe/moe_cuda.h"
#include "kernels/moe/moe_gpu_test_util.h"
#include "kernels/moe/moe_shared_cuda.h"
#include "kernels/moe/moe_test_util.h"
#include "kernels/norm_rope/norm_rope.h"
#include "kernels/norm_rope/rope_table.h"
#include "kernels/quant/quant.h"

namespace flashserve::bench {
namespace {

void Ok(const absl::Status& s) { CHECK(s.ok()) << s.ToString(); }

// Options of one FP8 Linear stage (LayerStep::ReuseStages's fp8).
struct Fp8Extra {
  const DeviceBuffer* norm_w = nullptr;  // LinearCudaParams::x_norm's weight (null: none), the
  DeviceBuffer* norm_out = nullptr;      // normed rows written to *norm_out
  int64_t stream_ctas = 0;               // LinearCudaParams::stream_ctas (0: the plan's)
  int64_t x_stride = 0;                  // elements (0: K)
  bool stream_tma = false;               // LinearCudaParams::stream_tma (the TMA-ring variant)
};

// RMSNorm of `rows` packed bf16 rows of `cols` with a bf16 weight, eps 1e-6 (every norm of the
// step); out may be x.
kernels::RmsNormParams NormRows(int64_t rows, int64_t cols, const uint16_t* x, const uint16_t* w,
                                uint16_t* out) {
  kernels::RmsNormParams p;
  p.rows = rows;
  p.cols = cols;
  p.x = x;
  p.x_stride = cols;
  p.weight_bf16 = w;
  p.eps = 1e-6f;
  p.out = out;
  p.out_stride = cols;
  return p;
}

}  // namespace

kernels::FloatLinearCudaParams LayerStep::WoAParams(int64_t b) const {
  // o viewed [b, 8 groups, 4096] → [b, 8, 1024]; group g uses wo_a[g] [1024, 4096].
  constexpr int64_t k = kHeads * kHeadDim / kOGroups;
  kernels::FloatLinearCudaParams p;
  p.m = b;
  p.n = kOLora;
  p.k = k;
  p.groups = kOGroups;
  p.w_bf16 = wo_a_.get<uint16_t>();
  p.w_group_stride = kOLora * k;
  p.gemv_wide = opt_.wo_a_wide;
  p.swap_fp8_warpgroups = opt_.wo_a_swap_wgs;
  p.swap_fp8_chains = opt_.wo_a_swap_chains;
  if (opt_.wo_a_fp8 != 0) {
    p.w_fp8 = wo_a_codes_.get<uint8_t>();
    p.w_fp8_scales = wo_a_scales_.get<uint8_t>();
    // 3: the CUDA-core kernel at every size it takes (up to 4 rows), past the plan's choice.
    if (opt_.wo_a_fp8 == 3 && b <= kernels::kFloatLinearCudaGemvMaxM) {
      p.tile_rows = kernels::kFloatLinearCudaGemvRows;
    }
    // 4 / 5: the FP8 form's swapped-role kernel at every size where x is resident (up to 8
    // rows); 6: at every size (x streamed through the workspace above 8 rows; plainly).
    if ((opt_.wo_a_fp8 == 4 || opt_.wo_a_fp8 == 5) && b <= kernels::kFloatLinearCudaSwapFp8MaxM) {
      p.tile_rows = kernels::kFloatLinearCudaSwapFp8Rows;
    }
    if (opt_.wo_a_fp8 == 6) p.tile_rows = kernels::kFloatLinearCudaSwapFp8Rows;
    // 7: the FP8 form alone ("FP8 only", session 84): no bf16 weight handed over; the FP8
    // kernels up to 384 tokens, above that the bf16 plans on an expansion in wo_a's workspace.
    if (opt_.wo_a_fp8 == 7) p.w_bf16 = nullptr;
    // Its own workspace: x in the fragment order (FloatLinearCudaWorkspaceBytes) where the kernel
    // streams it, apart from the other float Linears' K-split partials.
    p.workspace = wo_a_ws_.get();
    p.workspace_bytes = wo_a_ws_.bytes();
  }
  p.x_bf16 = o_.get<uint16_t>();
  p.x_stride = kHeads * kHeadDim;
  p.x_group_stride = k;
  p.y_bf16 = o_lora_.get<uint16_t>();
  p.y_stride = kOGroups * kOLora;
  p.y_group_stride = kOLora;
  return p;
}

kernels::FloatLinearCudaParams LayerStep::WeightsProjParams(int64_t b) const {
  kernels::FloatLinearCudaParams p;
  p.m = b;
  p.n = kIdxHeads;
  p.k = kD;
  p.w_bf16 = weights_proj_.get<uint16_t>();
  p.x_bf16 = xn_.get<uint16_t>();
  p.x_stride = kD;
  p.y_bf16 = iw_.get<uint16_t>();
  p.y_stride = kIdxHeads;
  return p;
}

kernels::FloatLinearCudaParams LayerStep::GateParams(int64_t b) const {
  kernels::FloatLinearCudaParams p;
  p.m = b;
  p.n = kExperts;
  p.k = kD;
  if (opt_.narrow_fp32) {
    p.w_bf16 = gate_.get<uint16_t>();
  } else {
    p.w_f32 = gate_.get<float>();
  }
  p.x_bf16 = fn_x_.get<uint16_t>();
  p.x_stride = kD;
  p.y_f32 = logits_.get<float>();
  p.y_stride = kExperts;
  return p;
}

size_t LayerStep::FloatLinearWorkspace(int64_t b) const {
  size_t bytes = 0;
  for (const kernels::FloatLinearCudaParams& p :
       {WoAParams(b), WeightsProjParams(b), GateParams(b)}) {
    bytes = std::max(bytes, kernels::FloatLinearCudaWorkspaceBytes(p, b));
  }
  return bytes;
}

void LayerStep::LaunchFloat(kernels::FloatLinearCudaParams p) {
  bool gemv = kernels::PlanFloatLinearCuda(p).tile_rows == kernels::kFloatLinearCudaGemvRows;
  if (!opt_.float_gemv && gemv) {
    p.tile_rows = 16;  // the mma.sync plan the CUDA-core kernel replaced (A/B)
    gemv = false;
  }
  const int pdl = opt_.float_pdl >= 0 ? opt_.float_pdl : (p.m >= kFloatPdlMinTokens ? 1 : 3);
  p.programmatic = pdl == 1 || (pdl == 2 && !gemv) || (pdl == 3 && gemv);
  if (p.w_fp8 != nullptr && opt_.wo_a_fp8 == 2) p.programmatic = false;  // wo_a plainly (A/B)
  if (p.tile_rows == kernels::kFloatLinearCudaSwapFp8Rows) p.programmatic = opt_.wo_a_fp8 == 5;
  p.trigger_dependents = opt_.wo_a_trigger;  // the swapped-role kernel only (wo_a)
  if (p.workspace == nullptr) {
    p.workspace = float_ws_.get();
    p.workspace_bytes = float_ws_.bytes();
  }
  Ok(kernels::LaunchFloatLinear(p, stream_));
}

void LayerStep::PrepareLoopInput(int64_t b) {
  // The previous layer's last boundary, as far as this layer reads it: the collapse of x_ by
  // pre_in_ and its attn_norm (the one-stream schedule's first two launches, the same bits).
  kernels::HcBoundaryParams p;
  p.has_post = false;
  p.pre = {b, kD, x_.get<uint16_t>(), kStreams * kD, pre_in_.get<float>(), x_attn_.get<uint16_t>(),
           kD};
  p.norm =
      NormRows(b, kD, x_attn_.get<uint16_t>(), attn_norm_.get<uint16_t>(), xn_.get<uint16_t>());
  Ok(kernels::LaunchHcBoundary(p, stream_));
  CUDA_CHECK(cudaStreamSynchronize(stream_));
}

void LayerStep::PoisonBranchOutputs(int64_t b) {
  for (DeviceBuffer* buf : {&a_pre_, &a_post_, &a_comb_, &f_pre_, &f_post_, &f_comb_, &x_attn_,
                            &x_ffn_, &kv_, &shared_y_, &x_next_, &xn_next_, &qr_}) {
    CUDA_CHECK(cudaMemsetAsync(buf->get(), 0xFF, buf->bytes(), stream_));
  }
  // The new row of every sequence's window ring (slot pos % W), in the pool and as the SWA row
  // (the other window rows are the KV the step reads).
  const int64_t slot = (opt_.context - 1) % kWindow;
  CUDA_CHECK(cudaMemset2DAsync(pool_.get<uint16_t>() + slot * kHeadDim, kWindow * kHeadDim * 2,
                               0xFF, kHeadDim * 2, static_cast<size_t>(b), stream_));
  CUDA_CHECK(cudaMemset2DAsync(swa_rows_.get<uint8_t>() + slot * kSwaRowBytes,
                               kWindow * kSwaRowBytes, 0xFF, kSwaRowBytes, static_cast<size_t>(b),
                               stream_));
  CUDA_CHECK(cudaStreamSynchronize(stream_));
}

std::vector<Stage> LayerStep::ReuseStages(int64_t b, bool overlap) {
  const double db = static_cast<double>(b);
  const bool fuse = overlap && opt_.fuse_boundary;
  const bool fuse_rope = overlap && opt_.fuse_rope;
  const bool loop = fuse && opt_.layer_loop;
  // Options::wqb_qnorm: q_norm inside wq_b (x_norm; wq_a writes the raw rows to qa_, wq_b the
  // normed ones to qr_ for the indexer); the one-stream schedule keeps its own launch, so the
  // bit-identity check covers the fused form.
  const bool qnorm_fused = opt_.wqb_qnorm && overlap;
  DeviceBuffer& q_lora = qnorm_fused ? qa_ : qr_;
  std::vector<Stage> s;
  cudaStream_t st = stream_;
  // Branch i's stream (overlap) or the main one.
  auto branch_stream = [=, this](int i) {
    return overlap ? side_[i == 4 ? 2 : i >= 2 ? 1 : 0] : st;
  };
  // Fork branch i from the main stream (after everything enqueued there so far).
  auto fork = [=, this](int i) {
    CUDA_CHECK(cudaEventRecord(fork_[i], st));
    CUDA_CHECK(cudaStreamWaitEvent(branch_stream(i), fork_[i], 0));
  };
  // Mark the end of branch i's work so far; the main stream joins it with join(i).
  auto mark = [=, this](int i) { CUDA_CHECK(cudaEventRecord(join_[i], branch_stream(i))); };
  auto join = [=, this](int i) {
    if (overlap) CUDA_CHECK(cudaStreamWaitEvent(st, join_[i], 0));
  };
  // The last stage pushed belongs to branch i: forked first when `first`, its end marked; timed
  // alone, it is joined (Stage::settle).
  auto on_branch = [&](int i, bool first) {
    if (!overlap) return;
    Stage& stage = s.back();
    stage.launch = [=, inner = stage.launch] {
      if (first) fork(i);
      inner();
      mark(i);
    };
    stage.settle = [=] { join(i); };
  };
  // An FP8 Linear x -> y (on forked branch `branch`, or the main stream for -1), with Fp8Extra's
  // options.
  auto fp8 = [&](const char* name, const Fp8Weight* w, const DeviceBuffer& x, DeviceBuffer& y,
                 int branch, Fp8Extra e = {}) {
    const int64_t n = w->view.n, k = w->view.k;
    const cudaStream_t ls = branch >= 0 ? branch_stream(branch) : st;
    DeviceBuffer* ws = branch == 2 && overlap ? &kv_lin_ws_ : &lin_ws_;
    s.push_back({name,
                 [this, w, &x, &y, b, ls, ws, branch, e] {
                   kernels::LinearCudaParams p;
                   p.weight = &w->view;
                   p.m = b;
                   p.stream_ctas = e.stream_ctas;
                   p.stream_tma = e.stream_tma;
                   if (branch >= 0) p.split_k = opt_.branch_splits;  // 0: the plan's
                   p.x_bf16 = x.get<uint16_t>();
                   p.x_stride = e.x_stride > 0 ? e.x_stride : w->view.k;
                   p.y_bf16 = y.get<uint16_t>();
                   p.y_stride = w->view.n;
                   if (e.norm_w != nullptr) {
                     p.x_norm.weight = e.norm_w->get<uint16_t>();
                     p.x_norm.eps = 1e-6f;
                     p.x_norm.out = e.norm_out->get<uint16_t>();
                     p.x_norm.out_stride = w->view.k;
                   }
                   p.workspace = ws->get();
                   p.workspace_bytes = lin_ws_bytes_;
                   Ok(kernels::LaunchLinearFp8(p, ls));
                 },
                 w->bytes() + db * 2 * (k + n) + (e.norm_w != nullptr ? db * 2 * k : 0),
                 2 * db * n * k});
  };
  // The collapse of the streams xs by pre_in (kernels::LaunchHcPre) on the main stream.
  auto hc_pre = [&](const std::string& name, const DeviceBuffer& xs, const DeviceBuffer& pre_in,
                    DeviceBuffer& collapsed) {
    s.push_back({name,
                 [=, &xs, &pre_in, &collapsed] {
                   kernels::HcPreParams p;
                   p.tokens = b;
                   p.dim = kD;
                   p.x = xs.get<uint16_t>();
                   p.x_stride = kStreams * kD;
                   p.pre = pre_in.get<float>();
                   p.out = collapsed.get<uint16_t>();
                   p.out_stride = kD;
                   Ok(kernels::LaunchHcPre(p, st));
                 },
                 db * kD * 2 * (kStreams + 1), 0});
  };
  // One mHC site: the mixes of the stream xs and its collapse by pre_in. Fused: one launch on
  // the main stream. Overlapped: the collapse (hc_pre, the same bits as the fused one) on the main
  // stream, then the mixes alone as branch `site` (0 attention, 1 FFN), joined before the site's
  // hc_post.
  // fuse: the collapse is part of the site's boundary stage (pushed before, by `boundary`).
  auto mixes = [&](int site, const char* name, const DeviceBuffer& xs, const DeviceBuffer& fn,
                   const DeviceBuffer& base, const DeviceBuffer& scale, const DeviceBuffer& pre_in,
                   DeviceBuffer& pre, DeviceBuffer& post, DeviceBuffer& comb,
                   DeviceBuffer& collapsed) {
    const double x_bytes = db * kStreams * kD * 2, fn_bytes = 24.0 * kStreams * kD * 4;
    const char* site_name = site == 0 ? "attn" : "ffn";
    if (overlap && !fuse)
      hc_pre(std::string(site_name) + " collapse (hc_pre)", xs, pre_in, collapsed);
    s.push_back({overlap ? std::string(site_name) + " mixes (forked stream)" : name,
                 [=, this, &xs, &fn, &base, &scale, &pre_in, &pre, &post, &comb, &collapsed] {
                   kernels::MhcMixesParams p;
                   p.tokens = b;
                   p.dim = kD;
                   p.x = xs.get<uint16_t>();
                   p.x_stride = kStreams * kD;
                   p.fn = fn.get<float>();
                   if (opt_.mhc_prepared) {
                     p.fn_frags = (&fn == &attn_fn_ ? attn_fn_frags_ : ffn_fn_frags_).get();
                   }
                   p.small_batch_ctas =
                       site == 1 && opt_.ffn_mixes_ctas > 0 ? opt_.ffn_mixes_ctas : opt_.mixes_ctas;
                   p.base = base.get<float>();
                   p.scale = scale.get<float>();
                   p.pre = pre.get<float>();
                   p.post = post.get<float>();
                   p.comb = comb.get<float>();
                   if (!overlap) {
                     p.pre_in = pre_in.get<float>();
                     p.collapsed = collapsed.get<uint16_t>();
                     p.collapsed_stride = kD;
                   }
                   Ok(kernels::LaunchMhcMixes(p, mix_ws_.get<float>(),
                                              kernels::MhcMixesWorkspaceFloats(b, kD),
                                              branch_stream(site)));
                 },
                 x_bytes + fn_bytes + (overlap ? 0 : db * kD * 2), 2 * db * 25 * kStreams * kD});
    on_branch(site, true);
  };
  auto norm = [&](const char* name, const DeviceBuffer& x, const DeviceBuffer& w, DeviceBuffer& y,
                  int64_t cols) {
    s.push_back(
        {name,
         [=, this, &x, &w, &y] {
           Ok(kernels::LaunchRmsNorm(
               NormRows(b, cols, x.get<uint16_t>(), w.get<uint16_t>(), y.get<uint16_t>()), st));
         },
         db * cols * 4 + cols * 2, 0});
  };
  auto hc_post = [&](int site, const char* name, const DeviceBuffer& f, const DeviceBuffer& r,
                     const DeviceBuffer& post, const DeviceBuffer& comb, DeviceBuffer& out) {
    s.push_back({name,
                 [=, &f, &r, &post, &comb, &out] {
                   join(site);
                   kernels::HcPostParams p;
                   p.tokens = b;
                   p.dim = kD;
                   p.f = f.get<uint16_t>();
                   p.f_stride = kD;
                   p.residual = r.get<uint16_t>();
                   p.residual_stride = kStreams * kD;
                   p.post = post.get<float>();
                   p.comb = comb.get<float>();
                   p.out = out.get<uint16_t>();
                   p.out_stride = kStreams * kD;
                   Ok(kernels::LaunchHcPost(p, st));
                 },
                 db * kD * 2 * (1 + 2 * kStreams), 0});
    s.back().joins = [=] { join(site); };
  };
  // One mHC site boundary in one launch (kernels::LaunchHcBoundary): hc_post of site `post_site`
  // (-1: none; else f, r, post, comb -> out, joining that site's mixes first), the collapse of the
  // streams (out, or xs without hc_post) by pre_in into `collapsed`, and its RMSNorm into `normed`.
  auto boundary = [&](int post_site, const std::string& name, const DeviceBuffer* f,
                      const DeviceBuffer* r, const DeviceBuffer* post, const DeviceBuffer* comb,
                      const DeviceBuffer& xs, DeviceBuffer* out, const DeviceBuffer& pre_in,
                      DeviceBuffer& collapsed, const DeviceBuffer& w, DeviceBuffer& normed) {
    const bool has_post = post_site >= 0;
    s.push_back(
        {name,
         [=, this, &xs, &pre_in, &collapsed, &w, &normed] {
           kernels::HcBoundaryParams p;
           p.has_post = has_post;
           if (has_post) {
             join(post_site);
             p.post = {b,
                       kD,
                       f->get<uint16_t>(),
                       kD,
                       r->get<uint16_t>(),
                       kStreams * kD,
                       post->get<float>(),
                       comb->get<float>(),
                       out->get<uint16_t>(),
                       kStreams * kD};
           }
           const uint16_t* streams = has_post ? out->get<uint16_t>() : xs.get<uint16_t>();
           p.pre = {b, kD, streams, kStreams * kD, pre_in.get<float>(), collapsed.get<uint16_t>(),
                    kD};
           p.norm = NormRows(b, kD, collapsed.get<uint16_t>(), w.get<uint16_t>(),
                             normed.get<uint16_t>());
           p.cluster_ctas = opt_.boundary_cluster;
           Ok(kernels::LaunchHcBoundary(p, st));
         },
         db * kD * 2 * ((has_post ? 1 + 2 * kStreams : kStreams) + 2) + kD * 2, 0});
    if (has_post) s.back().joins = [=] { join(post_site); };
  };
  auto rope = [&](const char* name, DeviceBuffer& x, int64_t heads, int64_t head_dim,
                  bool inverse) {
    s.push_back({name,
                 [=, this, &x] {
                   kernels::RopeParams p;
                   p.table = rope_.get();
                   p.tokens = b;
                   p.heads = heads;
                   p.head_dim = head_dim;
                   p.positions = positions_.get<int64_t>();
                   p.x = x.get<uint16_t>();
                   p.x_stride = heads * head_dim;
                   p.x_head_stride = head_dim;
                   p.out = x.get<uint16_t>();
                   p.out_stride = heads * head_dim;
                   p.out_head_stride = head_dim;
                   p.inverse = inverse;
                   Ok(kernels::LaunchRope(p, st));
                 },
                 db * heads * kRope * 2 * 2, 0});
  };

  // The L2 prefetches (Options::l2_prefetch_mb): a stage on branch 4 asking the L2 for the named
  // weights, each whole within the budget, else the same prefix of every row.
  const int64_t budget = overlap ? opt_.l2_prefetch_mb << 20 : 0;
  auto wants = [&](const char* target) {
    return budget > 0 && opt_.l2_prefetch_targets.count(target) > 0;
  };
  auto weight_range = [budget](const void* ptr, int64_t rows, int64_t row_bytes) {
    if (rows * row_bytes <= budget) return kernels::L2PrefetchContiguous(ptr, rows * row_bytes);
    const int64_t prefix = budget / rows / 16 * 16;
    return kernels::L2PrefetchRange{ptr, prefix > 0 ? rows : 0, prefix, row_bytes};
  };
  auto fp8_ranges = [&](const Fp8Weight& w, std::vector<kernels::L2PrefetchRange>& out) {
    out.push_back(weight_range(w.codes.get(), w.view.n, w.view.k));
    out.push_back(
        kernels::L2PrefetchContiguous(w.scales.get(), static_cast<int64_t>(w.scales.bytes())));
  };
  auto prefetch = [&](const std::string& what,
                      const std::vector<kernels::L2PrefetchRange>& ranges) {
    if (ranges.empty()) return;
    kernels::L2PrefetchParams p;
    CHECK(ranges.size() <= static_cast<size_t>(kernels::kL2PrefetchMaxRanges));
    p.count = static_cast<int>(ranges.size());
    std::copy(ranges.begin(), ranges.end(), p.ranges);
    s.push_back({"L2 prefetch " + what + " (forked stream)",
                 [=, this] { Ok(kernels::LaunchL2Prefetch(p, branch_stream(4))); }, 0, 0});
    on_branch(4, true);
  };
  auto wq_ranges = [&] {
    std::vector<kernels::L2PrefetchRange> r;
    fp8_ranges(*wq_a_, r);
    fp8_ranges(*wq_b_, r);
    return r;
  };
  if (wants("wq")) prefetch("wq_a + wq_b", wq_ranges());

  // ---- attention site (in the layer loop, xn_ comes from the previous layer's last boundary:
  // PrepareLoopInput)
  // Options::mixes_late: the attention site's mixes forked after wq_b (beside the attention);
  // measured slower (session 75: they slowed the attention).
  const bool late = fuse && opt_.mixes_late;
  // Options::attn_mixes_at: where the attention site's mixes fork (mixes_late: after wq_b; the
  // loop form keeps its one root, so 3 is 0 there).
  const int at = opt_.attn_mixes_at, attn_at = !fuse ? 0 : late ? 1 : loop && at == 3 ? 0 : at;
  auto attn_mixes = [&] {
    mixes(0, "attn mixes + collapse", x_, attn_fn_, attn_base_, attn_scale_, pre_in_, a_pre_,
          a_post_, a_comb_, x_attn_);
  };
  if (attn_at == 3) attn_mixes();  // beside the boundary: they read only the streams x_
  if (fuse && !loop) {
    boundary(-1, "attn collapse + attn_norm (one launch)", nullptr, nullptr, nullptr, nullptr, x_,
             nullptr, pre_in_, x_attn_, attn_norm_, xn_);
  }
  // In the layer loop the step's graph has one root, wq_a, as a loop's layer has one; the branches
  // fork after it (several roots started the main stream 16-19 µs late: kits s111 / s112, H100;
  // --attn-mixes-at 3's second root ~50 µs late: kit s128).
  // Options::stack_qkv: wq_a | wkv as one Linear on the main stream; the kv branch forks after it
  const bool stack = opt_.stack_qkv;  // and reads the kv columns of its output (kv_ptr, kv_stride)
  uint16_t* const kv_ptr = stack ? qkv_.get<uint16_t>() + kQLora : kv_.get<uint16_t>();
  const int64_t kv_stride = stack ? kQkvCols : kHeadDim;
  auto q_projection = [&] {
    if (stack) {
      fp8("wq_a | wkv (FP8 1792x5120, stacked)", wqa_wkv_.get(), xn_, qkv_, -1);
    } else {
      fp8("wq_a (FP8 1280x5120)", wq_a_.get(), xn_, q_lora, -1);
    }
  };
  if (loop) q_projection();
  if (attn_at == 0) attn_mixes();
  if (!fuse) norm("attn_norm", x_attn_, attn_norm_, xn_, kD);
  // The kv projection: branch 2, next to the q projection (the attention joins it); with the
  // stack, the branch starts after it.
  if (stack) {
    if (!loop) q_projection();
  } else {
    fp8("wkv (FP8 512x5120)", wkv_.get(), xn_, kv_, 2);
    on_branch(2, true);
  }
  const cudaStream_t kst = branch_stream(2);
  s.push_back({"kv_norm + RoPE, SWA row + its decoded pool row",
               [=, this] {
                 kernels::RmsNormRopeParams p;
                 p.norm = NormRows(b, kHeadDim, kv_ptr, kv_norm_.get<uint16_t>(), kv_ptr);
                 p.norm.x_stride = kv_stride;
                 p.norm.out_stride = kv_stride;
                 p.table = rope_.get();
                 p.positions = positions_.get<int64_t>();
                 Ok(kernels::LaunchRmsNormRope(p, kst));
                 // The new row goes to ring slot pos % W of each sequence's window: its 528-byte
                 // SWA row and, from the same pass, its decoded bf16 values into the pool.
                 const int64_t slot = (opt_.context - 1) % kWindow;
                 kernels::quant::EncodeRowsParams e;
                 e.kind = kernels::quant::KvRowKind::kSwaKv;
                 e.rows = b;
                 e.channels = kHeadDim;
                 e.x = kv_ptr;
                 e.x_stride = kv_stride;
                 e.rows_out = swa_rows_.get<uint8_t>() + slot * kSwaRowBytes;
                 e.row_stride = kWindow * kSwaRowBytes;
                 e.decoded_out = pool_.get<uint16_t>() + slot * kHeadDim;
                 e.decoded_stride = kWindow * kHeadDim;
                 Ok(kernels::quant::LaunchEncodeRows(e, kst));
               },
               db * kHeadDim * 2 * 4 + db * kSwaRowBytes, 0});
  on_branch(2, stack);
  if (!loop && !stack) q_projection();
  if (qnorm_fused) {  // on the stack's q_lora columns, or wq_a's own rows
    fp8("q_norm + wq_b (FP8 32768x1280, norm fused)", wq_b_.get(), stack ? qkv_ : qa_, q_, -1,
        {&q_norm_, &qr_, opt_.wqb_ctas, stack ? kQkvCols : 0});
  } else if (stack) {
    // q_norm from the stack's q_lora columns into qr_ (packed), then wq_b on it.
    s.push_back({"q_norm (from the stacked output)",
                 [=, this] {
                   kernels::RmsNormParams p =
                       NormRows(b, kQLora, qkv_.get<uint16_t>(), q_norm_.get<uint16_t>(),
                                qr_.get<uint16_t>());
                   p.x_stride = kQkvCols;
                   Ok(kernels::LaunchRmsNorm(p, st));
                 },
                 db * kQLora * 4 + kQLora * 2, 0});
    fp8("wq_b (FP8 32768x1280)", wq_b_.get(), qr_, q_, -1,
        {.stream_ctas = opt_.wqb_ctas, .stream_tma = opt_.wqb_tma});
  } else {
    norm("q_norm", qr_, q_norm_, qr_, kQLora);
    fp8("wq_b (FP8 32768x1280)", wq_b_.get(), qr_, q_, -1,
        {.stream_ctas = opt_.wqb_ctas, .stream_tma = opt_.wqb_tma});
  }
  if (attn_at == 1) attn_mixes();
  if (!fuse_rope) rope("RoPE q", q_, kHeads, kHeadDim, false);
  {
    std::vector<kernels::L2PrefetchRange> r;
    std::string what;
    if (wants("wo_a")) {
      r.push_back(weight_range(wo_a_.get(), kOGroups * kOLora, kHeads * kHeadDim / kOGroups * 2));
      what = "wo_a";
    }
    if (wants("wo_b")) {
      fp8_ranges(*wo_b_, r);
      what += what.empty() ? "wo_b" : " + wo_b";
    }
    prefetch(what, r);
  }
  s.push_back({"sparse attention (128 + 512 rows)",
               [=, this] {
                 join(2);
                 Ok(kernels::LaunchSparseAttn(AttnParams(b, opt_.kv_rows, fuse_rope, o_), st));
               },
               KvRowBytesRead(b) + db * kHeads * kHeadDim * 2 * 2 + db * (kWindow + kTopk) * 4,
               4.0 * db * kHeads * kHeadDim * (kWindow + kTopk)});
  s.back().joins = [=] { join(2); };
  if (attn_at == 2) attn_mixes();  // beside wo_a: forked once the attention has ended
  if (!fuse_rope) rope("inverse RoPE o", o_, kHeads, kHeadDim, true);
  s.push_back(
      {"wo_a (bf16, 8 x 1024x4096)", [=, this] { LaunchFloat(WoAParams(b)); },
       static_cast<double>(wo_a_.bytes()) + db * 2 * (kHeads * kHeadDim + kOGroups * kOLora),
       2 * db * kOGroups * kOLora * (kHeads * kHeadDim / kOGroups)});
  fp8("wo_b (FP8 5120x8192)", wo_b_.get(), o_lora_, a_out_, -1, {.stream_tma = opt_.wob_tma});
  // ---- FFN site
  if (wants("gate")) {
    prefetch("gate",
             {weight_range(gate_.get(), kExperts, static_cast<int64_t>(gate_.bytes()) / kExperts)});
  }
  if (fuse) {
    boundary(0, "attn hc_post + ffn collapse + ffn_norm (one launch)", &a_out_, &x_, &a_post_,
             &a_comb_, y_, &y_, a_pre_, x_ffn_, ffn_norm_, fn_x_);
  } else {
    hc_post(0, "attn hc_post", a_out_, x_, a_post_, a_comb_, y_);
  }
  auto ffn_mixes = [&] {
    mixes(1, "ffn mixes + collapse", y_, ffn_fn_, ffn_base_, ffn_scale_, a_pre_, f_pre_, f_post_,
          f_comb_, x_ffn_);
  };
  // late or Options::ffn_mixes_late: after the gate.
  const bool ffn_late = late || (fuse && opt_.ffn_mixes_late);
  if (!ffn_late) ffn_mixes();
  if (!fuse) norm("ffn_norm", x_ffn_, ffn_norm_, fn_x_, kD);
  s.push_back(
      {opt_.narrow_fp32 ? "gate (bf16-valued fp32 384x5120, narrowed)" : "gate (fp32 384x5120)",
       [=, this] { LaunchFloat(GateParams(b)); },
       static_cast<double>(gate_.bytes()) + db * (kD * 2 + kExperts * 4), 2 * db * kExperts * kD});
  if (ffn_late) ffn_mixes();
  // With --shared-splits / --shared-ctas the one-stream schedule runs the shared expert as its
  // own stage too (on
  // the main stream), so both schedules sum its Linears with the same K splits.
  const bool shared_branch =
      (overlap && opt_.shared_branch) || opt_.shared_splits > 0 || opt_.shared_ctas > 0;
  // The shared expert on `on` (its own stage, or forked by the MoE once its up stage has run).
  auto shared_expert = [=, this](cudaStream_t on) {
    kernels::MoeSharedExpertParams p;
    p.weights = &shared_->view;
    p.m = b;
    p.x = fn_x_.get<uint16_t>();
    p.x_stride = kD;
    p.y = shared_y_.get<uint16_t>();
    p.y_stride = kD;
    p.split_k = opt_.shared_splits;
    p.stream_ctas = opt_.shared_ctas;
    p.workspace = shared_ws_.get();
    p.workspace_bytes = shared_ws_.bytes();
    Ok(kernels::LaunchMoeSharedExpert(p, on));
  };
  // Options::shared_at 1: forked by the MoE stage once its up stage is enqueued (after_up).
  const bool shared_after_up = shared_branch && overlap && opt_.shared_at == 1;
  if (shared_branch && !shared_after_up) {
    // The shared expert needs only the normed x: forked here, it runs beside the gate and the
    // routing; the MoE's combine waits for it (shared_y_ready).
    s.push_back({"shared expert (forked stream)", [=] { shared_expert(branch_stream(3)); },
                 0 /* with the MoE stage's bytes */, 2 * db * 3 * kD * kInter});
    on_branch(3, true);
  }
  // The FFN site's hc_post in the MoE's combine (kernels::MoeCudaParams::hc_post; the overlapped
  // schedule's session-21 form only: the one-stream schedule keeps LaunchHcPost, so the
  // bit-identity check covers the fused form).
  const bool post_in_moe = opt_.moe_hc_post && overlap && !loop;
  std::string moe_name = shared_after_up ? "MoE (routed; shared forked after the up stage"
                         : shared_branch ? "MoE (routed; shared joined"
                                         : "MoE (routed + shared";
  moe_name += post_in_moe ? "; + ffn hc_post)" : ")";
  s.push_back({moe_name,
               [=, this] {
                 kernels::MoeCudaParams p;
                 p.weights = &experts_->view;
                 p.m = b;
                 p.logits = logits_.get<float>();
                 p.x = fn_x_.get<uint16_t>();
                 p.x_stride = kD;
                 if (shared_branch) {
                   p.shared_y = shared_y_.get<uint16_t>();
                   p.shared_y_stride = kD;
                   p.shared_y_ready = overlap ? join_[3] : nullptr;  // one stream: in order
                   if (shared_after_up) {
                     p.after_up = [=, this](cudaStream_t up_stream) {
                       CUDA_CHECK(cudaEventRecord(fork_[3], up_stream));
                       CUDA_CHECK(cudaStreamWaitEvent(branch_stream(3), fork_[3], 0));
                       shared_expert(branch_stream(3));
                       mark(3);
                     };
                   }
                 } else {
                   p.shared = &shared_->view;
                 }
                 p.y = f_out_.get<uint16_t>();
                 p.y_stride = kD;
                 if (post_in_moe) {
                   p.hc_post.post = f_post_.get<float>();
                   p.hc_post.comb = f_comb_.get<float>();
                   p.hc_post.residual = y_.get<uint16_t>();
                   p.hc_post.residual_stride = kStreams * kD;
                   p.hc_post.out = z_.get<uint16_t>();
                   p.hc_post.out_stride = kStreams * kD;
                   p.hc_post_ready = join_[1];  // the FFN site's mixes
                 }
                 p.expert_ids = copy_expert_ids_ ? expert_ids_.get<int32_t>() : nullptr;
                 p.fused_front = opt_.moe_front;
                 p.gemm = static_cast<kernels::MoeCudaGemm>(opt_.moe_gemm);
                 p.ring_fused_combine = opt_.moe_ring_combine;
                 p.ring_cut = static_cast<kernels::MoeCudaRingCut>(opt_.moe_ring_cut);
                 p.early_ring = opt_.moe_early_ring;
                 p.front_programmatic = opt_.moe_front_pdl;
                 p.workspace = moe_ws_.get();
                 p.workspace_bytes = moe_ws_bytes_;
                 Ok(kernels::MoeCuda(p, st));
               },
               0 /* set after a run: touched experts */,
               2 * db * (shared_branch && !shared_after_up ? kTopkExperts : kTopkExperts + 1) * 3 *
                   kD * kInter});
  if ((shared_branch && !shared_after_up) || post_in_moe) {
    s.back().joins = [=, this] {
      if (shared_branch && !shared_after_up && overlap) {
        CUDA_CHECK(cudaStreamWaitEvent(st, join_[3], 0));
      }
      if (post_in_moe) join(1);
    };
  }
  if (wants("wq_next")) {
    // The next layer's wq_a and wq_b (here the same weights, read by the next replay) while the
    // last hc_post and the next step's boundary run.
    prefetch("the next wq_a + wq_b", wq_ranges());
  }
  if (loop) {
    // The layer's end as a layer loop runs it: the FFN hc_post, the next layer's collapse by this
    // site's pre (the single-pass shift) and its attn_norm, one launch.
    boundary(1, "ffn hc_post + next collapse + next attn_norm (one launch)", &f_out_, &y_, &f_post_,
             &f_comb_, z_, &z_, f_pre_, x_next_, attn_norm_, xn_next_);
  } else if (!post_in_moe) {
    hc_post(1, "ffn hc_post", f_out_, y_, f_post_, f_comb_, z_);
    if (!overlap && opt_.layer_loop && opt_.fuse_boundary) {
      // The one-stream reference of the loop form's last boundary: separate launches.
      hc_pre("next collapse (hc_pre)", z_, f_pre_, x_next_);
      norm("next attn_norm", x_next_, attn_norm_, xn_next_, kD);
    }
  }
  if (budget > 0) {  // the step ends with the prefetch branch joined (after its last kernel)
    Stage& last = s.back();
    last.launch = [=, inner = last.launch] {
      inner();
      join(4);
    };
    last.joins = [=, inner = last.joins] {
      if (inner) inner();
      join(4);
    };
  }
  return s;
}

}  // namespace flashserve::bench
