// A fixed-size pool of worker threads for CPU work (model kernels on the CPU backend, batched
// cache I/O). Threads are created once at construction; nothing is allocated per task beyond the
// std::function the caller hands over.
#pragma once

#include <cstddef>
#include <functional>
#include <thread>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"

namespace flashserve {

class ThreadPool {
 public:
  // Starts `num_threads` workers (at least 1).
  explicit ThreadPool(size_t num_threads);
  // Finishes every queued task, then joins the workers.
  ~ThreadPool();
  ThreadPool(const ThreadPool&) = delete;
  ThreadPool& operator=(const ThreadPool&) = delete;

  size_t size() const { return workers_.size(); }

  // Queues a task. Thread-safe.
  void Schedule(std::function<void()> task);

  // Runs fn(begin, end) over [0, n) split into at most size() contiguous chunks of at least
  // `min_chunk` items, on the pool plus the calling thread, and returns when all are done.
  // Must not be called from inside a pool task (it would wait on itself).
  void ParallelFor(size_t n, size_t min_chunk, const std::function<void(size_t, size_t)>& fn);

 private:
  void WorkerLoop();

  absl::Mutex mu_;
  std::vector<std::function<void()>> queue_ ABSL_GUARDED_BY(mu_);
  size_t head_ ABSL_GUARDED_BY(mu_) = 0;
  bool stopping_ ABSL_GUARDED_BY(mu_) = false;
  std::vector<std::thread> workers_;
};

}  // namespace flashserve
