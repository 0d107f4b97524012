// The encoder against the v41-tiny fixture (prompt c: 98x70 image, 5 x 7 patches, 2 x 3 aligner
// rows): golden.safetensors (the reference on GPU) and cpu_run.safetensors (the same reference on
// CPU). The README's CPU-vs-GPU drift is 0.3 % (ViT) / 0.6 % (aligner) rel-RMS; we require 1 %.
#include <iostream>
#include <memory>
#include <vector>

#include "common/base/thread_pool.h"
#include "gtest/gtest.h"
#include "model/vit/vision_encoder.h"
#include "model/vit/vit_test_util.h"

namespace flashserve::model::vit {
namespace {

using testing::Agreement;
using testing::Compare;
using testing::ReadBf16ValuedTensor;
using testing::ToString;

constexpr int kNh = 5, kNw = 7, kPatches = 35, kVisionDim = 64, kRows = 6, kDim = 256;

std::unique_ptr<VisionEncoder> MakeEncoder(VisionEncoderOptions options, ThreadPool* pool) {
  const LoadedCheckpoint& ckpt = testing::TinyCheckpoint();
  auto e = VisionEncoder::Create(ckpt.config(), *ckpt.weights().vision,
                                 *testing::TinyPrepared().vision, options, pool);
  CHECK(e.ok()) << e.status();
  return std::move(*e);
}

struct Outputs {
  std::vector<uint16_t> vit = std::vector<uint16_t>(kPatches * kVisionDim);
  std::vector<uint16_t> aligner = std::vector<uint16_t>(kRows * kDim);
};

Outputs EncodeFixtureImage(VisionEncoder& e) {
  const std::vector<uint16_t> patches =
      ReadBf16ValuedTensor("golden.safetensors", "c.patches", {kPatches, 3, 14, 14});
  Outputs out;
  const absl::Status s = e.Encode(patches, kNh, kNw, out.vit, out.aligner);
  CHECK(s.ok()) << s;
  return out;
}

class VisionEncoderFixtureTest : public ::testing::TestWithParam<kernels::LinearMode> {};

TEST_P(VisionEncoderFixtureTest, MatchesGoldenAndCpuRun) {
  ThreadPool pool(2);
  VisionEncoderOptions options;
  options.linear_mode = GetParam();
  std::unique_ptr<VisionEncoder> e = MakeEncoder(options, &pool);
  const Outputs out = EncodeFixtureImage(*e);

  const auto golden_vit = ReadBf16ValuedTensor("golden.safetensors", "c.vit_out", {35, 64});
  const auto golden_al = ReadBf16ValuedTensor("golden.safetensors", "c.aligner_out", {6, 256});
  const auto cpu_vit = ReadBf16ValuedTensor("cpu_run.safetensors", "c.vit_out", {35, 64});
  const auto cpu_al = ReadBf16ValuedTensor("cpu_run.safetensors", "c.aligner_out", {6, 256});

  const Agreement vit_golden = Compare(out.vit, golden_vit);
  const Agreement vit_cpu = Compare(out.vit, cpu_vit);
  const Agreement al_golden = Compare(out.aligner, golden_al);
  const Agreement al_cpu = Compare(out.aligner, cpu_al);
  std::cout << "vit vs golden:      " << ToString(vit_golden) << "\n"
            << "vit vs cpu_run:     " << ToString(vit_cpu) << "\n"
            << "aligner vs golden:  " << ToString(al_golden) << "\n"
            << "aligner vs cpu_run: " << ToString(al_cpu) << "\n"
            << "(reference cpu_run vs golden: vit " << ToString(Compare(cpu_vit, golden_vit))
            << "; aligner " << ToString(Compare(cpu_al, golden_al)) << ")\n";
  // The bar against the GPU golden run.
  EXPECT_LT(vit_golden.rel_rms, 0.01);
  EXPECT_LT(al_golden.rel_rms, 0.01);
  // Same arithmetic as the reference on CPU: bit-identical when measured (README.md); allow a
  // few flipped roundings (another libm's exp/erf, another sgemm kernel) but no drift.
  EXPECT_LT(vit_cpu.rel_rms, 1e-3);
  EXPECT_LT(al_cpu.rel_rms, 1e-3);
  EXPECT_LE(vit_cpu.mismatches, vit_cpu.count / 100);
  EXPECT_LE(al_cpu.mismatches, al_cpu.count / 100);
}

INSTANTIATE_TEST_SUITE_P(Modes, VisionEncoderFixtureTest,
                         ::testing::Values(kernels::LinearMode::kFast, kernels::LinearMode::kExact),
                         [](const auto& info) {
                           return info.param == kernels::LinearMode::kFast ? "Fast" : "Exact";
                         });

// The aligner alone, fed each run's own ViT output.
TEST(VisionAlignerFixtureTest, RecomputesEachRunsAlignerFromItsVitOutput) {
  std::unique_ptr<VisionEncoder> e = MakeEncoder({}, nullptr);
  for (const char* file : {"cpu_run.safetensors", "golden.safetensors"}) {
    const auto vit = ReadBf16ValuedTensor(file, "c.vit_out", {35, 64});
    const auto want = ReadBf16ValuedTensor(file, "c.aligner_out", {6, 256});
    std::vector<uint16_t> got(kRows * kDim);
    ASSERT_TRUE(e->RunAligner(vit, kNh, kNw, got).ok());
    const Agreement all = Compare(got, want);
    std::cout << file << ": aligner(own vit_out) " << ToString(all) << "\n";
    for (int r = 0; r < kRows; ++r) {
      const Agreement row =
          Compare(std::span(got).subspan(r * kDim, kDim), std::span(want).subspan(r * kDim, kDim));
      std::cout << "  row " << r << ": " << ToString(row) << "\n";
    }
    EXPECT_LT(all.rel_rms, 0.01) << file;
  }
}

// Which attention rounding recipe the runs used: the reference's math backend (fp32, kNone)
// should match best; the flash-style and bf16-math variants are measured for the README.
TEST(VisionSdpaRecipeTest, Fp32MathBackendMatchesBest) {
  const auto golden_vit = ReadBf16ValuedTensor("golden.safetensors", "c.vit_out", {35, 64});
  const auto cpu_vit = ReadBf16ValuedTensor("cpu_run.safetensors", "c.vit_out", {35, 64});
  double best_golden = 1e9, best_cpu = 1e9, none_golden = 0, none_cpu = 0;
  for (SdpaRounding r : {SdpaRounding::kNone, SdpaRounding::kProbabilitiesBf16,
                         SdpaRounding::kScoresAndProbabilitiesBf16}) {
    VisionEncoderOptions options;
    options.linear_mode = kernels::LinearMode::kExact;
    options.sdpa_rounding = r;
    std::unique_ptr<VisionEncoder> e = MakeEncoder(options, nullptr);
    const Outputs out = EncodeFixtureImage(*e);
    const Agreement g = Compare(out.vit, golden_vit);
    const Agreement c = Compare(out.vit, cpu_vit);
    std::cout << "sdpa rounding " << static_cast<int>(r) << ": vs golden " << ToString(g)
              << " | vs cpu_run " << ToString(c) << "\n";
    best_golden = std::min(best_golden, g.rel_rms);
    best_cpu = std::min(best_cpu, c.rel_rms);
    if (r == SdpaRounding::kNone) {
      none_golden = g.rel_rms;
      none_cpu = c.rel_rms;
    }
  }
  EXPECT_EQ(none_golden, best_golden);
  EXPECT_EQ(none_cpu, best_cpu);
}

}  // namespace
}  // namespace flashserve::model::vit
