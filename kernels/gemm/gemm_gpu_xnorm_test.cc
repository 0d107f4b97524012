// kernels_gemm_gpu_test, LinearCudaParams::x_norm (the RMSNorm of x ahead of the FP8 Linear,
// fused into the weight-streaming kernel; gemm_cuda.h):
// - The fused call against its two-launch form (LaunchRmsNorm into a buffer, then the Linear on
//   it), bit for bit: y and the normed rows written to x_norm.out, over 1 .. 8 rows and, with the
//   stream kernel forced (tile_rows 8), 9 .. 40 (two n8 tiles, several row tiles), K that spans
//   several slabs or ends inside a 128-wide unit, 1 .. 5 K splits, the
//   16-byte and the scalar load paths, bf16 and fp32 outputs. x_norm.out also equals RmsNormCpu.
// - The plans that do not fuse (the TMA ring, M > 8) give the same bits through their fallback.
// - In a CUDA graph after a copy that writes x (the fused norm reads x only after the
//   programmatic wait), replayed with new x: the same bits as the eager two-launch form.
#include <cstdint>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "common/formats/bf16.h"
#include "gtest/gtest.h"
#include "kernels/common/cuda_check.h"
#include "kernels/common/gpu_test_util.h"
#include "kernels/gemm/gemm.h"
#include "kernels/gemm/gemm_cuda.h"
#include "kernels/gemm/gemm_gpu_test_util.h"
#include "kernels/gemm/gemm_test_util.h"
#include "kernels/norm_rope/norm_rope.h"

namespace flashserve::kernels {
namespace {

using gemm_test::HostLinear;
using gemm_test::Rng;

struct Case {
  int64_t n = 0, k = 0, m = 1;
  int64_t split_k = 0;
  bool scalar = false;  // odd x stride: the scalar load path
  bool f32_out = false;
  bool stream_tma = false;
  int64_t tile_rows = 0;  // kLinearCudaStreamRows: the stream kernel at any M (two n8 tiles)
};

std::string Name(const Case& c) {
  return "n " + std::to_string(c.n) + " k " + std::to_string(c.k) + " m " + std::to_string(c.m) +
         " splits " + std::to_string(c.split_k) + (c.scalar ? " scalar" : "") +
         (c.f32_out ? " f32" : "") + (c.stream_tma ? " tma" : "") +
         (c.tile_rows != 0 ? " tile_rows " + std::to_string(c.tile_rows) : "");
}

// Device inputs of one case: x [m, x_stride], the norm weight, and the outputs of both forms.
struct Buffers {
  int64_t x_stride = 0, out_stride = 0;
  DeviceBuffer x, w, out_fused, out_two, y_fused, y_two, ws;
};

LinearCudaParams Params(const Case& c, const DeviceFp8Linear& lin, Buffers& b, bool fused) {
  LinearCudaParams p;
  p.weight = &lin.view();
  p.m = c.m;
  p.x_bf16 = fused ? b.x.get<uint16_t>() : b.out_two.get<uint16_t>();
  p.x_stride = fused ? b.x_stride : b.out_stride;
  DeviceBuffer& y = fused ? b.y_fused : b.y_two;
  p.y_bf16 = c.f32_out ? nullptr : y.get<uint16_t>();
  p.y_f32 = c.f32_out ? y.get<float>() : nullptr;
  p.y_stride = c.n;
  p.split_k = c.split_k;
  p.stream_tma = c.stream_tma;
  p.tile_rows = c.tile_rows;
  p.workspace = b.ws.get();
  p.workspace_bytes = b.ws.bytes();
  if (fused) {
    p.x_norm.weight = b.w.get<uint16_t>();
    p.x_norm.eps = 1e-6f;
    p.x_norm.out = b.out_fused.get<uint16_t>();
    p.x_norm.out_stride = b.out_stride;
  }
  return p;
}

RmsNormParams NormParams(const Case& c, Buffers& b) {
  RmsNormParams n;
  n.rows = c.m;
  n.cols = c.k;
  n.x = b.x.get<uint16_t>();
  n.x_stride = b.x_stride;
  n.weight_bf16 = b.w.get<uint16_t>();
  n.eps = 1e-6f;
  n.out = b.out_two.get<uint16_t>();
  n.out_stride = b.out_stride;
  return n;
}

std::vector<uint8_t> Host(const DeviceBuffer& d) {
  std::vector<uint8_t> h(d.bytes());
  d.CopyToHost(h.data(), h.size());
  return h;
}

// Bytes of rows [0, m) × cols of two row-strided device buffers: the first mismatch reported.
void ExpectSameRows(const DeviceBuffer& a, const DeviceBuffer& b, int64_t m, int64_t stride,
                    int64_t cols, int64_t elem, const std::string& what) {
  const std::vector<uint8_t> ha = Host(a), hb = Host(b);
  for (int64_t r = 0; r < m; ++r) {
    const size_t off = static_cast<size_t>(r * stride * elem);
    if (std::memcmp(ha.data() + off, hb.data() + off, static_cast<size_t>(cols * elem)) != 0) {
      for (int64_t j = 0; j < cols * elem; ++j) {
        if (ha[off + j] != hb[off + j]) {
          ADD_FAILURE() << what << ": row " << r << " byte " << j << " differs";
          return;
        }
      }
    }
  }
}

class XNormGpuTest : public ::testing::Test {
 protected:
  void SetUp() override { FS_SKIP_WITHOUT_GPU(); }

  // x: random activations with per-row scales; the norm weight: random bf16 around 1.
  void Fill(const Case& c, Buffers& b, Rng& rng) {
    b.x_stride = c.scalar ? c.k + 3 : c.k + 8;
    b.out_stride = c.k + 16;
    const std::vector<uint16_t> x = gemm_test::RandomActivations(c.m, c.k, b.x_stride, rng);
    std::vector<uint16_t> w(static_cast<size_t>(c.k));
    for (auto& v : w) v = formats::FloatToBf16Bits(static_cast<float>(0.5 + rng.Uniform()));
    b.x = DeviceBuffer(x.size() * 2);
    b.x.CopyFromHost(x.data(), x.size() * 2);
    b.w = DeviceBuffer(w.size() * 2);
    b.w.CopyFromHost(w.data(), w.size() * 2);
    host_x_ = x;
    host_w_ = w;
  }

  void Run(const Case& c, uint64_t seed) {
    SCOPED_TRACE(Name(c));
    Rng rng(seed);
    const HostLinear h = gemm_test::RandomLinear(WeightFormat::kFp8Block32, c.n, c.k, false, rng);
    const std::unique_ptr<PreparedLinear> prepared = gemm_test::PrepareCodesOnly(h);
    const DeviceFp8Linear lin = gemm_test::UploadOrDie(*prepared);
    Buffers b;
    Fill(c, b, rng);
    const size_t out_bytes = static_cast<size_t>(c.m * b.out_stride * 2);
    b.out_fused = DeviceBuffer(out_bytes);
    b.out_two = DeviceBuffer(out_bytes);
    const size_t y_bytes = static_cast<size_t>(c.m * c.n * (c.f32_out ? 4 : 2));
    b.y_fused = DeviceBuffer(y_bytes);
    b.y_two = DeviceBuffer(y_bytes);
    for (DeviceBuffer* d : {&b.out_fused, &b.out_two, &b.y_fused, &b.y_two}) {
      CUDA_CHECK(cudaMemset(d->get(), 0xFF, d->bytes()));
    }
    b.ws = DeviceBuffer(
        std::max<size_t>(16, LinearCudaWorkspaceBytes(lin.view(), c.m, c.tile_rows, c.split_k)));
    CUDA_CHECK(cudaMemset(b.ws.get(), 0xA5, b.ws.bytes()));

    ASSERT_TRUE(LaunchRmsNorm(NormParams(c, b), nullptr).ok());
    ASSERT_TRUE(LaunchLinearFp8(Params(c, lin, b, false), nullptr).ok());
    for (int rep = 0; rep < 2; ++rep) {  // twice: the split counters reset
      const absl::Status s = LaunchLinearFp8(Params(c, lin, b, true), nullptr);
      ASSERT_TRUE(s.ok()) << s;
    }
    CUDA_CHECK(cudaDeviceSynchronize());
    ExpectSameRows(b.out_fused, b.out_two, c.m, b.out_stride, c.k, 2, "x_norm.out");
    ExpectSameRows(b.y_fused, b.y_two, c.m, c.n, c.n, c.f32_out ? 4 : 2, "y");

    // x_norm.out against the CPU's RMSNorm.
    std::vector<uint16_t> cpu(static_cast<size_t>(c.m * c.k));
    RmsNormParams n = NormParams(c, b);
    n.x = host_x_.data();
    n.weight_bf16 = host_w_.data();
    n.out = cpu.data();
    n.out_stride = c.k;
    ASSERT_TRUE(RmsNormCpu(n, nullptr).ok());
    const std::vector<uint8_t> gpu = Host(b.out_fused);
    for (int64_t r = 0; r < c.m; ++r) {
      ASSERT_EQ(std::memcmp(gpu.data() + r * b.out_stride * 2, cpu.data() + r * c.k, c.k * 2), 0)
          << "x_norm.out row " << r << " differs from RmsNormCpu";
    }
  }

  std::vector<uint16_t> host_x_, host_w_;
};

TEST_F(XNormGpuTest, FusedEqualsTwoLaunches) {
  uint64_t seed = 1;
  // wq_b's K (10 units, one slab); 40 units (three slabs); a K ending inside a unit.
  for (const int64_t k : {1280, 5120, 1312}) {
    for (const int64_t m : {1, 3, 8, 13, 16}) {
      for (const int64_t splits : {0, 1, 3}) {
        Run({.n = 640, .k = k, .m = m, .split_k = splits}, ++seed);
      }
    }
    Run({.n = 384, .k = k, .m = 5, .split_k = 2, .scalar = true}, ++seed);
    Run({.n = 384, .k = k, .m = 2, .split_k = 0, .f32_out = true}, ++seed);
  }
  // The stream kernel forced past 8 rows: two n8 tiles, several 16-row tiles (blockIdx.z).
  for (const int64_t m : {9, 16, 40}) {
    for (const int64_t splits : {0, 2}) {
      Run({.n = 640, .k = 1312, .m = m, .split_k = splits, .tile_rows = kLinearCudaStreamRows},
          ++seed);
    }
  }
  // The released wq_b at one and eight rows.
  Run({.n = 32768, .k = 1280, .m = 1}, ++seed);
  Run({.n = 32768, .k = 1280, .m = 8, .split_k = 5}, ++seed);
}

TEST_F(XNormGpuTest, UnfusedPlansFallBackToTheSameBits) {
  Run({.n = 512, .k = 2048, .m = 4, .stream_tma = true}, 101);  // the TMA ring: not fused
  Run({.n = 512, .k = 2048, .m = 24}, 102);                     // mma.sync
  Run({.n = 512, .k = 2048, .m = 40, .split_k = 2}, 103);
}

TEST_F(XNormGpuTest, GraphAfterTheProducerOfX) {
  const Case c{.n = 4096, .k = 1280, .m = 2};
  Rng rng(7);
  const HostLinear h = gemm_test::RandomLinear(WeightFormat::kFp8Block32, c.n, c.k, false, rng);
  const std::unique_ptr<PreparedLinear> prepared = gemm_test::PrepareCodesOnly(h);
  const DeviceFp8Linear lin = gemm_test::UploadOrDie(*prepared);
  Buffers b;
  Fill(c, b, rng);
  DeviceBuffer src(b.x.bytes());  // the graph copies it into x, then runs the fused Linear
  b.out_fused = DeviceBuffer(static_cast<size_t>(c.m * b.out_stride * 2));
  b.out_two = DeviceBuffer(b.out_fused.bytes());
  b.y_fused = DeviceBuffer(static_cast<size_t>(c.m * c.n * 2));
  b.y_two = DeviceBuffer(b.y_fused.bytes());
  b.ws = DeviceBuffer(std::max<size_t>(16, LinearCudaWorkspaceBytes(lin.view(), c.m, 0, 0)));
  cudaStream_t stream;
  CUDA_CHECK(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
  const LinearCudaParams fused = Params(c, lin, b, true);
  const cudaGraphExec_t exec = CaptureGraph(stream, [&] {
    CUDA_CHECK(
        cudaMemcpyAsync(b.x.get(), src.get(), src.bytes(), cudaMemcpyDeviceToDevice, stream));
    ASSERT_TRUE(LaunchLinearFp8(fused, stream).ok());
  });
  for (int replay = 0; replay < 3; ++replay) {
    SCOPED_TRACE("replay " + std::to_string(replay));
    const std::vector<uint16_t> x = gemm_test::RandomActivations(c.m, c.k, b.x_stride, rng);
    src.CopyFromHost(x.data(), x.size() * 2);
    CUDA_CHECK(cudaMemset(b.x.get(), 0, b.x.bytes()));
    CUDA_CHECK(cudaGraphLaunch(exec, stream));
    CUDA_CHECK(cudaStreamSynchronize(stream));
    // The eager two-launch form on the same x.
    ASSERT_TRUE(LaunchRmsNorm(NormParams(c, b), stream).ok());
    ASSERT_TRUE(LaunchLinearFp8(Params(c, lin, b, false), stream).ok());
    CUDA_CHECK(cudaStreamSynchronize(stream));
    ExpectSameRows(b.out_fused, b.out_two, c.m, b.out_stride, c.k, 2, "x_norm.out");
    ExpectSameRows(b.y_fused, b.y_two, c.m, c.n, c.n, 2, "y");
  }
  CUDA_CHECK(cudaGraphExecDestroy(exec));
  CUDA_CHECK(cudaStreamDestroy(stream));
}

}  // namespace
}  // namespace flashserve::kernels
