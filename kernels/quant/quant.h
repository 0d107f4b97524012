// Block quantisers of DeepSeek-V4.1-Flash activations and KV caches over [rows, cols] bf16
// matrices with row strides: one params struct per operation, shared by the CPU body
// (cpu/quant_cpu.cc, built on common/formats) and the CUDA launchers (cuda/quant_launch.cu).
// Both produce the same bytes as common/formats/block_quant.h, bit for bit (see README.md).
//
//   format                       block  codes per row    scales per row   used for
//   kFp8E4m3Ue8m0B32              32    cols bytes       cols/32 (UE8M0)  activations, SWA KV
//   kFp4E2m1E4m3B16               16    cols/2 bytes     cols/16 (E4M3)   main (compressed) KV
//   kFp4E2m1Ue8m0B32              32    cols/2 bytes     cols/32 (UE8M0)  index K and Q
//
// Common contract for every function below:
// - bf16 values are their uint16 bit patterns; strides count elements of the pointer's type
//   (bf16 elements for x/out, bytes for codes/scales). Row r starts at base + r * stride.
// - cols must be a multiple of the format's block; each stride must be >= the row's extent.
//   rows == 0 or cols == 0 is a no-op. Pointers must be non-null otherwise.
// - Input and output buffers must not overlap, except QDQ in place (out == x, same stride).
//   codes and scales may interleave (serving rows do), but no byte may be written twice.
// - Errors: InvalidArgumentError for any violated precondition, detected before anything is
//   read or written (for GPU launchers: before anything is launched).
// - Ownership: callers own all buffers; nothing is allocated, not even on the GPU path.
// - Threading: CPU functions are thread-safe for disjoint outputs. GPU launchers enqueue work on
//   `stream` and return at once; buffers must stay valid until the stream passes the kernel.
//   CUDA launch failures are broken invariants and abort the process (CUDA_CHECK).
// This header includes no CUDA header; CUstream_st* is cudaStream_t (nullptr: legacy stream).
#pragma once

#include <cstdint>

#include "absl/status/status.h"

struct CUstream_st;

namespace flashserve::kernels::quant {

enum class BlockFormat : uint8_t {
  kFp8E4m3Ue8m0B32 = 0,  // formats::QuantizeFp8Ue8m0B32
  kFp4E2m1E4m3B16 = 1,   // formats::QuantizeFp4E4m3B16
  kFp4E2m1Ue8m0B32 = 2,  // formats::QuantizeFp4Ue8m0B32
};

// Short name for messages, e.g. "Fp8E4m3Ue8m0B32" ("invalid" for values outside the enum).
const char* BlockFormatName(BlockFormat format);
// Values per scale byte (32 or 16), or 0 for an invalid enum value.
int64_t BlockSize(BlockFormat format);
// Code bytes for `cols` values (cols for FP8, cols/2 for FP4).
int64_t CodeBytes(BlockFormat format, int64_t cols);
// Scale bytes for `cols` values (cols / block).
int64_t ScaleBytes(BlockFormat format, int64_t cols);

// Quantise: codes and scales of each row of x.
struct QuantizeParams {
  BlockFormat format = BlockFormat::kFp8E4m3Ue8m0B32;
  int64_t rows = 0;
  int64_t cols = 0;             // values per row, a multiple of BlockSize(format)
  const uint16_t* x = nullptr;  // bf16 input, row r at x + r * x_stride
  int64_t x_stride = 0;         // elements, >= cols
  uint8_t* codes = nullptr;     // CodeBytes(format, cols) bytes per row, FP4 even value low nibble
  int64_t codes_stride = 0;     // bytes, >= CodeBytes(format, cols)
  uint8_t* scales = nullptr;    // ScaleBytes(format, cols) bytes per row
  int64_t scales_stride = 0;    // bytes, >= ScaleBytes(format, cols)
  // Optional: the values the codes decode to (bf16, = Dequantize of the codes and scales written,
  // = Qdq of x), written by the same pass, so a caller that keeps a bf16 mirror of what it
  // quantised needs no second launch. May be x itself (same stride: in place); must not overlap
  // codes or scales.
  uint16_t* qdq_out = nullptr;
  int64_t qdq_stride = 0;  // elements, >= cols
};

// Dequantise: out = bf16(value(code) * scale) for each value.
struct DequantizeParams {
  BlockFormat format = BlockFormat::kFp8E4m3Ue8m0B32;
  int64_t rows = 0;
  int64_t cols = 0;
  const uint8_t* codes = nullptr;
  int64_t codes_stride = 0;  // bytes, >= CodeBytes(format, cols)
  const uint8_t* scales = nullptr;
  int64_t scales_stride = 0;  // bytes, >= ScaleBytes(format, cols)
  uint16_t* out = nullptr;    // bf16 output, row r at out + r * out_stride
  int64_t out_stride = 0;     // elements, >= cols
};

// Quantise-dequantise (bf16 in, bf16 out): out = Dequantize(Quantize(x)). In place allowed.
struct QdqParams {
  BlockFormat format = BlockFormat::kFp8E4m3Ue8m0B32;
  int64_t rows = 0;
  int64_t cols = 0;
  const uint16_t* x = nullptr;
  int64_t x_stride = 0;  // elements, >= cols
  uint16_t* out = nullptr;
  int64_t out_stride = 0;  // elements, >= cols; equal to x_stride when out == x
};

// The serving-row caches of common/formats/kv_row.h (layout in docs/kv_layout.md): one row per
// token, its codes then its scales, no padding. 528 / 288 / 68 bytes at 512 / 512 / 128 channels.
enum class KvRowKind : uint8_t {
  kSwaKv = 0,   // kFp8E4m3Ue8m0B32, formats::SwaKvRowBytes
  kMainKv = 1,  // kFp4E2m1E4m3B16, formats::MainKvRowBytes
  kIndexK = 2,  // kFp4E2m1Ue8m0B32, formats::IndexKRowBytes
};

// The block format a row kind stores (kFp8E4m3Ue8m0B32 for an invalid enum value).
BlockFormat KvRowFormat(KvRowKind kind);
// Bytes of one row of `channels` channels, and the offset of its scale bytes.
int64_t KvRowBytes(KvRowKind kind, int64_t channels);
int64_t KvRowScaleOffset(KvRowKind kind, int64_t channels);

// Encode: row r of x (channels values) becomes the serving row at rows_out + r * row_stride.
struct EncodeRowsParams {
  KvRowKind kind = KvRowKind::kSwaKv;
  int64_t rows = 0;
  int64_t channels = 0;  // a multiple of the kind's block
  const uint16_t* x = nullptr;
  int64_t x_stride = 0;  // elements, >= channels
  uint8_t* rows_out = nullptr;
  int64_t row_stride = 0;  // bytes, >= KvRowBytes(kind, channels) (equal: packed cache)
  // Optional: the row's decoded values (= DecodeRows of the row written), in the same pass
  // (QuantizeParams::qdq_out).
  uint16_t* decoded_out = nullptr;
  int64_t decoded_stride = 0;  // elements, >= channels
};

// Decode: the serving row at rows_in + r * row_stride becomes row r of out.
struct DecodeRowsParams {
  KvRowKind kind = KvRowKind::kSwaKv;
  int64_t rows = 0;
  int64_t channels = 0;
  const uint8_t* rows_in = nullptr;
  int64_t row_stride = 0;  // bytes, >= KvRowBytes(kind, channels)
  uint16_t* out = nullptr;
  int64_t out_stride = 0;  // elements, >= channels
};

// Validation shared by both bodies (what the functions below check first). Cost O(1).
absl::Status Validate(const QuantizeParams& p);
absl::Status Validate(const DequantizeParams& p);
absl::Status Validate(const QdqParams& p);
// Row params are validated (row_stride large enough, channels whole blocks, x/out not
// overlapping the rows) and converted into the equivalent matrix params: codes at the row start,
// scales at KvRowScaleOffset, both with stride row_stride.
absl::Status ToQuantizeParams(const EncodeRowsParams& p, QuantizeParams* out);
absl::Status ToDequantizeParams(const DecodeRowsParams& p, DequantizeParams* out);

// ---- CPU body (cpu/quant_cpu.cc; target fs_kernels_quant). Cost O(rows * cols). ----
absl::Status QuantizeCpu(const QuantizeParams& p);
absl::Status DequantizeCpu(const DequantizeParams& p);
absl::Status QdqCpu(const QdqParams& p);
absl::Status EncodeRowsCpu(const EncodeRowsParams& p);
absl::Status DecodeRowsCpu(const DecodeRowsParams& p);

// ---- CUDA launchers (cuda/quant_launch.cu; target fs_kernels_quant_cuda, FLASHSERVE_CUDA only).
// All pointers are device pointers (or managed memory). Besides Validate's checks, the GPU path
// needs rows * cols / 8 < 2^31 (InvalidArgumentError otherwise). Alignment is not required:
// 16-byte aligned bf16 rows and 4-byte aligned code rows take the vectorised path, anything else
// a scalar one with the same results. Cost: one kernel launch; 0.6-0.88 of copy bandwidth
// on an H200 (README.md).
absl::Status LaunchQuantize(const QuantizeParams& p, CUstream_st* stream);
absl::Status LaunchDequantize(const DequantizeParams& p, CUstream_st* stream);
absl::Status LaunchQdq(const QdqParams& p, CUstream_st* stream);
absl::Status LaunchEncodeRows(const EncodeRowsParams& p, CUstream_st* stream);
absl::Status LaunchDecodeRows(const DecodeRowsParams& p, CUstream_st* stream);

}  // namespace flashserve::kernels::quant
