// Observes the seconds a scope took into a histogram, reading time from an injected Clock so
// that tests can use FakeClock.
//
//   { ScopedTimer timer(prefill_seconds); RunPrefill(); }   // observes on scope exit
#pragma once

#include "absl/time/time.h"
#include "common/base/clock.h"
#include "common/metrics/metric_types.h"

namespace flashserve::metrics {

// Not thread-safe (one scope, one thread); the histogram itself is. `histogram` and `clock` are
// not owned and must outlive the timer. Cost: two Clock::Now calls and one Observe.
class ScopedTimer {
 public:
  explicit ScopedTimer(Histogram& histogram, const Clock& clock = *Clock::Real())
      : histogram_(&histogram), clock_(&clock), start_(clock.Now()) {}
  ScopedTimer(const ScopedTimer&) = delete;
  ScopedTimer& operator=(const ScopedTimer&) = delete;
  ~ScopedTimer() { Stop(); }

  // Observes the elapsed time now (once) and returns it; later calls (and the destructor) observe
  // nothing and return the first result. After Cancel(), observes nothing and returns zero.
  absl::Duration Stop() {
    if (histogram_ != nullptr) {
      elapsed_ = clock_->Now() - start_;
      histogram_->Observe(absl::ToDoubleSeconds(elapsed_));
      histogram_ = nullptr;
    }
    return elapsed_;
  }

  // Drops the measurement (for example when the operation failed and is counted elsewhere).
  void Cancel() { histogram_ = nullptr; }

 private:
  Histogram* histogram_;  // null once stopped or cancelled
  const Clock* clock_;
  absl::Time start_;
  absl::Duration elapsed_ = absl::ZeroDuration();
};

}  // namespace flashserve::metrics
