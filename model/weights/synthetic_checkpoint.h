// A checkpoint with seeded random weights for any valid config, in the official format (the
// tensor list of ExpectedTensors, FP8 / FP4 weights quantised with the reference quantisers):
// for benches and tests that need a model whose shape differs from the bundled fixture, e.g. the
// released layer schedule at small widths. The values follow the fixture's recipe (README of
// tests/conformance/data/v41-tiny): residual-dominant output projections so that deep stacks stay
// numerically tame; norms are 1, mHC scales 1, biases and sinks 0.
#pragma once

#include <cstdint>
#include <string>

#include "absl/status/status.h"
#include "model/config/model_config.h"

namespace flashserve::model {

// Writes DIR/config.json (flat) and DIR/model.safetensors. The config must validate and have no
// Engram layers (their tables need a tokenizer-derived vocabulary). Errors: InvalidArgument for
// such a config; file errors. Cost: O(parameters).
absl::Status WriteSyntheticCheckpoint(const ModelConfig& config, const std::string& dir,
                                      uint64_t seed);

}  // namespace flashserve::model
