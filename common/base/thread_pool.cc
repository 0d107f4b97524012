#include "common/base/thread_pool.h"

#include <algorithm>
#include <atomic>

#include "common/base/check.h"

namespace flashserve {

ThreadPool::ThreadPool(size_t num_threads) {
  num_threads = std::max<size_t>(num_threads, 1);
  workers_.reserve(num_threads);
  for (size_t i = 0; i < num_threads; ++i) workers_.emplace_back([this] { WorkerLoop(); });
}

ThreadPool::~ThreadPool() {
  {
    absl::MutexLock lock(&mu_);
    stopping_ = true;
  }
  for (auto& t : workers_) t.join();
}

void ThreadPool::Schedule(std::function<void()> task) {
  absl::MutexLock lock(&mu_);
  CHECK(!stopping_) << "ThreadPool::Schedule after shutdown";
  queue_.push_back(std::move(task));
}

void ThreadPool::WorkerLoop() {
  while (true) {
    std::function<void()> task;
    {
      absl::MutexLock lock(&mu_);
      mu_.Await(absl::Condition(
          +[](ThreadPool* p) ABSL_EXCLUSIVE_LOCKS_REQUIRED(p->mu_) {
            return p->stopping_ || p->head_ < p->queue_.size();
          },
          this));
      if (head_ == queue_.size()) return;  // stopping and drained
      task = std::move(queue_[head_++]);
      if (head_ == queue_.size()) {  // reuse the vector's capacity once drained
        queue_.clear();
        head_ = 0;
      }
    }
    task();
  }
}

void ThreadPool::ParallelFor(size_t n, size_t min_chunk,
                             const std::function<void(size_t, size_t)>& fn) {
  if (n == 0) return;
  min_chunk = std::max<size_t>(min_chunk, 1);
  size_t chunks = std::min(size() + 1, (n + min_chunk - 1) / min_chunk);
  if (chunks <= 1) {
    fn(0, n);
    return;
  }
  size_t per = (n + chunks - 1) / chunks;
  absl::Mutex done_mu;
  size_t remaining = chunks - 1;
  for (size_t c = 1; c < chunks; ++c) {
    size_t begin = c * per, end = std::min(n, begin + per);
    Schedule([&, begin, end] {
      if (begin < end) fn(begin, end);
      absl::MutexLock lock(&done_mu);
      --remaining;
    });
  }
  fn(0, std::min(n, per));
  absl::MutexLock lock(&done_mu);
  done_mu.Await(absl::Condition(
      +[](size_t* r) { return *r == 0; }, &remaining));
}

}  // namespace flashserve
