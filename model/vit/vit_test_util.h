// Test helpers for model/vit: the v41-tiny checkpoint and its prepared Linears (loaded once per
// test binary), golden / cpu_run tensors as bf16 bits, and agreement metrics.
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "model/runtime/prepared_model.h"
#include "model/weights/loader.h"

namespace flashserve::model::vit::testing {

inline constexpr char kFixtureDir[] = "tests/conformance/data/v41-tiny";

// The fixture checkpoint and its PrepareModel output, built on first use and kept for the
// process (CHECK-fails if the fixture cannot be loaded).
const LoadedCheckpoint& TinyCheckpoint();
const PreparedModel& TinyPrepared();

// An fp32 tensor of `file` (golden.safetensors, cpu_run.safetensors) whose values are bf16
// values widened, as bf16 bits; CHECKs the shape and that every value is exactly a bf16.
std::vector<uint16_t> ReadBf16ValuedTensor(const std::string& file, const std::string& name,
                                           std::vector<int64_t> shape);

struct Agreement {
  double rel_rms = 0;  // sqrt(Σ(a−b)² / Σb²)
  double max_abs = 0;
  int64_t mismatches = 0;  // elements whose bits differ
  int64_t count = 0;
};
// `got` against `want`, both bf16 bits of the same size.
Agreement Compare(std::span<const uint16_t> got, std::span<const uint16_t> want);
std::string ToString(const Agreement& a);

}  // namespace flashserve::model::vit::testing
