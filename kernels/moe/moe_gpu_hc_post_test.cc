// MoeCudaParams::hc_post (session 77): the mHC site's hc_post applied by the MoE's combine must
// give, bit for bit, what LaunchHcPost (kernels/mhc) writes from the layer's y — on the TMA
// ring's fused combine (1 and 8 tokens), on MoeCombineKernel after the ring's epilogue and after
// another GEMM (40 tokens), with y also written or not, in place (out == residual), with post /
// comb written on another stream behind hc_post_ready (eagerly and in a CUDA graph); and the
// validation of its fields.
#include <cstdint>
#include <string>
#include <vector>

#include "common/formats/bf16.h"
#include "gtest/gtest.h"
#include "kernels/common/gpu_test_util.h"
#include "kernels/mhc/mhc.h"
#include "kernels/moe/moe.h"
#include "kernels/moe/moe_cuda.h"
#include "kernels/moe/moe_gpu_test_util.h"
#include "kernels/moe/moe_test_util.h"

namespace flashserve::kernels {
namespace {

using formats::FloatToBf16Bits;

constexpr int64_t kD = 256, kTopK = 2, kS = kMhcStreams;

std::vector<uint16_t> Bf16(const std::vector<float>& v) {
  std::vector<uint16_t> b(v.size());
  for (size_t i = 0; i < v.size(); ++i) b[i] = FloatToBf16Bits(v[i]);
  return b;
}

struct HcCase {
  int64_t m;
  MoeCudaGemm gemm;
  bool ring_fused_combine;
};

TEST(MoeGpuHcPostTest, FusedHcPostEqualsCombineThenLaunchHcPost) {
  FS_SKIP_WITHOUT_GPU();
  moe_test::LayerSpec spec;  // E 8, D 256, I 128
  const auto dev = moe_test::GenerateDeviceExperts(spec, {}, {});
  const HcCase cases[] = {{1, MoeCudaGemm::kAuto, true},
                          {8, MoeCudaGemm::kAuto, true},
                          {8, MoeCudaGemm::kStreamRing, false},
                          {40, MoeCudaGemm::kAuto, true}};
  for (const HcCase& c : cases) {
    const int64_t m = c.m;
    SCOPED_TRACE(::testing::Message() << "m " << m << " gemm " << static_cast<int>(c.gemm)
                                      << " ring fused combine " << c.ring_fused_combine);
    const std::vector<float> logits =
        moe_test::RandomUniform(m * spec.n_experts, -2.0, 2.0, 11 + m);
    const std::vector<uint16_t> x = Bf16(moe_test::RandomUniform(m * kD, -1.0, 1.0, 12 + m));
    const std::vector<uint16_t> residual =
        Bf16(moe_test::RandomUniform(m * kS * kD, -3.0, 3.0, 13 + m));
    const std::vector<float> post = moe_test::RandomUniform(m * kS, 0.0, 2.0, 14 + m);
    const std::vector<float> comb = moe_test::RandomUniform(m * kS * kS, 0.0, 0.5, 15 + m);
    DeviceBuffer dl = ToDevice(logits), dx = ToDevice(x), dres = ToDevice(residual),
                 dpost = ToDevice(post), dcomb = ToDevice(comb);
    DeviceBuffer ws(*MoeCudaWorkspaceBytes(dev->view, m, kTopK, nullptr));
    const size_t y_bytes = m * kD * 2, out_bytes = m * kS * kD * 2;
    DeviceBuffer y_ref(y_bytes), out_ref(out_bytes), y(y_bytes), out(out_bytes),
        in_place(out_bytes);
    MoeCudaParams p;
    p.weights = &dev->view;
    p.options.top_k = kTopK;
    p.m = m;
    p.logits = dl.get<float>();
    p.x = dx.get<uint16_t>();
    p.x_stride = kD;
    p.y_stride = kD;
    p.gemm = c.gemm;
    p.ring_fused_combine = c.ring_fused_combine;
    p.workspace = ws.get();
    p.workspace_bytes = ws.bytes();

    // The reference: the combine's y, then LaunchHcPost on it.
    MoeCudaParams ref = p;
    ref.y = y_ref.get<uint16_t>();
    ASSERT_TRUE(MoeCuda(ref, nullptr).ok());
    HcPostParams hp;
    hp.tokens = m;
    hp.dim = kD;
    hp.f = y_ref.get<uint16_t>();
    hp.f_stride = kD;
    hp.residual = dres.get<uint16_t>();
    hp.residual_stride = kS * kD;
    hp.post = dpost.get<float>();
    hp.comb = dcomb.get<float>();
    hp.out = out_ref.get<uint16_t>();
    hp.out_stride = kS * kD;
    ASSERT_TRUE(LaunchHcPost(hp, nullptr).ok());
    CUDA_CHECK(cudaDeviceSynchronize());
    const std::vector<uint16_t> want_y = ToHost<uint16_t>(y_ref, m * kD);
    const std::vector<uint16_t> want = ToHost<uint16_t>(out_ref, m * kS * kD);

    MoeHcPost h;
    h.post = dpost.get<float>();
    h.comb = dcomb.get<float>();
    h.residual = dres.get<uint16_t>();
    h.residual_stride = kS * kD;
    h.out = out.get<uint16_t>();
    h.out_stride = kS * kD;
    for (const bool with_y : {false, true}) {
      SCOPED_TRACE(::testing::Message() << "y written " << with_y);
      CUDA_CHECK(cudaMemset(out.get(), 0xFF, out_bytes));
      CUDA_CHECK(cudaMemset(y.get(), 0xFF, y_bytes));
      MoeCudaParams q = p;
      q.y = with_y ? y.get<uint16_t>() : nullptr;
      q.hc_post = h;
      const absl::Status st = MoeCuda(q, nullptr);
      ASSERT_TRUE(st.ok()) << st;
      CUDA_CHECK(cudaDeviceSynchronize());
      EXPECT_EQ(ToHost<uint16_t>(out, m * kS * kD), want);
      if (with_y) {
        EXPECT_EQ(ToHost<uint16_t>(y, m * kD), want_y);
      }
    }

    // In place: out == residual.
    CUDA_CHECK(cudaMemcpy(in_place.get(), dres.get(), out_bytes, cudaMemcpyDeviceToDevice));
    MoeCudaParams q = p;
    q.hc_post = h;
    q.hc_post.residual = q.hc_post.out = in_place.get<uint16_t>();
    ASSERT_TRUE(MoeCuda(q, nullptr).ok());
    CUDA_CHECK(cudaDeviceSynchronize());
    EXPECT_EQ(ToHost<uint16_t>(in_place, m * kS * kD), want) << "in place";

    // post / comb written on another stream, behind hc_post_ready; eagerly, then as a graph.
    DeviceBuffer post2(post.size() * 4), comb2(comb.size() * 4);
    cudaStream_t stream, side;
    cudaEvent_t forked, ready;
    CUDA_CHECK(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
    CUDA_CHECK(cudaStreamCreateWithFlags(&side, cudaStreamNonBlocking));
    CUDA_CHECK(cudaEventCreateWithFlags(&forked, cudaEventDisableTiming));
    CUDA_CHECK(cudaEventCreateWithFlags(&ready, cudaEventDisableTiming));
    auto enqueue = [&] {
      CUDA_CHECK(cudaMemsetAsync(out.get(), 0xFF, out_bytes, stream));
      CUDA_CHECK(cudaMemsetAsync(post2.get(), 0xFF, post2.bytes(), stream));
      CUDA_CHECK(cudaMemsetAsync(comb2.get(), 0xFF, comb2.bytes(), stream));
      CUDA_CHECK(cudaEventRecord(forked, stream));
      CUDA_CHECK(cudaStreamWaitEvent(side, forked, 0));
      CUDA_CHECK(
          cudaMemcpyAsync(post2.get(), dpost.get(), post2.bytes(), cudaMemcpyDeviceToDevice, side));
      CUDA_CHECK(
          cudaMemcpyAsync(comb2.get(), dcomb.get(), comb2.bytes(), cudaMemcpyDeviceToDevice, side));
      CUDA_CHECK(cudaEventRecord(ready, side));
      MoeCudaParams e = p;
      e.hc_post = h;
      e.hc_post.post = post2.get<float>();
      e.hc_post.comb = comb2.get<float>();
      e.hc_post_ready = ready;
      ASSERT_TRUE(MoeCuda(e, stream).ok());
    };
    enqueue();
    CUDA_CHECK(cudaStreamSynchronize(stream));
    EXPECT_EQ(ToHost<uint16_t>(out, m * kS * kD), want) << "streams";
    cudaGraphExec_t exec = CaptureGraph(stream, enqueue);
    for (int rep = 0; rep < 2; ++rep) {
      CUDA_CHECK(cudaGraphLaunch(exec, stream));
      CUDA_CHECK(cudaStreamSynchronize(stream));
      EXPECT_EQ(ToHost<uint16_t>(out, m * kS * kD), want) << "graph replay " << rep;
    }
    CUDA_CHECK(cudaGraphExecDestroy(exec));
    CUDA_CHECK(cudaEventDestroy(forked));
    CUDA_CHECK(cudaEventDestroy(ready));
    CUDA_CHECK(cudaStreamDestroy(side));
    CUDA_CHECK(cudaStreamDestroy(stream));
  }
}

}  // namespace
}  // namespace flashserve::kernels
