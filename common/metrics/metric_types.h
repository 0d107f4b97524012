// The three metric kinds. A child is one labelled time series of a family (family.h); call sites
// get a reference once (Family::WithLabels) and then update it on the hot path.
//
// Hot-path cost: Counter::Increment and Gauge::Increment/Decrement are a compare-exchange loop on a
// std::atomic<double> (lock-free on x86-64 and aarch64; uncontended it is one CAS); Gauge::Set is
// one relaxed store; Histogram::Observe is a binary search over the bounds, one relaxed fetch_add
// on a uint64 bucket and one CAS loop on the sum. No locks, no allocation. Relaxed ordering: a
// scrape sees each value at some recent point, not a snapshot across series.
#pragma once

#include <atomic>
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

namespace flashserve::metrics {

namespace internal {
// value += delta, lock-free. std::atomic<double>::fetch_add exists in C++20 but is spelled out
// here so the relaxed CAS loop (and its cost) is visible.
inline void AtomicAdd(std::atomic<double>& value, double delta) {
  double current = value.load(std::memory_order_relaxed);
  while (!value.compare_exchange_weak(current, current + delta, std::memory_order_relaxed)) {
  }
}
}  // namespace internal

// A monotonically increasing value (requests served, bytes written). Thread-safe, lock-free.
class Counter {
 public:
  struct Config {};
  static constexpr std::string_view kType = "counter";
  explicit Counter(const Config&) {}

  // Adds `delta`. Negative and NaN deltas are ignored (a counter never goes down): callers that
  // can produce them have a bug, but metrics must not take the process down.
  void Increment(double delta = 1.0) {
    if (delta >= 0) internal::AtomicAdd(value_, delta);
  }
  double Value() const { return value_.load(std::memory_order_relaxed); }

  // Appends "<name>{<labels>} <value>\n"; `labels` is the rendered label list without braces.
  void AppendSamples(std::string_view name, std::string_view labels, std::string* out) const;

 private:
  std::atomic<double> value_{0.0};
};

// A value that goes up and down (queue depth, bytes resident). Thread-safe, lock-free.
class Gauge {
 public:
  struct Config {};
  static constexpr std::string_view kType = "gauge";
  explicit Gauge(const Config&) {}

  void Set(double value) { value_.store(value, std::memory_order_relaxed); }
  void Increment(double delta = 1.0) { internal::AtomicAdd(value_, delta); }
  void Decrement(double delta = 1.0) { internal::AtomicAdd(value_, -delta); }
  double Value() const { return value_.load(std::memory_order_relaxed); }

  void AppendSamples(std::string_view name, std::string_view labels, std::string* out) const;

 private:
  std::atomic<double> value_{0.0};
};

// Counts observations into buckets with inclusive upper bounds (`le`): a value equal to a bound
// lands in that bucket. Thread-safe, lock-free.
class Histogram {
 public:
  // Finite, strictly increasing upper bounds; +Inf is implicit. Registry::AddHistogram validates.
  struct Config {
    std::vector<double> bounds;
  };
  static constexpr std::string_view kType = "histogram";
  explicit Histogram(const Config& config);

  // Records one observation. NaN is ignored (it has no bucket).
  void Observe(double value);

  struct Snapshot {
    std::vector<uint64_t> cumulative;  // per bound, then +Inf; cumulative.back() == count
    double sum = 0;
  };
  // Current buckets (cumulative) and sum. The count is derived from the buckets, so `_count`
  // always equals the +Inf bucket; `sum` may lag an observation in flight.
  Snapshot Read() const;
  const std::vector<double>& bounds() const { return bounds_; }

  // Appends the _bucket lines (with `le`), _sum and _count.
  void AppendSamples(std::string_view name, std::string_view labels, std::string* out) const;

 private:
  const std::vector<double> bounds_;
  const std::unique_ptr<std::atomic<uint64_t>[]> buckets_;  // bounds_.size() + 1, not cumulative
  std::atomic<double> sum_{0.0};
};

// Bucket helpers. Exponential: start, start*factor, ... (count bounds; start > 0, factor > 1).
// Linear: start, start+width, ... (count bounds; width > 0). CHECK-fail on bad arguments.
std::vector<double> ExponentialBuckets(double start, double factor, int count);
std::vector<double> LinearBuckets(double start, double width, int count);
// Latencies in seconds from 0.5 ms to ~65 s, doubling.
std::vector<double> DefaultLatencyBuckets();

}  // namespace flashserve::metrics
