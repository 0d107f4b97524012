// The batched post-GEMM compression on the host: CompressProjectedBatchCpu equals one
// CompressProjectedCpu per sequence, and ValidateCompressProjectedBatch (shared with
// LaunchCompressProjectedBatch) names the first bad sequence and changes nothing.
#include <cstdint>
#include <random>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/match.h"
#include "gtest/gtest.h"
#include "kernels/compressor/compressor.h"
#include "kernels/compressor/compressor_test_util.h"

namespace flashserve::kernels {
namespace {

using compressor_test::Projections;
using compressor_test::RandomBf16;
using compressor_test::RandomProjections;

constexpr int64_t kC = 32;
constexpr int64_t kB = 5;

// Sequence b: tokens s[b] from row in_off at position pos[b], latents at rows out_off.
struct Batch {
  Batch(int64_t ratio, std::vector<int64_t> tokens, std::vector<int64_t> positions)
      : s(std::move(tokens)), pos(std::move(positions)) {
    std::mt19937 rng(5);
    norm = RandomBf16(kC, 0.5f, 1.5f, rng);
    int64_t rows_in = 0, rows_out = 0;
    std::vector<int64_t> in_off, out_off;
    for (int64_t t : s) {
      in_off.push_back(rows_in);
      out_off.push_back(rows_out);
      rows_in += t;
      rows_out += CompressMaxGroups(ratio, t);
    }
    pr = RandomProjections(ratio, kC, rows_in, 9);
    latent.assign(static_cast<size_t>((rows_out + 1) * kC), 0);
    index.assign(static_cast<size_t>(rows_out + 1), -1);
    emitted.assign(s.size(), -1);
    for (size_t b = 0; b < s.size(); ++b) {
      CompressProjectedParams p;
      p.ratio = ratio;
      p.channels = kC;
      p.start_pos = pos[b];
      p.tokens = s[b];
      p.kv = pr.kv.data() + in_off[b] * kC;
      p.kv_stride = kC;
      p.score = ratio > 1 ? pr.score.data() + in_off[b] * kC : nullptr;
      p.score_stride = kC;
      p.norm_weight = norm.data();
      p.latent = latent.data() + out_off[b] * kC;
      p.latent_stride = kC;
      p.latent_capacity = CompressMaxGroups(ratio, s[b]);
      p.group_index = index.data() + out_off[b];
      p.groups_emitted = &emitted[b];
      params.push_back(p);
    }
  }
  CompressProjectedBatchParams Params() const {
    return {params.data(), static_cast<int64_t>(params.size())};
  }
  std::vector<int64_t> s, pos;
  std::vector<uint16_t> norm;
  Projections pr;
  std::vector<uint16_t> latent;
  std::vector<int64_t> index, emitted;
  std::vector<CompressProjectedParams> params;
};

std::vector<CompressorState> States(int64_t ratio, const std::vector<int64_t>& pending,
                                    const std::vector<int64_t>& next_pos) {
  std::vector<CompressorState> out;
  std::mt19937 rng(3);
  std::uniform_real_distribution<float> u(-2.0f, 2.0f);
  for (size_t b = 0; b < pending.size(); ++b) {
    CompressorState st = MakeCompressorState(ratio, kC).value();
    for (float& v : st.kv) v = u(rng);
    for (float& v : st.score) v = u(rng);
    st.pending = pending[b];
    st.next_pos = next_pos[b];
    out.push_back(st);
  }
  return out;
}

std::vector<CompressorState*> Ptrs(std::vector<CompressorState>& states) {
  std::vector<CompressorState*> out;
  for (auto& s : states) out.push_back(&s);
  return out;
}

TEST(CompressorBatch, CpuBatchEqualsSingleCalls) {
  for (int64_t ratio : {1, 2, 4}) {
    const std::vector<int64_t> pending =
        ratio == 1 ? std::vector<int64_t>{0, 0, 0, 0, 0} : std::vector<int64_t>{1, 0, 1, 0, 1};
    const std::vector<int64_t> pos = {ratio * 10 + pending[0], ratio * 3, ratio * 7 + pending[2], 0,
                                      ratio * 2 + pending[4]};
    const std::vector<int64_t> tokens = {1, 1, 5, 0, 2};
    Batch batched(ratio, tokens, pos), single(ratio, tokens, pos);
    std::vector<CompressorState> sb = States(ratio, pending, pos), ss = sb;
    std::vector<CompressorState*> pb = Ptrs(sb);
    ASSERT_TRUE(CompressProjectedBatchCpu(batched.Params(), pb.data(), nullptr).ok());
    for (size_t b = 0; b < ss.size(); ++b) {
      ASSERT_TRUE(CompressProjectedCpu(single.params[b], &ss[b], nullptr).ok());
    }
    EXPECT_EQ(batched.latent, single.latent) << "ratio " << ratio;
    EXPECT_EQ(batched.index, single.index) << "ratio " << ratio;
    EXPECT_EQ(batched.emitted, single.emitted) << "ratio " << ratio;
    for (size_t b = 0; b < ss.size(); ++b) {
      EXPECT_EQ(sb[b].pending, ss[b].pending) << b;
      EXPECT_EQ(sb[b].next_pos, ss[b].next_pos) << b;
      EXPECT_EQ(sb[b].kv, ss[b].kv) << b;
      EXPECT_EQ(sb[b].score, ss[b].score) << b;
    }
    EXPECT_EQ(batched.emitted[3], 0);
  }
}

TEST(CompressorBatch, ValidationNamesTheFirstBadSequenceAndWritesNothing) {
  const std::vector<int64_t> pending = {1, 0, 1, 0, 1};
  const std::vector<int64_t> pos = {21, 6, 15, 0, 5};
  Batch batch(2, {1, 1, 1, 1, 1}, pos);
  std::vector<CompressorState> states = States(2, pending, pos);
  const std::vector<CompressorState> before = states;
  std::vector<CompressorState*> ptrs = Ptrs(states);
  auto expect_error = [&](absl::StatusCode code, const char* text) {
    const absl::Status s = CompressProjectedBatchCpu(batch.Params(), ptrs.data(), nullptr);
    EXPECT_EQ(s.code(), code) << s;
    EXPECT_TRUE(absl::StrContains(s.message(), text)) << s << " (want " << text << ")";
    for (size_t b = 0; b < states.size(); ++b) {
      EXPECT_EQ(states[b].pending, before[b].pending) << b;
      EXPECT_EQ(states[b].next_pos, before[b].next_pos) << b;
      EXPECT_EQ(states[b].kv, before[b].kv) << b;
      EXPECT_EQ(batch.emitted[b], -1) << b;
    }
    for (int64_t v : batch.index) EXPECT_EQ(v, -1);
  };
  batch.params[3].start_pos = 7;  // odd: does not follow an empty state
  expect_error(absl::StatusCode::kFailedPrecondition, "compressor batch: sequence 3: ");
  batch.params[3].start_pos = 0;
  batch.params[4].kv_stride = kC + 1;
  expect_error(absl::StatusCode::kInvalidArgument, "sequence 4: compressor: kv_stride differs");
  batch.params[4].kv_stride = kC;
  batch.params[2].norm_eps = 1e-6f;
  expect_error(absl::StatusCode::kInvalidArgument, "sequence 2: compressor: norm_eps differs");
  batch.params[2].norm_eps = batch.params[0].norm_eps;
  batch.params[1].latent_stride = kC + 2;
  expect_error(absl::StatusCode::kInvalidArgument, "sequence 1: compressor: latent_stride");
  batch.params[1].latent_stride = kC;
  ptrs[2] = nullptr;
  expect_error(absl::StatusCode::kInvalidArgument, "sequence 2: compressor: state is null");
  ptrs[2] = &states[2];
  CompressProjectedBatchParams p = batch.Params();
  p.batch = -1;
  EXPECT_TRUE(absl::StrContains(ValidateCompressProjectedBatch(p, ptrs.data()).message(), "batch"));
  p.batch = 5;
  p.sequences = nullptr;
  EXPECT_TRUE(
      absl::StrContains(ValidateCompressProjectedBatch(p, ptrs.data()).message(), "sequences"));
  p.sequences = batch.params.data();
  EXPECT_TRUE(absl::StrContains(
      ValidateCompressProjectedBatch(p, static_cast<CompressorState* const*>(nullptr)).message(),
      "states"));
  p.batch = 0;
  EXPECT_TRUE(
      ValidateCompressProjectedBatch(p, static_cast<CompressorState* const*>(nullptr)).ok());
  ASSERT_TRUE(CompressProjectedBatchCpu(batch.Params(), ptrs.data(), nullptr).ok());
  EXPECT_EQ(batch.emitted, (std::vector<int64_t>{1, 0, 1, 0, 1}));
}

// The device-state overload (what the GPU launcher runs) checks the same things; the state rows
// are neither read nor written, so host memory stands in for device memory here.
TEST(CompressorBatch, DeviceStateValidation) {
  std::vector<float> rows(static_cast<size_t>(kB * 2 * kC));
  std::vector<CompressorDeviceState> states;
  for (int64_t b = 0; b < kB; ++b) {
    states.push_back(
        MakeCompressorDeviceState(2, kC, rows.data() + b * 2 * kC, static_cast<size_t>(8 * kC))
            .value());
  }
  std::vector<CompressorDeviceState*> ptrs;
  for (auto& s : states) ptrs.push_back(&s);
  Batch batch(2, {1, 2, 1, 1, 1}, {0, 2, 4, 6, 8});
  EXPECT_TRUE(ValidateCompressProjectedBatch(batch.Params(), ptrs.data()).ok());
  states[3].ratio = 4;
  absl::Status s = ValidateCompressProjectedBatch(batch.Params(), ptrs.data());
  EXPECT_TRUE(absl::StrContains(s.message(), "sequence 3: compressor: state ratio")) << s;
  states[3].ratio = 2;
  states[1].score = nullptr;
  s = ValidateCompressProjectedBatch(batch.Params(), ptrs.data());
  EXPECT_TRUE(absl::StrContains(s.message(), "sequence 1: compressor: state kv / score")) << s;
  states[1].score = states[1].kv + kC;
  batch.params[4].ratio = 4;
  s = ValidateCompressProjectedBatch(batch.Params(), ptrs.data());
  EXPECT_TRUE(absl::StrContains(s.message(), "sequence 4: compressor: state")) << s;
}

}  // namespace
}  // namespace flashserve::kernels
