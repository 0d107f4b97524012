// The transposed-products prototype (cuda/transposed_proto.h; wgmma_ws.md "Session 69") against
// the double-precision reference with the attention's tolerance (attention_test_util.h
// CountOutsideTolerance) and against LaunchSparseAttn's default body, over the released head
// shape (64 heads × 512): short, long and ragged lists, invalid entries, all-invalid rows and an
// empty list; and the consumer-side decode probe (cuda/ws_probe.h; "Session 70") against the
// wgmma-ws path bit for bit. Skips without a device.
#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <vector>

#include "gtest/gtest.h"
#include "kernels/attention/attention.h"
#include "kernels/attention/attention_gpu_test_util.h"
#include "kernels/attention/attention_test_util.h"
#include "kernels/attention/cuda/sparse_attn_path.h"
#include "kernels/attention/cuda/transposed_proto.h"
#include "kernels/attention/cuda/ws_probe.h"
#include "kernels/common/cuda_check.h"
#include "kernels/common/gpu_test_util.h"

namespace flashserve::kernels {
namespace {

using testing::AttnCase;

// Runs `c` on the device through the prototype (tproto; its SS variant with ss), the decode probe
// (probe = its placement, 1 to 3) or LaunchSparseAttn.
std::vector<uint16_t> RunOnDevice(const AttnCase& c, bool tproto, bool ss = false, int probe = 0) {
  std::vector<uint16_t> out;
  std::vector<uint8_t> unused;
  SparseAttnParams p = testing::MakeParams(c, nullptr, &out, &unused);
  DeviceBuffer dq = testing::ToDevice(c.q), dkv = testing::ToDevice(c.kv),
               didx = testing::ToDevice(c.indices), dsink = testing::ToDevice(c.sink);
  DeviceBuffer dout(std::max<size_t>(out.size() * 2, 16));
  DeviceBuffer dws(SparseAttnCudaWorkspaceBytes(c.heads, c.head_dim));
  // Poison the output: every element must be written.
  CUDA_CHECK(cudaMemset(dout.get(), 0x7F, dout.bytes()));
  p.q = dq.get<uint16_t>();
  p.kv = dkv.get<uint16_t>();
  p.indices = didx.get<int32_t>();
  p.attn_sink = dsink.get<float>();
  p.out = dout.get<uint16_t>();
  p.workspace = dws.get();
  p.workspace_bytes = dws.bytes();
  const absl::Status st =
      probe != 0 ? attention_internal::LaunchSparseAttnWsProbe(p, nullptr, probe)
      : tproto   ? attention_internal::LaunchSparseAttnTransposedProto(p, nullptr, ss)
                 : LaunchSparseAttn(p, nullptr);
  EXPECT_TRUE(st.ok()) << st;
  CUDA_CHECK(cudaDeviceSynchronize());
  if (!out.empty()) dout.CopyToHost(out.data(), out.size() * 2);
  return out;
}

void CheckCase(const AttnCase& c, const char* what) {
  const std::vector<uint16_t> base = RunOnDevice(c, false);
  std::vector<double> ref, mass;
  testing::DoubleReference(c, &ref, &mass);
  for (const bool ss : {false, true}) {
    const std::vector<uint16_t> got = RunOnDevice(c, true, ss);
    double worst = 0;
    EXPECT_EQ(testing::CountOutsideTolerance(got, ref, mass, &worst), 0)
        << what << (ss ? " (SS)" : "") << ": worst |out − ref| / bound " << worst;
    const int64_t diffs = testing::CountBitDiffs(got, base);
    std::printf("%s%s: %ld of %zu values differ in bits from LaunchSparseAttn; worst ratio %.3f\n",
                what, ss ? " (SS)" : "", long(diffs), got.size(), worst);
  }
}

TEST(SparseAttnTransposedProtoGpuTest, AgreesWithTheReference) {
  FS_SKIP_WITHOUT_GPU();
  CheckCase(testing::RandomCase(1, 64, 512, 4096, 640, 0.0, 11), "1 token, 640 entries");
  CheckCase(testing::RandomCase(5, 64, 512, 4096, 640, 0.1, 12), "5 tokens, 10% invalid");
  CheckCase(testing::RandomCase(3, 64, 512, 2048, 64, 0.0, 13), "one block");
  CheckCase(testing::RandomCase(3, 64, 512, 2048, 200, 0.2, 14), "ragged 200");
  CheckCase(testing::RandomCase(2, 64, 512, 8192, 2048, 0.05, 15), "32 blocks");
  CheckCase(testing::RandomCase(140, 64, 512, 4096, 640, 0.0, 16), "140 tokens");
}

TEST(SparseAttnTransposedProtoGpuTest, InvalidRowsAndEmptyListsGiveZero) {
  FS_SKIP_WITHOUT_GPU();
  AttnCase c = testing::RandomCase(4, 64, 512, 1024, 300, 0.0, 21);
  for (int64_t e = 0; e < c.width; ++e) c.indices[c.width + e] = -1;  // token 1: no valid entry
  for (int64_t e = 0; e < 128; ++e) c.indices[2 * c.width + e] = -1;  // token 2: two empty blocks
  for (const bool ss : {false, true}) {
    const std::vector<uint16_t> got = RunOnDevice(c, true, ss);
    for (int64_t i = 0; i < 64 * 512; ++i) ASSERT_EQ(got[64 * 512 + i], 0u) << i;
  }
  CheckCase(c, "invalid rows");
  AttnCase empty = testing::RandomCase(2, 64, 512, 64, 0, 0.0, 22);
  const std::vector<uint16_t> zero = RunOnDevice(empty, true);
  for (uint16_t v : zero) ASSERT_EQ(v, 0u);
}

TEST(SparseAttnTransposedProtoGpuTest, RejectsWhatItDoesNotTake) {
  AttnCase c = testing::RandomCase(1, 32, 512, 64, 64, 0.0, 31);
  std::vector<uint16_t> out;
  std::vector<uint8_t> ws;
  SparseAttnParams p = testing::MakeParams(c, nullptr, &out, &ws);
  EXPECT_EQ(attention_internal::LaunchSparseAttnTransposedProto(p, nullptr).code(),
            absl::StatusCode::kInvalidArgument);
}

// The probe only adds work that writes a sink: its output is the wgmma-ws path's, bit for bit.
TEST(SparseAttnWsProbeGpuTest, EqualsTheWsPath) {
  FS_SKIP_WITHOUT_GPU();
  struct Named {
    AttnCase c;
    const char* what;
  };
  const Named cases[] = {
      {testing::RandomCase(140, 64, 512, 4096, 640, 0.0, 41), "140 tokens, 640 entries"},
      {testing::RandomCase(130, 64, 512, 8192, 2000, 0.1, 42), "130 tokens, 2,000 entries"},
      {testing::RandomCase(70, 128, 512, 2048, 200, 0.2, 43), "70 tokens x 128 heads, ragged"},
  };
  attention_internal::SetSparseAttnCudaPathOverride(
      attention_internal::SparseAttnCudaPath::kWgmmaWs);
  for (const Named& n : cases) {
    const std::vector<uint16_t> base = RunOnDevice(n.c, false);
    for (const int placement : {1, 2, 3}) {
      const std::vector<uint16_t> got = RunOnDevice(n.c, false, false, placement);
      EXPECT_EQ(testing::CountBitDiffs(got, base), 0) << n.what << ", placement " << placement;
    }
  }
  attention_internal::SetSparseAttnCudaPathOverride(attention_internal::SparseAttnCudaPath::kAuto);
}

TEST(SparseAttnWsProbeGpuTest, RejectsWhatItDoesNotTake) {
  std::vector<uint16_t> out;
  std::vector<uint8_t> ws;
  const AttnCase few = testing::RandomCase(8, 64, 512, 1024, 640, 0.0, 44);  // would split
  SparseAttnParams p = testing::MakeParams(few, nullptr, &out, &ws);
  EXPECT_EQ(attention_internal::LaunchSparseAttnWsProbe(p, nullptr, 1).code(),
            absl::StatusCode::kInvalidArgument);
  const AttnCase odd = testing::RandomCase(256, 32, 512, 64, 64, 0.0, 45);  // 32 heads
  p = testing::MakeParams(odd, nullptr, &out, &ws);
  EXPECT_EQ(attention_internal::LaunchSparseAttnWsProbe(p, nullptr, 1).code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(attention_internal::LaunchSparseAttnWsProbe(p, nullptr, 4).code(),
            absl::StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace flashserve::kernels
