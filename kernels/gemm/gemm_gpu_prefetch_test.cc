// kernels_gemm_gpu_test, the L2 weight prefetch (weight_prefetch.h): a prefetch is a hint with
// no result of its own, so what can go wrong is an address outside the ranges (a fault, or with
// compute-sanitizer an out-of-bounds report), a write, or a launch the stream or a graph refuses.
// The ranges here end at the buffer's last byte, start unaligned and cover ragged row prefixes;
// the buffer must come back unchanged, directly and from replays of a captured graph.
#include <cstdint>
#include <vector>

#include "gtest/gtest.h"
#include "kernels/common/cuda_check.h"
#include "kernels/common/gpu_test_util.h"
#include "kernels/gemm/weight_prefetch.h"

namespace flashserve::kernels {
namespace {

std::vector<unsigned char> Pattern(size_t n) {
  std::vector<unsigned char> v(n);
  uint32_t s = 12345u;
  for (unsigned char& c : v) {
    s = s * 1664525u + 1013904223u;
    c = static_cast<unsigned char>(s >> 24);
  }
  return v;
}

// Ranges over a buffer of `bytes`: the whole buffer from an odd offset to its last byte, row
// prefixes at a pitch that is not a multiple of 16, a range shorter than 16 bytes (nothing to
// issue once aligned), and rows whose prefix spans several chunks.
L2PrefetchParams Ranges(const unsigned char* b, int64_t bytes) {
  L2PrefetchParams p;
  p.count = 4;
  p.ranges[0] = L2PrefetchContiguous(b + 3, bytes - 3);
  p.ranges[1] = {b + 5, 1000, 777, 1003};
  p.ranges[2] = L2PrefetchContiguous(b + bytes - 9, 9);
  p.ranges[3] = {b + 64, 7, 3 * kL2PrefetchChunkBytes + 48,
                 (bytes - 64 - 4 * kL2PrefetchChunkBytes) / 6};
  return p;
}

TEST(L2PrefetchGpuTest, ReadsNothingOutsideAndWritesNothing) {
  FS_SKIP_WITHOUT_GPU();
  const int64_t bytes = (33 << 20) + 7;
  const std::vector<unsigned char> host = Pattern(static_cast<size_t>(bytes));
  DeviceBuffer buf(static_cast<size_t>(bytes));
  buf.CopyFromHost(host.data(), host.size());
  const L2PrefetchParams p = Ranges(buf.get<unsigned char>(), bytes);
  ASSERT_TRUE(ValidateL2PrefetchParams(p).ok());
  cudaStream_t stream;
  CUDA_CHECK(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
  for (int i = 0; i < 3; ++i) ASSERT_TRUE(LaunchL2Prefetch(p, stream).ok());
  // Nothing to do: no launch, OK.
  ASSERT_TRUE(LaunchL2Prefetch(L2PrefetchParams{}, stream).ok());
  CUDA_CHECK(cudaStreamSynchronize(stream));

  // Captured into a graph beside nothing else, replayed.
  cudaGraph_t graph;
  cudaGraphExec_t exec;
  CUDA_CHECK(cudaStreamBeginCapture(stream, cudaStreamCaptureModeThreadLocal));
  ASSERT_TRUE(LaunchL2Prefetch(p, stream).ok());
  CUDA_CHECK(cudaStreamEndCapture(stream, &graph));
  CUDA_CHECK(cudaGraphInstantiate(&exec, graph, 0));
  for (int i = 0; i < 3; ++i) CUDA_CHECK(cudaGraphLaunch(exec, stream));
  CUDA_CHECK(cudaStreamSynchronize(stream));
  CUDA_CHECK(cudaGraphExecDestroy(exec));
  CUDA_CHECK(cudaGraphDestroy(graph));
  CUDA_CHECK(cudaStreamDestroy(stream));

  std::vector<unsigned char> back(host.size());
  CUDA_CHECK(cudaMemcpy(back.data(), buf.get(), back.size(), cudaMemcpyDeviceToHost));
  EXPECT_TRUE(back == host) << "the prefetch changed the buffer";
}

TEST(L2PrefetchGpuTest, InvalidParamsEnqueueNothing) {
  FS_SKIP_WITHOUT_GPU();
  L2PrefetchParams p;
  p.count = 1;
  p.ranges[0] = {nullptr, 4, 64, 64};
  const absl::Status s = LaunchL2Prefetch(p, nullptr);
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << s;
  EXPECT_EQ(cudaGetLastError(), cudaSuccess);
}

}  // namespace
}  // namespace flashserve::kernels
