// The Engram table gather of DeepSeek-V4.1-Flash (model spec §4.8 "Module", §5 "Engram table"):
// for every token, its hashed n-gram ids (24 per Engram layer, already offset into the layer's
// table by model/engram) pick rows of an FP8 table — 256 E4M3 codes and 8 E8M0 scales (one per 32
// values) per row, 264 B — which are dequantised to bf16 and written side by side, giving the
// flattened [tokens, 24 · 256 = 6144] input of the Engram wkv Linear:
//
//   out[t, col·dim + e] = bf16(E4M3(codes[id, e]) · 2^(scales[id, e / 32] − 127)),  id = ids[t,
//   col]
//
// (model/runtime/engram_forward.cc step 1; the product is exact unless it under/overflows fp32,
// the bf16 rounding is RNE; a NaN code or the NaN scale byte 255 gives NaN, the code's NaN first).
// README.md gives the tests and the GPU design.
//
// Table layout: codes and scales are two byte tensors with their own row strides, so both the
// checkpoint's two tensors ([rows, 256] F8_E4M3 and [rows, 8] F8_E8M0; strides 256 and 8) and the
// packed 264-byte serving row (formats::SwaKvRowBytes(256): scales = codes + 256, both strides 264)
// are described by the same params.
//
// Sharding: a process may hold only the global rows [row_begin, row_begin + rows) (the reference
// shards the table by rows over tensor-parallel ranks, looks up with a mask and all-reduces). An
// id outside the held rows is "foreign": its 256 outputs are +0 (the masked lookup), and it is
// counted in *foreign_ids when that counter is given. With the whole table held (row_begin 0,
// rows = table rows), a foreign id is a bad hash; hosts holding the ids can reject them up front
// with CheckEngramIds (the CPU model does). Foreign ids never make the gather read out of bounds.
//
// Common contract: bf16 outputs are uint16 bit patterns; strides count elements (bytes for the
// byte tensors); the caller owns every buffer; nothing is allocated. Errors: InvalidArgumentError
// naming the field, detected before anything is read or written. Calls are thread-safe for
// disjoint outputs. This header includes no CUDA header; CUstream_st* is cudaStream_t.
#pragma once

#include <cstdint>

#include "absl/status/status.h"

struct CUstream_st;

namespace flashserve {
class ThreadPool;
}  // namespace flashserve

namespace flashserve::kernels {

// Values sharing one E8M0 scale byte.
inline constexpr int64_t kEngramScaleBlock = 32;

struct EngramGatherParams {
  int64_t tokens = 0;               // m; 0 is a no-op
  int64_t ids_per_token = 0;        // columns: (n-gram sizes) × (hash heads) = 24, >= 1
  int64_t dim = 0;                  // engram_head_dim (256), a positive multiple of 32
  const int64_t* ids = nullptr;     // [tokens, ids_per_token] global table rows
  int64_t ids_stride = 0;           // elements between tokens, >= ids_per_token
  const uint8_t* codes = nullptr;   // E4M3 [rows, dim]: held row i at codes + i · codes_stride
  int64_t codes_stride = 0;         // bytes, >= dim
  const uint8_t* scales = nullptr;  // E8M0 [rows, dim / 32]: row i at scales + i · scales_stride
  int64_t scales_stride = 0;        // bytes, >= dim / 32
  int64_t row_begin = 0;            // global index of held row 0, >= 0
  int64_t rows = 0;                 // rows held, >= 1
  uint16_t* out = nullptr;          // bf16 [tokens, ids_per_token · dim]
  int64_t out_stride = 0;           // elements between tokens, >= ids_per_token · dim
  // Optional: the number of foreign ids of the call is ADDED here (the caller zeroes it).
  uint64_t* foreign_ids = nullptr;
};

// Shape, stride and pointer checks shared by every backend (ids are not read). Cost O(1).
absl::Status ValidateEngramGather(const EngramGatherParams& p);

// Host-side id check for callers that hold the ids in host memory: InvalidArgumentError naming
// the first id (token, column and value) outside [row_begin, row_begin + rows). ids must be a host
// pointer. Cost O(tokens · ids_per_token).
absl::Status CheckEngramIds(const EngramGatherParams& p);

// Dequantises one E4M3 code under one E8M0 scale byte to bf16 bits: the recipe above with the
// NaN rule made explicit (a NaN code's own NaN first, else the scale's). Pure and thread-safe;
// the scalar reference shared by the CPU body and the tests.
uint16_t EngramDequantValue(uint8_t code, uint8_t scale_byte);

// ---- CPU body (cpu/engram_gather_cpu.cc; target fs_kernels_engram) ----
// Host pointers. Split over tokens on the pool (results do not depend on it). Cost: tokens ·
// ids_per_token row reads (dim + dim/32 bytes) and dim bf16 writes each.
absl::Status EngramGatherCpu(const EngramGatherParams& p, ThreadPool* pool);

// ---- CUDA launcher (cuda/engram_launch.cu; target fs_kernels_engram_cuda, FLASHSERVE_CUDA) ----
// Same params; ids, codes, scales, out and foreign_ids are device pointers (or managed memory).
// Validates first (ValidateEngramGather: same checks and messages; the ids are NOT read on the
// host — foreign ids are handled on the device as above), then enqueues one kernel on `stream` and
// returns; buffers must stay valid until the stream passes it. Nothing is allocated. CUDA launch
// failures abort (CUDA_CHECK). Results equal EngramGatherCpu bit for bit (same recipe, exact
// device fp32 multiply, no flush of subnormals). A warp per (token, column): each lane reads 8
// codes (8-byte loads when the code rows are 8-byte aligned) and its block's scale byte and writes
// 8 bf16 (16-byte stores when the output rows are 16-byte aligned). Cost: the gathered rows read
// once (random 264-byte rows), the output written once.
absl::Status LaunchEngramGather(const EngramGatherParams& p, CUstream_st* stream);

}  // namespace flashserve::kernels
