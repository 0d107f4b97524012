// GPU tests call FS_SKIP_WITHOUT_GPU() first: without a device they skip with a message that
// ctest's SKIP_REGULAR_EXPRESSION (cmake/FlashserveHelpers.cmake) reports as "skipped".
#pragma once

#include <functional>

#include "gtest/gtest.h"
#include "kernels/common/cuda_check.h"

#define FS_SKIP_WITHOUT_GPU()                            \
  do {                                                   \
    if (!::flashserve::kernels::CudaDeviceAvailable()) { \
      GTEST_SKIP() << "no CUDA device";                  \
    }                                                    \
  } while (false)

namespace flashserve::kernels {

// What `enqueue` launches on `stream` (and on streams forked from it), captured as a graph and
// instantiated: the graph form of an eager test sequence (a LaunchPdl kernel's dependency on the
// one before it becomes a programmatic edge). The caller destroys the exec.
inline cudaGraphExec_t CaptureGraph(cudaStream_t stream, const std::function<void()>& enqueue) {
  cudaGraph_t graph;
  CUDA_CHECK(cudaStreamBeginCapture(stream, cudaStreamCaptureModeGlobal));
  enqueue();
  CUDA_CHECK(cudaStreamEndCapture(stream, &graph));
  cudaGraphExec_t exec;
  CUDA_CHECK(cudaGraphInstantiate(&exec, graph, 0));
  CUDA_CHECK(cudaGraphDestroy(graph));
  return exec;
}

}  // namespace flashserve::kernels
