// The optional stage groups of bench_decoder_layer_step that a Reuse layer does not run: the
// per-step work of the decoder's compressing layer (layer 20: the ratio-1 KV compressor, its index
// key and the candidate-block source) and an Engram layer's memory (layers 1 and 14). Each group is
// timed on its own and "added to the step" of decoder_layer_step.h, like the Reindex indexer.
// Synthetic weights and inputs filled on the device (bench_fill.h); bench-only (needs a CUDA
// device at run time).
//
// Compressing layer (spec §3, §4.4, §4.5 steps 1 and 5, §4.11, §5), one new token per sequence at
// position L − 1, ratio 1 (one compressed row per token, group index = position):
//   compressor wkv       latent = bf16(xn · wkv^T), wkv bf16 [512, 5120] (no activation quant)
//   compressor norm      RMSNorm(latent) (LaunchCompressProjected, ratio 1; no open group)
//   main-KV row          RoPE of the last 64 dims at the position, FP4 E2M1 / E4M3-per-16 QDQ and
//                        the 288-byte serving row (LaunchFinalizeCompressedKv)
//   indexer wk           k = bf16(latent · wk^T), wk bf16 [128, 512]
//   k_norm + RoPE        RMSNorm(k) and RoPE of k[64:128] at the position (LaunchRmsNormRope)
//   index-key row        the 68-byte FP4 / UE8M0-per-32 serving row (LaunchEncodeRows kIndexK)
//   candidate blocks     layer 20's mask for layers 24/28/32/36: block maxima over 8 positions,
//                        top-2048 blocks of L/8 (LaunchCandidateBlocks) over synthetic scores
// Layer 20's own indexer (wq_b, RoPE + QDQ, weights_proj, the unmasked scores, the top-512) is the
// Reindex group's stages without the mask read, so layer 20 = Reuse step + indexer + this group.
//
// Ratio 2 (layers 2/8/14, the encoder's KV sources; every layer runs at decode), timed at an odd
// position, the step that completes a pair and emits a row (the even step runs only the GEMM and
// the state write of the pooling launch):
//   compressor wkv+wgate kv and z = x · W^T with the reference's fp32 copies [512, 5120] each
//                        (bf16 checkpoint values: uploaded narrowed to bf16 unless
//                        Options::narrow_fp32 is off), fp32 outputs (one grouped LaunchFloatLinear)
//   pool + norm          per channel softmax over the pair's z, pooled kv, bf16 cast, RMSNorm
//                        (LaunchCompressProjectedBatch: one launch for the batch, each sequence
//                        with its own open group)
//   main-KV row, wk, k_norm + RoPE, index-key row as above, at the group's first position j·2
// No candidate blocks (layer 20 only). The index scores of these layers (their own indexer over
// L/2 keys) are the Reindex group's stages at half the width; not repeated here.
//
// Engram layer (spec §4.8), before the block, per token:
//   gather               24 hashed rows of the FP8 table (256 E4M3 + 8 E8M0 = 264 B) dequantised
//                        to bf16 [6144] (LaunchEngramGather); ids made on the host once (uniform
//                        random rows of a table of Options::engram_rows rows: the hashing is not
//                        timed, and the table is smaller than the real 384M rows)
//   engram wkv           [key 4·D | value D] = wkv(e), FP8 [25600, 6144] (LaunchLinearFp8)
//   gate                 per stream: the normed (q_w·k_w)-weighted dot of h_c and key_c, signed
//                        sqrt, sigmoid (engram_gate.h: a bench-local kernel, none exists in
//                        kernels/)
//   stream update        h_c += gate_c · value, fp32, one bf16 cast (LaunchHcPost with comb = I)
#pragma once

#include <cuda_runtime.h>

#include <cstdint>
#include <memory>
#include <vector>

#include "bench/decoder_layer_step.h"
#include "kernels/common/cuda_check.h"
#include "kernels/compressor/compressor_params.h"
#include "kernels/gemm/gemm_float_cuda.h"
#include "kernels/norm_rope/rope_table.h"

namespace flashserve::bench {

// Dims of the extra groups (spec §2a, §4.4, §4.5, §4.8).
inline constexpr int64_t kCompressChannels = 512;
inline constexpr int64_t kMainKvRowBytes = 288;  // formats::MainKvRowBytes(512)
inline constexpr int64_t kCandidateBlock = 8;
inline constexpr int64_t kCandidateTopkBlocks = 2048;
inline constexpr int64_t kEngramIds = 24;  // 3 n-gram sizes × 8 hash heads
inline constexpr int64_t kEngramHeadDim = 256;
inline constexpr int64_t kEngramRowBytes = 264;
inline constexpr int64_t kEngramKv = 5 * kD;  // 25600: 4 keys (one per stream) + the value

class LayerExtras {
 public:
  // Allocates and fills everything for up to `max_tokens` sequences; work is enqueued on
  // `stream` (not owned).
  LayerExtras(const Options& o, int64_t max_tokens, cudaStream_t stream);

  // The compressing layer's extra stages for b tokens (b <= max_tokens), in order: ratio 1
  // (layer 20, with the candidate blocks) or 2 (layers 2/8/14, an emitting step).
  std::vector<Stage> CompressorStages(int64_t b, int64_t ratio);
  // The Engram layer's stages for b tokens, in order.
  std::vector<Stage> EngramStages(int64_t b);

  // Host copies of the outputs of the last run, for the finite / repeatable checks: the
  // compressor group's bf16 outputs (the QDQ'd compressed row and the normed index key), its
  // byte outputs (the serving rows and the candidate mask), the Engram group's new streams.
  std::vector<uint16_t> CompressorBf16(int64_t b) const;
  std::vector<uint8_t> CompressorBytes(int64_t b) const;
  std::vector<uint16_t> EngramOutput(int64_t b) const;
  // Candidate positions marked in row t of the mask (at most 2048 · 8).
  int64_t CandidateCount(int64_t b, int64_t t) const;

 private:
  void AllocateCompressor();
  void AllocateEngram();
  kernels::FloatLinearCudaParams Bf16LinearParams(const DeviceBuffer& w, int64_t n, int64_t k,
                                                  const DeviceBuffer& x, const DeviceBuffer& y,
                                                  int64_t b) const;
  // Ratio 2: kv = x · wkv^T and z = x · wgate^T as one grouped fp32-weight Linear.
  kernels::FloatLinearCudaParams Fp32PairParams(int64_t b) const;
  void LaunchFloat(kernels::FloatLinearCudaParams p);

  Options opt_;
  int64_t max_b_;
  cudaStream_t stream_;
  std::unique_ptr<kernels::RopeTable> rope_;
  DeviceBuffer positions_;  // int64 [max_b], all L − 1
  DeviceBuffer float_ws_;

  // Compressor, index key, candidates.
  DeviceBuffer xn_, cwkv_, cnorm_, wk_, knorm_;
  DeviceBuffer ckv_, latent_, group_index_, ckv_out_, crows_, ik_, ik_rows_;
  DeviceBuffer cscores_, cmask_, cand_ws_;
  kernels::CompressorDeviceState cstate_;
  int64_t groups_emitted_ = 0;
  // Ratio 2 (layers 2/8/14): fp32 wkv | wgate, their outputs, one open group per sequence.
  DeviceBuffer cw32_, kvz_, state_mem_, group_positions_;
  std::vector<kernels::CompressorDeviceState> states2_;
  std::vector<kernels::CompressorDeviceState*> state_ptrs2_;  // into states2_ (not resized)
  std::vector<kernels::CompressProjectedParams> params2_;     // [max_b], sequence t's launch
  std::vector<int64_t> emitted2_;                             // [max_b], host groups_emitted
  int64_t pos2_ = 0;  // the odd (emitting) position of the timed step

  // Engram.
  DeviceBuffer table_, ids_, gathered_, ekv_, h_, q_weight_, k_weight_, gate_, comb_, h_out_;
  std::unique_ptr<Fp8Weight> ewkv_;
  DeviceBuffer lin_ws_;
  size_t lin_ws_bytes_ = 0;
};

}  // namespace flashserve::bench
