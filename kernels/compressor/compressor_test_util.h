// Test helpers for kernels/compressor: a compressor layer built from bf16 weights, a runner for
// CompressCpu, the fp32 scalar recipe (what the reference computes, written plainly) and a
// double-precision reference.
#pragma once

#include <cstdint>
#include <memory>
#include <random>
#include <vector>

#include "kernels/compressor/compressor.h"

namespace flashserve::kernels::compressor_test {

// A compressor layer: bf16 weights [C, D] (+ gate for ratio >= 2), bf16 norm weight [C].
struct Layer {
  int64_t ratio = 0, c = 0, d = 0;
  std::vector<uint16_t> wkv, wgate, norm;
  std::unique_ptr<PreparedLinear> wkv_lin, wgate_lin;
  CompressorWeights weights;
};

// Builds the PreparedLinears (kF32 upcast copies when `f32` is true, else kBf16) and the weights.
std::unique_ptr<Layer> MakeLayer(int64_t ratio, int64_t c, int64_t d, std::vector<uint16_t> wkv,
                                 std::vector<uint16_t> wgate, std::vector<uint16_t> norm,
                                 bool f32 = true);
// Random weights (uniform ±scale / sqrt(d) for wkv, ±2·scale / sqrt(d) for wgate; norm ~ 1).
std::unique_ptr<Layer> RandomLayer(int64_t ratio, int64_t c, int64_t d, uint32_t seed,
                                   bool f32 = true);
std::vector<uint16_t> RandomBf16(int64_t n, float lo, float hi, std::mt19937& rng);

// Output of a compression run: latents [groups, C] and their group indices.
struct Rows {
  std::vector<uint16_t> latent;
  std::vector<int64_t> index;
};

// Runs CompressCpu over x [n, D] (row stride x_stride) split into calls of the given sizes
// (summing to n), starting at `start_pos` with `state` (a fresh one when null). Fails the test
// on any error.
Rows RunChunks(const Layer& layer, const uint16_t* x, int64_t x_stride, int64_t n,
               const std::vector<int64_t>& sizes, int64_t start_pos = 0,
               CompressorState* state = nullptr, ThreadPool* pool = nullptr);

// fp32 scalar recipe over x [n, D] from position 0 (n need not be a multiple of ratio; only full
// groups are returned). cast_first = false normalises the fp32 pooled vector instead (the order
// the reference does NOT use).
std::vector<uint16_t> RecipeCompress(const Layer& layer, const uint16_t* x, int64_t x_stride,
                                     int64_t n, bool cast_first = true);
// The fp32 gate-less GEMM row of the recipe: Σ_k x_k·w_k in ascending k, fp32.
float RecipeDot(const uint16_t* x, const uint16_t* w, int64_t d);

// Double-precision reference (bf16 rounding of the pooled / GEMM value kept, computed from the
// double value), returned as doubles [groups, C].
std::vector<double> DoubleCompress(const Layer& layer, const uint16_t* x, int64_t x_stride,
                                   int64_t n);

// bf16 ulp at |v| (normal range).
double UlpBf16(double v);

// The projections of n tokens, fp32 [n, C] each: kv = x·wkv^T, score = x·wgate^T (ratio >= 2),
// and at ratio 1 also the bf16 GEMM output kv_bf16.
struct Projections {
  int64_t ratio = 0, c = 0, n = 0;
  std::vector<float> kv, score;
  std::vector<uint16_t> kv_bf16;
};

// As CompressCpu computes them (LinearCpu in the layer's mode).
Projections Project(const Layer& layer, const uint16_t* x, int64_t x_stride, int64_t n);
// Random values as a GEMM leaves them: kv uniform in ±2, score uniform in ±4 (kv_bf16 = bf16(kv)).
Projections RandomProjections(int64_t ratio, int64_t c, int64_t n, uint32_t seed);

// Runs CompressProjectedCpu over the projections split into calls of `sizes` (summing to pr.n),
// from `start_pos` with `state` (a fresh one when null); bf16 = use kv_bf16 (ratio 1). Fails the
// test on any error.
Rows RunProjectedChunks(const Projections& pr, const uint16_t* norm,
                        const std::vector<int64_t>& sizes, bool bf16 = false, int64_t start_pos = 0,
                        CompressorState* state = nullptr, ThreadPool* pool = nullptr);

}  // namespace flashserve::kernels::compressor_test
