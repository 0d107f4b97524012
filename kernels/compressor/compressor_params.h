// The KV compressor's post-GEMM half, its cache tail, the open-group state and the CUDA launchers
// (model spec §4.4, §10 items 1 and 5): the declarations the CUDA code shares with the CPU bodies,
// kept free of the GEMM types and of C++20 so that nvcc (C++17) can include them. compressor.h
// (the CPU compressor with its GEMMs) includes this header; its comment gives the recipes, and
// README.md the tests and tolerances. Same common contract as compressor.h.
// This header includes no CUDA header; CUstream_st* is cudaStream_t (nullptr: legacy stream).
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "kernels/norm_rope/rope_table.h"

struct CUstream_st;

namespace flashserve {
class ThreadPool;
}  // namespace flashserve

namespace flashserve::kernels {

inline constexpr int64_t kMaxCompressRatio = 16;
// Sequences per kernel launch of LaunchCompressProjectedBatch (descriptors in the kernel params).
inline constexpr int64_t kCompressBatchPerLaunch = 384;

// The open (partial) group of one sequence at one compressor layer. Part of the session state.
// Invariants: 0 <= pending < ratio; rows [0, pending) of kv / score hold the fp32 kv and z of the
// tokens at positions next_pos − pending .. next_pos − 1, in order. Serialized size:
// CompressorStateBytes(ratio, C) = 16 + 8·(ratio − 1)·C bytes (4,112 B for r = 2, C = 512;
// 1,040 B for the tiny model's C = 128; 16 B for ratio 1, which never holds tokens).
struct CompressorState {
  int64_t ratio = 0;
  int64_t channels = 0;
  int64_t pending = 0;
  int64_t next_pos = 0;      // meaningful only when pending > 0
  std::vector<float> kv;     // [(ratio − 1) · channels] fp32
  std::vector<float> score;  // [(ratio − 1) · channels] fp32 (the gate logits z)
};

// An empty state (pending 0) with its buffers allocated once. Errors: InvalidArgumentError for
// ratio outside 1..kMaxCompressRatio or channels < 1.
absl::StatusOr<CompressorState> MakeCompressorState(int64_t ratio, int64_t channels);

// Upper bound on the groups one call over `tokens` tokens can emit: ceil(tokens / ratio).
int64_t CompressMaxGroups(int64_t ratio, int64_t tokens);

// The cache-side tail of the main-KV chain for `rows` latents: out = QDQ_FP4E4M3B16(RoPE(latent,
// position group_index[g]·ratio)), RoPE on the last table->rope_dims() dims (interleaved pairs,
// as kernels/norm_rope RopeCpu). If cache_rows is set, row g also gets the serving encoding
// (formats::EncodeMainKvRow of the post-RoPE vector; decoding it gives `kv` bit for bit).
struct FinalizeCompressedKvParams {
  const RopeTable* table = nullptr;
  int64_t ratio = 0;                     // 1 .. kMaxCompressRatio
  int64_t rows = 0;                      // 0 is a no-op
  int64_t channels = 0;                  // C, multiple of 16, >= rope_dims, <= 2^24
  const int64_t* group_index = nullptr;  // [rows], each in [0, INT64_MAX / ratio]
  const uint16_t* latent = nullptr;      // bf16 [rows, C]
  int64_t latent_stride = 0;             // >= C
  uint16_t* kv = nullptr;                // bf16 [rows, C]; may equal latent (then equal strides)
  int64_t kv_stride = 0;                 // >= C
  uint8_t* cache_rows = nullptr;         // optional: [rows, formats::MainKvRowBytes(C)] bytes
  int64_t cache_row_stride = 0;          // bytes, >= MainKvRowBytes(C) when cache_rows is set
};

absl::Status ValidateFinalizeCompressedKv(const FinalizeCompressedKvParams& p);

// Cost O(rows·(rd/2 sin/cos + C)). Results do not depend on the pool size.
absl::Status FinalizeCompressedKvCpu(const FinalizeCompressedKvParams& p, ThreadPool* pool);

// Everything ValidateFinalizeCompressedKv checks except the values of group_index (only that it
// is non-null): what the GPU launcher checks, since its group indices live in device memory.
absl::Status ValidateFinalizeCompressedKvLayout(const FinalizeCompressedKvParams& p);

// ---- Post-GEMM compression: what a backend that runs its own GEMMs calls ----
// CompressCpu is the GEMMs followed by exactly this. Given the projections of s tokens at
// positions start_pos .. start_pos + s − 1:
//   ratio r >= 2: kv = x·wkv^T and score = x·wgate^T as fp32 [s, C]; the pooling, the one bf16
//                 cast and the RMSNorm of the compressor.h header, with the open group carried in
//                 the state exactly as CompressCpu does (same preconditions and state update);
//   ratio 1:      the bf16 GEMM output (kv_bf16), or its fp32 accumulator (kv, cast to bf16 once
//                 here), then the RMSNorm; one row per token, group index = position.
// The softmax's exp is compressor_math::ExpRn (exp_rn.h): the correctly rounded fp32 exp.
struct CompressProjectedParams {
  int64_t ratio = 0;                      // 1 .. kMaxCompressRatio; must equal the state's
  int64_t channels = 0;                   // C >= 1; must equal the state's
  int64_t start_pos = 0;                  // position of row 0, >= 0 (follows the state)
  int64_t tokens = 0;                     // s; 0 is a no-op (groups_emitted = 0)
  const float* kv = nullptr;              // fp32 [s, C]: row t at kv + t·kv_stride
  const uint16_t* kv_bf16 = nullptr;      // ratio 1 only, instead of kv: bf16 [s, C]
  int64_t kv_stride = 0;                  // >= C (elements of whichever kv is set)
  const float* score = nullptr;           // fp32 [s, C] gate logits; ratio >= 2 only (null at 1)
  int64_t score_stride = 0;               // >= C when score is set
  const uint16_t* norm_weight = nullptr;  // bf16 [C]
  float norm_eps = 1e-20f;                // > 0, finite
  // Outputs as CompressParams: pre-RoPE latents, bf16 [capacity, C], and their group indices.
  uint16_t* latent = nullptr;
  int64_t latent_stride = 0;          // >= C
  int64_t latent_capacity = 0;        // rows; >= CompressMaxGroups(ratio, s)
  int64_t* group_index = nullptr;     // [latent_capacity]
  int64_t* groups_emitted = nullptr;  // out, HOST memory on every backend
};

absl::Status ValidateCompressProjected(const CompressProjectedParams& p,
                                       const CompressorState& state);

// Host pointers. Errors as CompressCpu (InvalidArgumentError naming the field,
// FailedPreconditionError when start_pos does not follow the state), before anything is written.
// Cost O(s·C) plus one exp per token and channel at ratio >= 2.
absl::Status CompressProjectedCpu(const CompressProjectedParams& p, CompressorState* state,
                                  ThreadPool* pool);

// ---- CUDA launchers (cuda/*.cu; target fs_kernels_compressor_cuda, FLASHSERVE_CUDA only) ----

// The open group of one sequence held in device memory: the counters stay on the host (the
// launcher checks and advances them when it enqueues, as CompressCpu does), the fp32 rows live in
// caller-owned device memory. Invariants as CompressorState.
struct CompressorDeviceState {
  int64_t ratio = 0;
  int64_t channels = 0;
  int64_t pending = 0;
  int64_t next_pos = 0;    // meaningful only when pending > 0
  float* kv = nullptr;     // device fp32 [(ratio − 1)·channels]; unused at ratio 1
  float* score = nullptr;  // device fp32 [(ratio − 1)·channels]; unused at ratio 1
};

// Device bytes of the two row buffers: 8·(ratio − 1)·channels (4,096 B at r = 2, C = 512). Pure.
int64_t CompressorDeviceStateBytes(int64_t ratio, int64_t channels);

// An empty device state (pending 0) over `device_memory`, which must hold
// CompressorDeviceStateBytes bytes, 16-byte aligned; the memory is neither read nor written here
// and stays the caller's. Errors: InvalidArgumentError for ratio, channels, a null or misaligned
// pointer (ratio >= 2) or too few bytes.
absl::StatusOr<CompressorDeviceState> MakeCompressorDeviceState(int64_t ratio, int64_t channels,
                                                                void* device_memory, size_t bytes);

absl::Status ValidateCompressProjected(const CompressProjectedParams& p,
                                       const CompressorDeviceState& state);

// The GPU CompressProjectedCpu: same params, with kv / kv_bf16 / score / norm_weight / latent /
// group_index in device memory (groups_emitted stays a host pointer). Validates first (same
// checks and messages), writes *groups_emitted, advances state->pending / next_pos and enqueues
// ONE kernel on `stream` that writes the latents and group indices and then the state's rows;
// the next call on the same stream sees them. Nothing is allocated. Results equal
// CompressProjectedCpu's bit for bit (README.md "CUDA"). A warp per group (C <= 1024; a 256-thread
// block above), 16-byte loads when rows are 16-byte aligned. Cost: the projections read once, the
// latents written and re-read once (from L1/L2), the state's rows rewritten.
absl::Status LaunchCompressProjected(const CompressProjectedParams& p, CompressorDeviceState* state,
                                     CUstream_st* stream);

// ---- Batched decode: B sequences of one compressor layer in one launch ----
// Sequence b is sequences[b], a full CompressProjectedParams (its own start_pos, tokens s_b >= 0,
// input rows, latent / group_index outputs and host groups_emitted), with its own state
// states[b]. Every sequence must share sequence 0's ratio, channels, norm_weight, norm_eps,
// kv_stride, score_stride, latent_stride and input kind (kv or kv_bf16); sequences with
// tokens = 0 are no-ops (groups_emitted = 0, state untouched), as in the single call. The states
// must be distinct (distinct device rows) and the outputs must not overlap: not checked.
struct CompressProjectedBatchParams {
  const CompressProjectedParams* sequences = nullptr;  // host array [batch]
  int64_t batch = 0;                                   // >= 0; 0 is a no-op
};

// Checks every sequence as ValidateCompressProjected does against its state, then the shared
// fields above. Messages are prefixed "compressor batch: sequence <b>: " (the first bad one).
absl::Status ValidateCompressProjectedBatch(const CompressProjectedBatchParams& p,
                                            const CompressorState* const* states);
absl::Status ValidateCompressProjectedBatch(const CompressProjectedBatchParams& p,
                                            const CompressorDeviceState* const* states);

// The CPU reference: CompressProjectedCpu per sequence, in order, after validating the whole
// batch (nothing is written when any sequence is invalid).
absl::Status CompressProjectedBatchCpu(const CompressProjectedBatchParams& p,
                                       CompressorState* const* states, ThreadPool* pool);

// LaunchCompressProjected for a batch in ONE kernel launch (per kCompressBatchPerLaunch = 384
// sequences; larger batches take ceil(B / 384) launches, in order, on `stream`). Validates the
// whole batch first: on any error nothing is enqueued and no state or groups_emitted is touched.
// Then, exactly as B single calls would, writes each *groups_emitted and advances each state's
// host pending / next_pos; results (latents, group indices, state rows) equal B single calls'
// bit for bit. The per-sequence descriptors (pointers, pending, group counts) travel by value
// in the kernel parameters (__grid_constant__, up to 32,764 bytes since CUDA 12.1), so nothing is
// copied to the device and nothing is allocated. Grid (blocks, sequences): each sequence runs
// the single kernel's body (a warp or a block per group); its block 0 writes its new open group.
// CUDA graphs: capturable, but a capture bakes the descriptors of the enqueue (start positions,
// pending counts, first group indices) into the graph while the host counters advance only at
// capture; replaying it recomputes that one step on whatever the state rows now hold. Re-capture
// (or update the node) per step, or reset the host counters to the captured step's values.
// Same for LaunchCompressProjected. Cost: one launch for up to 384 sequences instead of B.
absl::Status LaunchCompressProjectedBatch(const CompressProjectedBatchParams& p,
                                          CompressorDeviceState* const* states,
                                          CUstream_st* stream);

// FinalizeCompressedKvCpu on the GPU: same params, with group_index, latent, kv and cache_rows in
// device memory (table stays on the host: its rd/2 frequencies travel with the launch). Validates
// the layout (ValidateFinalizeCompressedKvLayout; the group indices are not read on the host: a
// negative index rotates by its negative angle), then enqueues one kernel on `stream`. Results
// equal the CPU body's bit for bit except where a double sin/cos lands within a double ulp of an
// fp32 rounding boundary (as kernels/norm_rope LaunchRope; never seen). A warp per row, a lane per
// 16-value FP4 block. Cost: the latents read once, kv (and the serving rows) written once.
absl::Status LaunchFinalizeCompressedKv(const FinalizeCompressedKvParams& p, CUstream_st* stream);

// Copies a host state into a device state of the same ratio and channels (rows and counters).
// Returns once `host` has been read (pageable copy semantics); the rows land in stream order.
// Errors: InvalidArgumentError for a shape mismatch or an invalid host state.
absl::Status UploadCompressorState(const CompressorState& host, CompressorDeviceState* device,
                                   CUstream_st* stream);
// Copies a device state into a host state of the same ratio and channels after the work queued
// on `stream` (synchronises the stream). Errors: InvalidArgumentError for a shape mismatch.
absl::Status DownloadCompressorState(const CompressorDeviceState& device, CompressorState* host,
                                     CUstream_st* stream);

}  // namespace flashserve::kernels
