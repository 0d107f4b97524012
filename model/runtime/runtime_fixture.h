// Test-only access to the v41-tiny fixture for the runtime tests: the loaded model, the prompts
// and greedy tokens of golden.json, and tensors of the golden / cpu_run / variant files. Loaders
// abort (CHECK) when a fixture file is missing or malformed: a test cannot run without them.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "common/base/thread_pool.h"
#include "common/safetensors/safetensors.h"
#include "model/runtime/cpu_model.h"
#include "model/runtime/prepared_model.h"
#include "model/weights/loader.h"

namespace flashserve::model::testing {

inline constexpr char kTinyDir[] = "tests/conformance/data/v41-tiny";

// The tiny model, loaded once per process (shared by every test of a binary).
struct TinyModel {
  std::unique_ptr<LoadedCheckpoint> checkpoint;
  std::unique_ptr<PreparedModel> prepared;
  std::unique_ptr<ThreadPool> pool;
};
const TinyModel& Tiny();
// A fresh CpuModel over Tiny() (each test gets its own workspace).
std::unique_ptr<CpuModel> MakeTinyModel(kernels::LinearMode mode = kernels::LinearMode::kFast,
                                        int64_t max_tokens = 256,
                                        bool reference_stale_index_keys = false);

struct GoldenPrompt {
  std::vector<int32_t> ids;            // prompt ids (image span expanded)
  std::vector<int32_t> greedy_tokens;  // 13: prefill argmax, then decode steps 1..12
  std::vector<std::vector<int32_t>> spec_out_ids;  // [12][6]
  std::vector<int8_t> token_types;     // c only: -1 text, else the span slot type
  int64_t image_start = -1;
};
GoldenPrompt LoadPrompt(const std::string& name);
// golden.json "agreement" → cpu_free_running_vs_golden → own_greedy_tokens / variant tokens.
std::vector<int32_t> CpuRunGreedyTokens(const std::string& name);
std::vector<int32_t> VariantOwnKeysGreedyTokens();

const safetensors::SafetensorsFile& Golden();
const safetensors::SafetensorsFile& CpuRun();
const safetensors::SafetensorsFile& VariantOwnKeys();
// A tensor as fp32 (F32 and BF16 accepted) / as int64 (I64, I32).
std::vector<float> Floats(const safetensors::SafetensorsFile& f, const std::string& name);
std::vector<int64_t> Ints(const safetensors::SafetensorsFile& f, const std::string& name);

// Embedding rows for prompt c's image span, computed from image.png through the preprocessing,
// the ViT and the aligner (model/vit); CHECKs that the expanded ids equal the golden prompt.
// bf16 [n, dim], rows outside the span zero; image[t] = 1 inside the span.
void ImageSpanRows(const GoldenPrompt& p, std::vector<uint16_t>* rows,
                   std::vector<uint8_t>* image);

struct Compare {
  double rel_rms = 0, max_abs = 0;
  int argmax_ref = -1, argmax_got = -1;
};
Compare CompareRows(const float* got, const float* ref, int64_t n);

}  // namespace flashserve::model::testing
