// bench_decoder_layer_step's optional groups: the compressing layer and the Engram layer
// (decoder_layer_extras.h).
#include "bench/decoder_layer_extras.h"

#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <memory>
#include <random>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "bench/bench_fill.h"
#include "bench/engram_gate.h"
#include "common/base/check.h"
#include "kernels/common/cuda_check.h"
#include "kernels/compressor/compressor_params.h"
#include "kernels/engram/engram.h"
#include "kernels/gemm/gemm_cuda.h"
#include "kernels/gemm/gemm_float_cuda.h"
#include "kernels/indexer/indexer.h"
#include "kernels/mhc/mhc.h"
#include "kernels/norm_rope/norm_rope.h"
#include "kernels/norm_rope/rope_table.h"
#include "kernels/quant/quant.h"

namespace flashserve::bench {
namespace {

void Ok(const absl::Status& s) { CHECK(s.ok()) << s.ToString(); }

DeviceBuffer Bf16Buffer(int64_t n) { return DeviceBuffer(static_cast<size_t>(n) * 2); }
DeviceBuffer F32Buffer(int64_t n) { return DeviceBuffer(static_cast<size_t>(n) * 4); }

constexpr float kNormEps = 1e-20f;  // config norm_eps (spec §2a)

}  // namespace

LayerExtras::LayerExtras(const Options& o, int64_t max_tokens, cudaStream_t stream)
    : opt_(o), max_b_(max_tokens), stream_(stream) {
  CHECK_GE(opt_.context, 2) << "--context";
  CHECK_GT(opt_.engram_rows, 0) << "--engram-rows";
  CHECK_GT(max_b_, 0) << "--extra-tokens";
  // The compressed layers' RoPE (spec §4.3): θ 160000, YaRN over 65536 × 16, last 64 dims.
  kernels::RopeSpec rs{kRope, 160000.0, 65536, 16.0, 32.0, 1.0};
  rope_ = std::make_unique<kernels::RopeTable>(kernels::RopeTable::Create(rs, 0).value());
  std::vector<int64_t> positions(static_cast<size_t>(max_b_), opt_.context - 1);
  positions_ = DeviceBuffer(positions.size() * 8);
  positions_.CopyFromHost(positions.data(), positions.size() * 8);
  AllocateCompressor();
  AllocateEngram();
  size_t float_ws = 16;
  for (const kernels::FloatLinearCudaParams& p :
       {Bf16LinearParams(cwkv_, kCompressChannels, kD, xn_, ckv_, max_b_),
        Bf16LinearParams(wk_, kIdxDim, kCompressChannels, latent_, ik_, max_b_),
        Fp32PairParams(max_b_)}) {
    float_ws = std::max(float_ws, kernels::FloatLinearCudaWorkspaceBytes(p, max_b_));
  }
  float_ws_ = DeviceBuffer(float_ws);
  CUDA_CHECK(cudaDeviceSynchronize());
}

void LayerExtras::AllocateCompressor() {
  const int64_t b = max_b_, l = opt_.context;
  uint64_t seed = 900;
  xn_ = Bf16Buffer(b * kD);  // attn_norm output, the compressor's input
  FillBf16(seed++, static_cast<size_t>(b * kD), 1.0f, xn_.get<uint16_t>());
  cwkv_ = Bf16Buffer(kCompressChannels * kD);
  FillBf16(seed++, static_cast<size_t>(kCompressChannels * kD), 0.02f, cwkv_.get<uint16_t>());
  cnorm_ = Bf16Buffer(kCompressChannels);
  FillBf16(seed++, static_cast<size_t>(kCompressChannels), 1.0f, cnorm_.get<uint16_t>());
  wk_ = Bf16Buffer(kIdxDim * kCompressChannels);
  FillBf16(seed++, static_cast<size_t>(kIdxDim * kCompressChannels), 0.05f, wk_.get<uint16_t>());
  knorm_ = Bf16Buffer(kIdxDim);
  FillBf16(seed++, static_cast<size_t>(kIdxDim), 1.0f, knorm_.get<uint16_t>());
  ckv_ = Bf16Buffer(b * kCompressChannels);
  latent_ = Bf16Buffer(b * kCompressChannels);
  group_index_ = DeviceBuffer(static_cast<size_t>(b) * 8);
  ckv_out_ = Bf16Buffer(b * kCompressChannels);
  crows_ = DeviceBuffer(static_cast<size_t>(b * kMainKvRowBytes));
  ik_ = Bf16Buffer(b * kIdxDim);
  ik_rows_ = DeviceBuffer(static_cast<size_t>(b * kIdxKRowBytes));
  // Layer 20's unmasked scores (synthetic, uniform in [−4, 4]: every block is finite, so every
  // row keeps exactly 2048 blocks) and the mask.
  cscores_ = Bf16Buffer(b * l);
  FillBf16(seed++, static_cast<size_t>(b * l), 4.0f, cscores_.get<uint16_t>());
  cmask_ = DeviceBuffer(static_cast<size_t>(b * l));
  cand_ws_ = DeviceBuffer(
      std::max<size_t>(kernels::CandidateBlocksCudaWorkspaceBytes(b, l, kCandidateBlock), 16));
  // Ratio 1 keeps no open group: the device state needs no memory.
  cstate_ = kernels::MakeCompressorDeviceState(1, kCompressChannels, nullptr, 0).value();

  // Ratio 2: wkv and wgate as the reference's fp32 copies [2, 512, 5120], their fp32 outputs
  // [2, max_b, 512], and one open group per sequence holding the previous (even) token's fp32 kv
  // and z (synthetic values; every timed step is the odd position that completes the pair).
  // Options::narrow_fp32: they hold bf16 values, uploaded as bf16 (NarrowFloatLinearWeight).
  if (opt_.narrow_fp32) {
    cw32_ = Bf16Buffer(2 * kCompressChannels * kD);
    FillBf16(seed++, static_cast<size_t>(2 * kCompressChannels * kD), 0.02f, cw32_.get<uint16_t>());
  } else {
    cw32_ = F32Buffer(2 * kCompressChannels * kD);
    FillF32(seed++, static_cast<size_t>(2 * kCompressChannels * kD), -0.02f, 0.02f,
            cw32_.get<float>());
  }
  kvz_ = F32Buffer(2 * b * kCompressChannels);
  const int64_t state_bytes = kernels::CompressorDeviceStateBytes(2, kCompressChannels);
  state_mem_ = DeviceBuffer(static_cast<size_t>(b * state_bytes));
  FillF32(seed++, static_cast<size_t>(b * state_bytes / 4), -1.0f, 1.0f, state_mem_.get<float>());
  for (int64_t t = 0; t < b; ++t) {
    states2_.push_back(kernels::MakeCompressorDeviceState(
                           2, kCompressChannels, state_mem_.get<uint8_t>() + t * state_bytes,
                           static_cast<size_t>(state_bytes))
                           .value());
  }
  // The odd position that emits (L − 1, or L − 2 for an odd L) and its group's first token.
  pos2_ = ((l - 1) % 2 == 1) ? l - 1 : l - 2;
  // The batched launch's per-sequence params (sequence t: its kv / z rows, latent row t), built
  // once; the stage passes the first b of them.
  emitted2_.assign(static_cast<size_t>(b), 0);
  for (int64_t t = 0; t < b; ++t) {
    kernels::CompressProjectedParams p;
    p.ratio = 2;
    p.channels = kCompressChannels;
    p.start_pos = pos2_;
    p.tokens = 1;
    p.kv = kvz_.get<float>() + t * kCompressChannels;
    p.kv_stride = kCompressChannels;
    p.score = kvz_.get<float>() + (b + t) * kCompressChannels;
    p.score_stride = kCompressChannels;
    p.norm_weight = cnorm_.get<uint16_t>();
    p.norm_eps = kNormEps;
    p.latent = latent_.get<uint16_t>() + t * kCompressChannels;
    p.latent_stride = kCompressChannels;
    p.latent_capacity = 1;
    p.group_index = group_index_.get<int64_t>() + t;
    p.groups_emitted = &emitted2_[static_cast<size_t>(t)];
    params2_.push_back(p);
    state_ptrs2_.push_back(&states2_[static_cast<size_t>(t)]);
  }
  std::vector<int64_t> group_pos(static_cast<size_t>(b), pos2_ - 1);
  group_positions_ = DeviceBuffer(group_pos.size() * 8);
  group_positions_.CopyFromHost(group_pos.data(), group_pos.size() * 8);
}

void LayerExtras::AllocateEngram() {
  const int64_t b = max_b_;
  uint64_t seed = 1000;
  const int64_t rows = opt_.engram_rows;
  // Packed 264-byte rows: 256 E4M3 codes, then 8 E8M0 scales 2^-9 .. 2^-6.
  table_ = DeviceBuffer(static_cast<size_t>(rows * kEngramRowBytes));
  FillFp8Codes(seed++, static_cast<size_t>(rows * kEngramRowBytes), table_.get<uint8_t>());
  FillRowBytes(seed++, static_cast<size_t>(rows), kEngramRowBytes, kEngramHeadDim,
               kEngramHeadDim / 32, 118, 121, table_.get<uint8_t>());
  // The hashed ids, made on the host once (synthetic: uniform random rows; spec §4.8 hashing is
  // per token on the CPU and not timed here).
  std::vector<int64_t> ids(static_cast<size_t>(b * kEngramIds));
  std::mt19937_64 rng(17);
  for (int64_t& id : ids) id = static_cast<int64_t>(rng() % static_cast<uint64_t>(rows));
  ids_ = DeviceBuffer(ids.size() * 8);
  ids_.CopyFromHost(ids.data(), ids.size() * 8);
  gathered_ = Bf16Buffer(b * kEngramIds * kEngramHeadDim);
  ewkv_ = std::make_unique<Fp8Weight>(seed++ * 7, kEngramKv, kEngramIds * kEngramHeadDim);
  ekv_ = Bf16Buffer(b * kEngramKv);
  h_ = Bf16Buffer(b * kStreams * kD);
  FillBf16(seed++, static_cast<size_t>(b * kStreams * kD), 1.0f, h_.get<uint16_t>());
  q_weight_ = Bf16Buffer(kStreams * kD);
  FillBf16(seed++, static_cast<size_t>(kStreams * kD), 1.0f, q_weight_.get<uint16_t>());
  k_weight_ = Bf16Buffer(kStreams * kD);
  FillBf16(seed++, static_cast<size_t>(kStreams * kD), 1.0f, k_weight_.get<uint16_t>());
  gate_ = F32Buffer(b * kStreams);
  // comb = I per token: HcPost then gives h_c + gate_c · value in fp32 with one cast.
  std::vector<float> comb(static_cast<size_t>(b * 16), 0.0f);
  for (int64_t t = 0; t < b; ++t) {
    for (int64_t c = 0; c < kStreams; ++c) comb[static_cast<size_t>(t * 16 + c * 5)] = 1.0f;
  }
  comb_ = F32Buffer(b * 16);
  comb_.CopyFromHost(comb.data(), comb.size() * 4);
  h_out_ = Bf16Buffer(b * kStreams * kD);
  lin_ws_bytes_ = std::max<size_t>(kernels::LinearCudaWorkspaceBytes(ewkv_->view, b), 16);
  lin_ws_ = DeviceBuffer(lin_ws_bytes_);
}

kernels::FloatLinearCudaParams LayerExtras::Bf16LinearParams(const DeviceBuffer& w, int64_t n,
                                                             int64_t k, const DeviceBuffer& x,
                                                             const DeviceBuffer& y,
                                                             int64_t b) const {
  kernels::FloatLinearCudaParams p;
  p.m = b;
  p.n = n;
  p.k = k;
  p.w_bf16 = w.get<uint16_t>();
  p.x_bf16 = x.get<uint16_t>();
  p.x_stride = k;
  p.y_bf16 = y.get<uint16_t>();
  p.y_stride = n;
  return p;
}

kernels::FloatLinearCudaParams LayerExtras::Fp32PairParams(int64_t b) const {
  // Group 0 = wkv → kv, group 1 = wgate → z; both read the same x.
  kernels::FloatLinearCudaParams p;
  p.m = b;
  p.n = kCompressChannels;
  p.k = kD;
  p.groups = 2;
  if (opt_.narrow_fp32) {
    p.w_bf16 = cw32_.get<uint16_t>();
  } else {
    p.w_f32 = cw32_.get<float>();
  }
  p.w_group_stride = kCompressChannels * kD;
  p.x_bf16 = xn_.get<uint16_t>();
  p.x_stride = kD;
  p.x_group_stride = 0;
  p.y_f32 = kvz_.get<float>();
  p.y_stride = kCompressChannels;
  p.y_group_stride = max_b_ * kCompressChannels;
  return p;
}

void LayerExtras::LaunchFloat(kernels::FloatLinearCudaParams p) {
  p.workspace = float_ws_.get();
  p.workspace_bytes = float_ws_.bytes();
  Ok(kernels::LaunchFloatLinear(p, stream_));
}

std::vector<Stage> LayerExtras::CompressorStages(int64_t b, int64_t ratio) {
  CHECK_LE(b, max_b_);
  CHECK(ratio == 1 || ratio == 2) << "ratio " << ratio;
  const double db = static_cast<double>(b);
  const int64_t l = opt_.context;
  constexpr int64_t kC = kCompressChannels;
  cudaStream_t st = stream_;
  std::vector<Stage> s;
  if (ratio == 1) {
    s.push_back({"compressor wkv (bf16 512x5120)",
                 [=, this] { LaunchFloat(Bf16LinearParams(cwkv_, kC, kD, xn_, ckv_, b)); },
                 static_cast<double>(cwkv_.bytes()) + db * 2 * (kD + kC), 2 * db * kC * kD});
    s.push_back({"compressor norm (ratio 1)",
                 [=, this] {
                   // One launch for the batch: at ratio 1 no sequence holds an open group, so
                   // the rows are independent; the group indices it writes are not used (the
                   // main-KV row takes each sequence's own position).
                   kernels::CompressProjectedParams p;
                   p.ratio = 1;
                   p.channels = kC;
                   p.start_pos = l - 1;
                   p.tokens = b;
                   p.kv_bf16 = ckv_.get<uint16_t>();
                   p.kv_stride = kC;
                   p.norm_weight = cnorm_.get<uint16_t>();
                   p.norm_eps = kNormEps;
                   p.latent = latent_.get<uint16_t>();
                   p.latent_stride = kC;
                   p.latent_capacity = b;
                   p.group_index = group_index_.get<int64_t>();
                   p.groups_emitted = &groups_emitted_;
                   Ok(kernels::LaunchCompressProjected(p, &cstate_, st));
                 },
                 db * (kC * 2 * 2 + 8) + kC * 2, 0});
  } else {
    s.push_back({opt_.narrow_fp32 ? "compressor wkv + wgate (bf16-valued fp32 2x512x5120, narrowed)"
                                  : "compressor wkv + wgate (fp32 2x512x5120)",
                 [=, this] { LaunchFloat(Fp32PairParams(b)); },
                 static_cast<double>(cw32_.bytes()) + db * (kD * 2 + 2 * kC * 4),
                 2 * 2 * db * kC * kD});
    s.push_back(
        {"compressor pool + norm (ratio 2, batched)",
         [=, this] {
           // One launch for the batch (LaunchCompressProjectedBatch: each sequence keeps
           // its own open group). Each step is the odd position that completes the pair:
           // every state is put back to "one token pending" on the host first.
           for (int64_t t = 0; t < b; ++t) {
             kernels::CompressorDeviceState& state = states2_[static_cast<size_t>(t)];
             state.pending = 1;
             state.next_pos = pos2_;
           }
           Ok(kernels::LaunchCompressProjectedBatch({params2_.data(), b}, state_ptrs2_.data(), st));
           for (int64_t t = 0; t < b; ++t) CHECK_EQ(emitted2_[static_cast<size_t>(t)], 1);
         },
         db * (4.0 * kC * 4 + kC * 2 * 2 + 8) + kC * 2, 0});
  }
  // The group's first token: L − 1 at ratio 1 (group index = position), the even one at ratio 2.
  const int64_t* rope_positions =
      ratio == 1 ? positions_.get<int64_t>() : group_positions_.get<int64_t>();
  s.push_back({"main-KV row: RoPE, FP4 QDQ, 288-B row",
               [=, this] {
                 kernels::FinalizeCompressedKvParams p;
                 p.table = rope_.get();
                 p.ratio = ratio;
                 p.rows = b;
                 p.channels = kC;
                 // Position group_index · ratio: L − 1 at ratio 1, the compressor's j at 2.
                 p.group_index =
                     ratio == 1 ? positions_.get<int64_t>() : group_index_.get<int64_t>();
                 p.latent = latent_.get<uint16_t>();
                 p.latent_stride = kC;
                 p.kv = ckv_out_.get<uint16_t>();
                 p.kv_stride = kC;
                 p.cache_rows = crows_.get<uint8_t>();
                 p.cache_row_stride = kMainKvRowBytes;
                 Ok(kernels::LaunchFinalizeCompressedKv(p, st));
               },
               db * (kC * 2 * 2 + kMainKvRowBytes + 8), 0});
  s.push_back({"indexer wk (bf16 128x512)",
               [=, this] { LaunchFloat(Bf16LinearParams(wk_, kIdxDim, kC, latent_, ik_, b)); },
               static_cast<double>(wk_.bytes()) + db * 2 * (kC + kIdxDim), 2 * db * kIdxDim * kC});
  s.push_back({"k_norm + RoPE (128)",
               [=, this] {
                 kernels::RmsNormRopeParams p;
                 p.norm.rows = b;
                 p.norm.cols = kIdxDim;
                 p.norm.x = ik_.get<uint16_t>();
                 p.norm.x_stride = kIdxDim;
                 p.norm.weight_bf16 = knorm_.get<uint16_t>();
                 p.norm.eps = kNormEps;
                 p.norm.out = ik_.get<uint16_t>();
                 p.norm.out_stride = kIdxDim;
                 p.table = rope_.get();
                 p.positions = rope_positions;
                 Ok(kernels::LaunchRmsNormRope(p, st));
               },
               db * (kIdxDim * 2 * 2 + 8) + kIdxDim * 2, 0});
  s.push_back({"index-key row (FP4, 68 B)",
               [=, this] {
                 kernels::quant::EncodeRowsParams e;
                 e.kind = kernels::quant::KvRowKind::kIndexK;
                 e.rows = b;
                 e.channels = kIdxDim;
                 e.x = ik_.get<uint16_t>();
                 e.x_stride = kIdxDim;
                 e.rows_out = ik_rows_.get<uint8_t>();
                 e.row_stride = kIdxKRowBytes;
                 Ok(kernels::quant::LaunchEncodeRows(e, st));
               },
               db * (kIdxDim * 2 + kIdxKRowBytes), 0});
  if (ratio != 1) return s;  // the candidate source is layer 20 only
  s.push_back({"candidate blocks (top-2048 of L/8)",
               [=, this] {
                 // No batched entry point: the b rows go as b consecutive positions ending at
                 // L − 1 (each row reads its own L scores, as b decode rows would).
                 kernels::CandidateBlocksParams p;
                 p.tokens = b;
                 p.width = l;
                 p.start_pos = l - b;
                 p.ratio = 1;
                 p.block_size = kCandidateBlock;
                 p.topk_blocks = kCandidateTopkBlocks;
                 p.scores = cscores_.get<uint16_t>();
                 p.scores_stride = l;
                 p.candidates = cmask_.get<uint8_t>();
                 p.candidates_stride = l;
                 p.workspace = cand_ws_.get();
                 p.workspace_bytes = cand_ws_.bytes();
                 Ok(kernels::LaunchCandidateBlocks(p, st));
               },
               db * l * (2 + 1), 0});
  return s;
}

std::vector<Stage> LayerExtras::EngramStages(int64_t b) {
  CHECK_LE(b, max_b_);
  const double db = static_cast<double>(b);
  constexpr int64_t kIn = kEngramIds * kEngramHeadDim;  // 6144
  cudaStream_t st = stream_;
  std::vector<Stage> s;
  s.push_back({"engram gather (24 rows x 264 B)",
               [=, this] {
                 kernels::EngramGatherParams p;
                 p.tokens = b;
                 p.ids_per_token = kEngramIds;
                 p.dim = kEngramHeadDim;
                 p.ids = ids_.get<int64_t>();
                 p.ids_stride = kEngramIds;
                 p.codes = table_.get<uint8_t>();
                 p.codes_stride = kEngramRowBytes;
                 p.scales = table_.get<uint8_t>() + kEngramHeadDim;
                 p.scales_stride = kEngramRowBytes;
                 p.row_begin = 0;
                 p.rows = opt_.engram_rows;
                 p.out = gathered_.get<uint16_t>();
                 p.out_stride = kIn;
                 Ok(kernels::LaunchEngramGather(p, st));
               },
               db * kEngramIds * (kEngramRowBytes + 8) + db * kIn * 2, 0});
  const Fp8Weight* w = ewkv_.get();
  s.push_back({"engram wkv (FP8 25600x6144)",
               [=, this] {
                 kernels::LinearCudaParams p;
                 p.weight = &w->view;
                 p.m = b;
                 p.x_bf16 = gathered_.get<uint16_t>();
                 p.x_stride = kIn;
                 p.y_bf16 = ekv_.get<uint16_t>();
                 p.y_stride = kEngramKv;
                 p.workspace = lin_ws_.get();
                 p.workspace_bytes = lin_ws_bytes_;
                 Ok(kernels::LaunchLinearFp8(p, st));
               },
               w->bytes() + db * 2 * (kIn + kEngramKv), 2 * db * kEngramKv * kIn});
  s.push_back({"engram gate (4 streams, bench kernel)",
               [=, this] {
                 EngramGateParams p;
                 p.tokens = b;
                 p.dim = kD;
                 p.h = h_.get<uint16_t>();
                 p.h_stride = kStreams * kD;
                 p.key = ekv_.get<uint16_t>();
                 p.key_stride = kEngramKv;
                 p.q_weight = q_weight_.get<uint16_t>();
                 p.k_weight = k_weight_.get<uint16_t>();
                 p.gate = gate_.get<float>();
                 LaunchEngramGate(p, st);
               },
               db * kStreams * kD * 2 * 2 + 2.0 * kStreams * kD * 2 + db * kStreams * 4, 0});
  s.push_back({"engram stream update (hc_post, comb = I)",
               [=, this] {
                 kernels::HcPostParams p;
                 p.tokens = b;
                 p.dim = kD;
                 p.f = ekv_.get<uint16_t>() + kStreams * kD;  // the value half
                 p.f_stride = kEngramKv;
                 p.residual = h_.get<uint16_t>();
                 p.residual_stride = kStreams * kD;
                 p.post = gate_.get<float>();
                 p.comb = comb_.get<float>();
                 p.out = h_out_.get<uint16_t>();
                 p.out_stride = kStreams * kD;
                 Ok(kernels::LaunchHcPost(p, st));
               },
               db * kD * 2 * (1 + 2 * kStreams) + db * 20 * 4, 0});
  return s;
}

std::vector<uint16_t> LayerExtras::CompressorBf16(int64_t b) const {
  std::vector<uint16_t> v(static_cast<size_t>(b * (kCompressChannels + kIdxDim)));
  ckv_out_.CopyToHost(v.data(), static_cast<size_t>(b * kCompressChannels) * 2);
  ik_.CopyToHost(v.data() + b * kCompressChannels, static_cast<size_t>(b * kIdxDim) * 2);
  return v;
}

std::vector<uint8_t> LayerExtras::CompressorBytes(int64_t b) const {
  const size_t main = static_cast<size_t>(b * kMainKvRowBytes);
  const size_t index = static_cast<size_t>(b * kIdxKRowBytes);
  const size_t mask = static_cast<size_t>(b * opt_.context);
  std::vector<uint8_t> v(main + index + mask);
  crows_.CopyToHost(v.data(), main);
  ik_rows_.CopyToHost(v.data() + main, index);
  cmask_.CopyToHost(v.data() + main + index, mask);
  return v;
}

std::vector<uint16_t> LayerExtras::EngramOutput(int64_t b) const {
  std::vector<uint16_t> v(static_cast<size_t>(b * kStreams * kD));
  h_out_.CopyToHost(v.data(), v.size() * 2);
  return v;
}

int64_t LayerExtras::CandidateCount(int64_t b, int64_t t) const {
  CHECK_LT(t, b);
  std::vector<uint8_t> row(static_cast<size_t>(opt_.context));
  CUDA_CHECK(cudaMemcpy(row.data(), cmask_.get<uint8_t>() + t * opt_.context, row.size(),
                        cudaMemcpyDeviceToHost));
  return static_cast<int64_t>(
      std::count_if(row.begin(), row.end(), [](uint8_t m) { return m != 0; }));
}

}  // namespace flashserve::bench
