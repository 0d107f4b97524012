// kernels_gemm_gpu_test, FloatLinearPdlTest.*: the decode-size bf16 / fp32 Linears launched as
// programmatic dependents (FloatLinearCudaParams::programmatic) read x only after the kernel
// ahead has finished writing it. x is written by LaunchLateCopy (late_writer.h), which
// lets the Linear start at once and writes x ~100 µs later; the Linear's output must equal, bit
// for bit, a plain launch on x written beforehand — eagerly and as a captured graph (a
// programmatic edge), over the CUDA-core kernel (tile_rows 1: M 1 / 2 / 4, bf16 and fp32
// weights) and the swapped-role kernel (tile_rows 256: M 1 / 8 / 64 / 100, K shorter and longer
// than its ring, grouped as wo_a, split K with its reduction, with a bias). A kernel that read x
// before its wait would read the poisoned bytes (0xFFFF: NaN) and its output would differ (the
// bias and the weights are constants: read before the wait by design). The control
// (ControlEarlyReadSeesThePoison) shows the setting can see that: a LaunchPdl copy that reads
// before its wait gets the poison, eagerly and in a graph.
#include <cstdint>
#include <cstring>
#include <string>
#include <vector>

#include "common/formats/bf16.h"
#include "gtest/gtest.h"
#include "kernels/common/cuda_check.h"
#include "kernels/common/gpu_test_util.h"
#include "kernels/common/late_writer.h"
#include "kernels/gemm/gemm_float_cuda.h"
#include "kernels/gemm/gemm_test_util.h"

namespace flashserve::kernels {
namespace {

using gemm_test::Rng;

struct PdlCase {
  int64_t m, n, k, groups;
  int64_t tile_rows;  // kFloatLinearCudaGemvRows or kFloatLinearCudaSwapRows
  bool w_f32 = false;
  int64_t split_k = 0;
  bool bias = false;
};

std::string Describe(const PdlCase& c) {
  return "M " + std::to_string(c.m) + " N " + std::to_string(c.n) + " K " + std::to_string(c.k) +
         " G " + std::to_string(c.groups) + " tile " + std::to_string(c.tile_rows) +
         (c.w_f32 ? " w f32" : " w bf16") + " split " + std::to_string(c.split_k) +
         (c.bias ? " bias" : "");
}

// The Linear over x viewed [M, G, K] as wo_a reads o (group g's input at column g·K), y [M, G, N];
// the caller sets the weight (w_group_stride N·K), the output and any bias or split.
FloatLinearCudaParams GroupedParams(int64_t m, int64_t n, int64_t k, int64_t groups,
                                    const uint16_t* x, int64_t tile_rows) {
  FloatLinearCudaParams p;
  p.m = m;
  p.n = n;
  p.k = k;
  p.groups = groups;
  p.w_group_stride = n * k;
  p.x_bf16 = x;
  p.x_stride = groups * k;
  p.x_group_stride = k;
  p.y_stride = groups * n;
  p.y_group_stride = n;
  p.tile_rows = tile_rows;
  return p;
}

constexpr uint64_t kLateNs = 100'000;  // the writer's delay: far longer than any launch here

void CheckLateX(const PdlCase& c) {
  Rng rng(static_cast<uint32_t>(c.m * 131 + c.n + c.k + c.groups));
  const int64_t x_elems = c.m * c.groups * c.k, y_elems = c.m * c.groups * c.n;
  std::vector<uint16_t> x(x_elems), w16(c.groups * c.n * c.k);
  std::vector<float> w32(c.w_f32 ? c.groups * c.n * c.k : 0);
  for (uint16_t& v : x) v = formats::FloatToBf16Bits(static_cast<float>(rng.Normal()));
  for (uint16_t& v : w16) v = formats::FloatToBf16Bits(static_cast<float>(rng.Normal() / 64.0));
  for (float& v : w32) v = static_cast<float>(rng.Normal() / 64.0);
  DeviceBuffer dw(c.w_f32 ? w32.size() * 4 : w16.size() * 2), dsrc(x_elems * 2), dx(x_elems * 2),
      dy_ref(y_elems * 2), dy(y_elems * 2);
  if (c.w_f32) {
    dw.CopyFromHost(w32.data(), w32.size() * 4);
  } else {
    dw.CopyFromHost(w16.data(), w16.size() * 2);
  }
  dsrc.CopyFromHost(x.data(), x.size() * 2);
  std::vector<float> bias(c.n);
  for (float& v : bias) v = static_cast<float>(rng.Normal());
  DeviceBuffer dbias(c.n * 4);
  dbias.CopyFromHost(bias.data(), bias.size() * 4);

  FloatLinearCudaParams p = GroupedParams(c.m, c.n, c.k, c.groups, dx.get<uint16_t>(), c.tile_rows);
  if (c.w_f32) {
    p.w_f32 = dw.get<float>();
  } else {
    p.w_bf16 = dw.get<uint16_t>();
  }
  if (c.bias) p.bias = dbias.get<float>();
  p.split_k = c.split_k;
  DeviceBuffer ws(FloatLinearCudaWorkspaceBytes(p, c.m));
  p.workspace = ws.get();
  p.workspace_bytes = ws.bytes();
  ASSERT_EQ(PlanFloatLinearCuda(p).tile_rows, c.tile_rows);
  if (c.split_k > 1) {
    ASSERT_EQ(PlanFloatLinearCuda(p).splits, c.split_k);
  }

  cudaStream_t stream;
  CUDA_CHECK(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
  // The reference: x in place before a plain launch.
  CUDA_CHECK(cudaMemcpyAsync(dx.get(), dsrc.get(), x_elems * 2, cudaMemcpyDeviceToDevice, stream));
  p.programmatic = false;
  p.y_bf16 = dy_ref.get<uint16_t>();
  ASSERT_TRUE(LaunchFloatLinear(p, stream).ok());
  CUDA_CHECK(cudaStreamSynchronize(stream));
  std::vector<uint16_t> want(y_elems), got(y_elems);
  dy_ref.CopyToHost(want.data(), want.size() * 2);

  p.programmatic = true;
  p.y_bf16 = dy.get<uint16_t>();
  auto poison = [&] {
    CUDA_CHECK(cudaMemsetAsync(dx.get(), 0xFF, x_elems * 2, stream));
    CUDA_CHECK(cudaMemsetAsync(dy.get(), 0xFF, y_elems * 2, stream));
  };
  auto expect_same = [&](const char* what) {
    CUDA_CHECK(cudaStreamSynchronize(stream));
    dy.CopyToHost(got.data(), got.size() * 2);
    int64_t bad = 0;
    for (int64_t i = 0; i < y_elems; ++i) bad += got[i] != want[i];
    EXPECT_EQ(bad, 0) << what << ": " << bad << " of " << y_elems << " outputs differ";
  };
  // Eager: the late writer, then the Linear as its programmatic dependent.
  for (int rep = 0; rep < 2; ++rep) {
    poison();
    LaunchLateCopy(dx.get(), dsrc.get(), x_elems * 2, kLateNs, stream);
    ASSERT_TRUE(LaunchFloatLinear(p, stream).ok());
    expect_same("eager");
  }
  // Captured: the same two launches as a graph.
  absl::Status s;
  cudaGraphExec_t exec = CaptureGraph(stream, [&] {
    LaunchLateCopy(dx.get(), dsrc.get(), x_elems * 2, kLateNs, stream);
    s = LaunchFloatLinear(p, stream);
  });
  EXPECT_TRUE(s.ok()) << s;
  for (int rep = 0; rep < 2 && s.ok(); ++rep) {
    poison();
    CUDA_CHECK(cudaGraphLaunch(exec, stream));
    expect_same("graph");
  }
  CUDA_CHECK(cudaGraphExecDestroy(exec));
  CUDA_CHECK(cudaStreamDestroy(stream));
}

// The control: a LaunchPdl copy that reads x before its wait, behind the late writer, must get
// the poison — else the launch did not overlap the writer here and the test below could not see
// a Linear reading x early.
TEST(FloatLinearPdlTest, ControlEarlyReadSeesThePoison) {
  FS_SKIP_WITHOUT_GPU();
  constexpr size_t kBytes = 64 * 1024;
  std::vector<uint8_t> src(kBytes);
  for (size_t i = 0; i < kBytes; ++i) src[i] = static_cast<uint8_t>(i % 251);
  DeviceBuffer dsrc(kBytes), dx(kBytes), dprobe(kBytes);
  dsrc.CopyFromHost(src.data(), kBytes);
  cudaStream_t stream;
  CUDA_CHECK(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
  auto expect_poison = [&](const char* what) {
    CUDA_CHECK(cudaStreamSynchronize(stream));
    std::vector<uint8_t> probe(kBytes), x(kBytes);
    dprobe.CopyToHost(probe.data(), kBytes);
    dx.CopyToHost(x.data(), kBytes);
    EXPECT_EQ(x, src) << what << ": the late writer did not write x";
    int64_t early = 0;
    for (uint8_t b : probe) early += b == 0xFF;
    EXPECT_EQ(early, static_cast<int64_t>(kBytes))
        << what << ": the early reader saw the late writer's bytes: the programmatic launch did "
        << "not overlap it";
  };
  auto enqueue = [&] {
    LaunchLateCopy(dx.get(), dsrc.get(), kBytes, kLateNs, stream);
    LaunchPdlEarlyCopy(dprobe.get(), dx.get(), kBytes, stream);
  };
  // Both kernels once before the check: a kernel's first launch loads it (CUDA's lazy loading),
  // and a load may wait for the kernels running (session 77's first run, without this: one of
  // the two checks below saw the writer's bytes).
  enqueue();
  CUDA_CHECK(cudaStreamSynchronize(stream));
  CUDA_CHECK(cudaMemsetAsync(dx.get(), 0xFF, kBytes, stream));
  enqueue();
  expect_poison("eager");
  cudaGraphExec_t exec = CaptureGraph(stream, enqueue);
  CUDA_CHECK(cudaMemsetAsync(dx.get(), 0xFF, kBytes, stream));
  CUDA_CHECK(cudaGraphLaunch(exec, stream));
  expect_poison("graph");
  CUDA_CHECK(cudaGraphExecDestroy(exec));
  CUDA_CHECK(cudaStreamDestroy(stream));
}

TEST(FloatLinearPdlTest, ProgrammaticLaunchReadsXAfterTheKernelAhead) {
  FS_SKIP_WITHOUT_GPU();
  const PdlCase cases[] = {
      // The CUDA-core kernel: the gate's shape (bf16 and fp32 weights), a short K.
      {1, 384, 5120, 1, kFloatLinearCudaGemvRows, false, 0, true},
      {2, 384, 5120, 1, kFloatLinearCudaGemvRows},
      {4, 384, 5120, 1, kFloatLinearCudaGemvRows, true},
      {1, 96, 64, 1, kFloatLinearCudaGemvRows},
      // The swapped-role kernel: wo_a's shape (8 groups × [1024, 4096]: 64 K steps against a
      // ring of 8 / 6 stages), a K shorter than the ring, x rows past one box, split K.
      {1, 1024, 4096, 8, kFloatLinearCudaSwapRows, false, 0, true},
      {8, 1024, 4096, 8, kFloatLinearCudaSwapRows},
      {64, 1024, 4096, 2, kFloatLinearCudaSwapRows},
      {100, 512, 4096, 1, kFloatLinearCudaSwapRows},
      {3, 256, 192, 1, kFloatLinearCudaSwapRows},
      {8, 1024, 4096, 2, kFloatLinearCudaSwapRows, false, 4},
      {8, 512, 1216, 1, kFloatLinearCudaSwapRows, false, 3, true},  // splits of 7, 7, 5 steps
  };
  for (const PdlCase& c : cases) {
    SCOPED_TRACE(Describe(c));
    CheckLateX(c);
  }
}

// trigger_dependents (session 79): a plainly launched swapped-role kernel (wo_a's shape at one
// token) lets a LaunchPdl kernel behind it be scheduled at its top. The probe, a LaunchPdl copy
// that reads y before its wait, then runs while the Linear still works and sees y's poison;
// the Linear's own output is the reference's either way (the flag only schedules). Without the
// flag the probe is not checked: it starts once the Linear's CTAs have exited.
TEST(FloatLinearPdlTest, TriggerLetsTheNextKernelStartDuringAPlainLaunch) {
  FS_SKIP_WITHOUT_GPU();
  constexpr int64_t kM = 1, kN = 1024, kK = 4096, kG = 8;
  Rng rng(79);
  std::vector<uint16_t> x(kM * kG * kK), w(kG * kN * kK);
  for (uint16_t& v : x) v = formats::FloatToBf16Bits(static_cast<float>(rng.Normal()));
  for (uint16_t& v : w) v = formats::FloatToBf16Bits(static_cast<float>(rng.Normal() / 64.0));
  const size_t y_bytes = kM * kG * kN * 2;
  DeviceBuffer dw(w.size() * 2), dx(x.size() * 2), dy(y_bytes), dy_ref(y_bytes), dprobe(y_bytes);
  dw.CopyFromHost(w.data(), w.size() * 2);
  dx.CopyFromHost(x.data(), x.size() * 2);
  FloatLinearCudaParams p =
      GroupedParams(kM, kN, kK, kG, dx.get<uint16_t>(), kFloatLinearCudaSwapRows);
  p.w_bf16 = dw.get<uint16_t>();
  ASSERT_EQ(FloatLinearCudaWorkspaceBytes(p, kM), 0u);  // unsplit: no reduction kernel behind it
  cudaStream_t stream;
  CUDA_CHECK(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
  p.y_bf16 = dy_ref.get<uint16_t>();
  ASSERT_TRUE(LaunchFloatLinear(p, stream).ok());
  CUDA_CHECK(cudaStreamSynchronize(stream));
  std::vector<uint16_t> want(y_bytes / 2), got(y_bytes / 2);
  std::vector<uint8_t> probe(y_bytes);
  dy_ref.CopyToHost(want.data(), y_bytes);
  p.y_bf16 = dy.get<uint16_t>();
  for (bool trigger : {false, true}) {
    SCOPED_TRACE(trigger ? "trigger_dependents" : "plain");
    p.trigger_dependents = trigger;
    auto enqueue = [&] {
      ASSERT_TRUE(LaunchFloatLinear(p, stream).ok());
      LaunchPdlEarlyCopy(dprobe.get(), dy.get(), y_bytes, stream);
    };
    enqueue();  // both kernels loaded before the check (CUDA's lazy loading; see the control)
    CUDA_CHECK(cudaStreamSynchronize(stream));
    CUDA_CHECK(cudaMemsetAsync(dy.get(), 0xFF, y_bytes, stream));
    enqueue();
    CUDA_CHECK(cudaStreamSynchronize(stream));
    dy.CopyToHost(got.data(), y_bytes);
    EXPECT_EQ(got, want) << "the Linear's output changed";
    if (!trigger) continue;
    dprobe.CopyToHost(probe.data(), y_bytes);
    int64_t poisoned = 0;
    for (uint8_t b : probe) poisoned += b == 0xFF;
    EXPECT_EQ(poisoned, static_cast<int64_t>(y_bytes))
        << "the probe read y after the Linear wrote it: the trigger did not let it start early";
  }
  CUDA_CHECK(cudaStreamDestroy(stream));
}

}  // namespace
}  // namespace flashserve::kernels
