// Fork / join of a helper stream inside one launcher call, so that two independent parts of the
// call (MoeCuda's shared expert next to its routed experts) run concurrently on the GPU while the
// call stays one ordered unit on the caller's stream (host code only).
//
//   cudaStream_t side = ForkSideStream(stream);   // side starts after everything before on stream
//   ... enqueue part A on side, part B on stream ...
//   JoinSideStream(stream);                       // stream continues after A and B
//
// The helper stream and its two events belong to the calling host thread and the current device
// (created on first use, cudaStreamNonBlocking, events without timing), so concurrent callers on
// other threads never share them. Works under stream capture: the side stream joins the capture
// through the fork event and leaves it through the join event (the usual fork/join graph).
// Between a fork and its join the thread must not fork again on the same device.
// The cached stream and events do not survive cudaDeviceReset (nothing in the project calls it;
// a caller that does must not use these helpers afterwards on that thread).
#pragma once

#include <cuda_runtime.h>

#include "common/base/check.h"
#include "kernels/common/cuda_check.h"
#include "kernels/common/per_device_cache.h"

namespace flashserve::kernels {

namespace side_stream_internal {

struct Slot {
  cudaStream_t stream = nullptr;
  cudaEvent_t fork = nullptr;
  cudaEvent_t join = nullptr;
};

// The calling thread's slot for the current device, created on first use. The stream and events
// are never destroyed (one set per thread and device; the driver reclaims them at exit).
inline Slot& CurrentSlot() {
  thread_local Slot slots[kPerDeviceCacheSize];
  const int device = CurrentDevice();
  CHECK(device >= 0 && device < kPerDeviceCacheSize) << "device ordinal " << device;
  Slot* s = &slots[device];
  if (s->stream == nullptr) {
    CUDA_CHECK(cudaStreamCreateWithFlags(&s->stream, cudaStreamNonBlocking));
    CUDA_CHECK(cudaEventCreateWithFlags(&s->fork, cudaEventDisableTiming));
    CUDA_CHECK(cudaEventCreateWithFlags(&s->join, cudaEventDisableTiming));
  }
  return *s;
}

}  // namespace side_stream_internal

// The side stream, ordered after everything enqueued on `main` so far.
inline cudaStream_t ForkSideStream(cudaStream_t main) {
  side_stream_internal::Slot& s = side_stream_internal::CurrentSlot();
  CUDA_CHECK(cudaEventRecord(s.fork, main));
  CUDA_CHECK(cudaStreamWaitEvent(s.stream, s.fork, 0));
  return s.stream;
}

// Orders everything enqueued on `main` from now on after everything enqueued on the side stream.
inline void JoinSideStream(cudaStream_t main) {
  side_stream_internal::Slot& s = side_stream_internal::CurrentSlot();
  CUDA_CHECK(cudaEventRecord(s.join, s.stream));
  CUDA_CHECK(cudaStreamWaitEvent(main, s.join, 0));
}

}  // namespace flashserve::kernels
