// MoeCudaParams::front_programmatic (session 78): the fused front launched as a programmatic
// dependent of the kernel ahead must read the logits and x only after that kernel has finished.
// The kernel ahead is LaunchLateCopy (kernels/common late_writer.h: it lets its dependents start
// at once and writes the logits and x late); the layer's output must equal a plain call's on the
// same inputs, bit for bit, eagerly and replayed in a CUDA graph, at 1 and 8 tokens (the fused
// front's range), with and without the TMA ring's early up stage.
#include <cstdint>
#include <cstring>
#include <vector>

#include "common/formats/bf16.h"
#include "gtest/gtest.h"
#include "kernels/common/gpu_test_util.h"
#include "kernels/common/late_writer.h"
#include "kernels/moe/moe.h"
#include "kernels/moe/moe_cuda.h"
#include "kernels/moe/moe_gpu_test_util.h"
#include "kernels/moe/moe_test_util.h"

namespace flashserve::kernels {
namespace {

constexpr int64_t kD = 256, kTopK = 2;
constexpr uint64_t kDelayNs = 30000;  // the writer's delay: far longer than the front's start

TEST(MoeGpuFrontPdlTest, ProgrammaticFrontReadsAfterTheKernelAhead) {
  FS_SKIP_WITHOUT_GPU();
  moe_test::LayerSpec spec;  // E 8, D 256, I 128
  const auto dev = moe_test::GenerateDeviceExperts(spec, {}, {});
  for (const int64_t m : {1, 8}) {
    for (const bool early_ring : {false, true}) {
      SCOPED_TRACE(::testing::Message() << "m " << m << " early ring " << early_ring);
      // One block of inputs, logits then x, so that one late copy writes both.
      const std::vector<float> logits =
          moe_test::RandomUniform(m * spec.n_experts, -2.0, 2.0, 21 + m);
      std::vector<uint16_t> x(m * kD);
      const std::vector<float> xf = moe_test::RandomUniform(x.size(), -1.0, 1.0, 22 + m);
      for (size_t i = 0; i < x.size(); ++i) x[i] = formats::FloatToBf16Bits(xf[i]);
      const size_t logit_bytes = logits.size() * 4, x_bytes = x.size() * 2;
      ASSERT_EQ(logit_bytes % 16, 0u);
      std::vector<uint8_t> inputs(logit_bytes + x_bytes);
      std::memcpy(inputs.data(), logits.data(), logit_bytes);
      std::memcpy(inputs.data() + logit_bytes, x.data(), x_bytes);
      DeviceBuffer src = ToDevice(inputs), dst(inputs.size());
      DeviceBuffer ws(*MoeCudaWorkspaceBytes(dev->view, m, kTopK, nullptr));
      DeviceBuffer y_ref(m * kD * 2), y(m * kD * 2);

      MoeCudaParams p;
      p.weights = &dev->view;
      p.options.top_k = kTopK;
      p.m = m;
      p.x_stride = kD;
      p.y_stride = kD;
      p.early_ring = early_ring;
      p.workspace = ws.get();
      p.workspace_bytes = ws.bytes();
      // The reference: a plain call on inputs already in place.
      MoeCudaParams ref = p;
      ref.logits = src.get<float>();
      ref.x = reinterpret_cast<const uint16_t*>(src.get<uint8_t>() + logit_bytes);
      ref.y = y_ref.get<uint16_t>();
      ASSERT_TRUE(MoeCuda(ref, nullptr).ok());
      CUDA_CHECK(cudaDeviceSynchronize());
      const std::vector<uint16_t> want = ToHost<uint16_t>(y_ref, m * kD);

      MoeCudaParams q = p;
      q.logits = dst.get<float>();
      q.x = reinterpret_cast<const uint16_t*>(dst.get<uint8_t>() + logit_bytes);
      q.y = y.get<uint16_t>();
      q.front_programmatic = true;
      cudaStream_t stream;
      CUDA_CHECK(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
      auto enqueue = [&] {
        LaunchLateCopy(dst.get(), src.get(), inputs.size(), kDelayNs, stream);
        const absl::Status s = MoeCuda(q, stream);
        ASSERT_TRUE(s.ok()) << s;
      };
      // Eagerly, then as a graph replayed twice; the inputs are poisoned before each run.
      for (int run = 0; run < 3; ++run) {
        SCOPED_TRACE(::testing::Message() << "run " << run << (run == 0 ? " eager" : " graph"));
        CUDA_CHECK(cudaMemsetAsync(dst.get(), 0xFF, dst.bytes(), stream));  // NaN logits and x
        CUDA_CHECK(cudaMemsetAsync(y.get(), 0, y.bytes(), stream));
        CUDA_CHECK(cudaStreamSynchronize(stream));
        if (run == 0) {
          enqueue();
        } else {
          static cudaGraphExec_t exec = nullptr;
          if (run == 1) exec = CaptureGraph(stream, enqueue);
          CUDA_CHECK(cudaGraphLaunch(exec, stream));
          if (run == 2) {
            CUDA_CHECK(cudaStreamSynchronize(stream));
            CUDA_CHECK(cudaGraphExecDestroy(exec));
          }
        }
        CUDA_CHECK(cudaStreamSynchronize(stream));
        EXPECT_EQ(ToHost<uint16_t>(y, m * kD), want);
      }
      CUDA_CHECK(cudaStreamDestroy(stream));
    }
  }
}

}  // namespace
}  // namespace flashserve::kernels
