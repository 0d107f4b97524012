// Helpers shared by the norm_rope tests: seeded bf16 data, bit and ulp arithmetic, golden.json.
#pragma once

#include <cstdint>
#include <vector>

#include "absl/status/statusor.h"
#include "nlohmann/json.hpp"

namespace flashserve::kernels::testing {

// n bf16 values ~ N(0, scale^2), rounded from fp32, from a fixed seed (deterministic on one
// standard library). No zeros: they are nudged to the smallest normal bf16 of either sign.
std::vector<uint16_t> RandomBf16(int64_t n, float scale, uint32_t seed);

// n fp32 values uniform in [lo, hi).
std::vector<float> RandomFloats(int64_t n, float lo, float hi, uint32_t seed);

uint32_t FloatBits(float f);
float BitsToFloat(uint32_t bits);

// Number of fp32 values strictly between a and b, plus one when they differ (0 when a == b).
// Both finite and of the same sign.
int64_t UlpDistance(float a, float b);

// Spacing of bf16 values at |v| (2^(e-7) for v in [2^e, 2^(e+1)); the subnormal spacing below).
double Bf16Ulp(double v);

// tests/conformance/data/v41-tiny/golden.json, found from $FS_SOURCE_DIR or the working directory.
absl::StatusOr<nlohmann::json> LoadGoldenJson();

}  // namespace flashserve::kernels::testing
