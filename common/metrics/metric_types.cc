#include "common/metrics/metric_types.h"

#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "common/base/check.h"
#include "common/metrics/text_format.h"

namespace flashserve::metrics {
namespace {

// "<name><suffix>{<labels>[,]<extra>} <value>\n"; braces only when there is a label.
void AppendLine(std::string* out, std::string_view name, std::string_view suffix,
                std::string_view labels, std::string_view extra, std::string_view value) {
  out->append(name).append(suffix);
  if (!labels.empty() || !extra.empty()) {
    out->push_back('{');
    out->append(labels);
    if (!labels.empty() && !extra.empty()) out->push_back(',');
    out->append(extra);
    out->push_back('}');
  }
  out->push_back(' ');
  out->append(value);
  out->push_back('\n');
}

}  // namespace

void Counter::AppendSamples(std::string_view name, std::string_view labels,
                            std::string* out) const {
  AppendLine(out, name, "", labels, "", FormatValue(Value()));
}

void Gauge::AppendSamples(std::string_view name, std::string_view labels, std::string* out) const {
  AppendLine(out, name, "", labels, "", FormatValue(Value()));
}

Histogram::Histogram(const Config& config)
    : bounds_(config.bounds),
      buckets_(std::make_unique<std::atomic<uint64_t>[]>(config.bounds.size() + 1)) {
  for (size_t i = 0; i <= bounds_.size(); ++i) buckets_[i].store(0, std::memory_order_relaxed);
}

void Histogram::Observe(double value) {
  if (std::isnan(value)) return;
  // First bound >= value: `le` is inclusive. Past the last bound is the +Inf bucket.
  const size_t bucket = std::lower_bound(bounds_.begin(), bounds_.end(), value) - bounds_.begin();
  buckets_[bucket].fetch_add(1, std::memory_order_relaxed);
  internal::AtomicAdd(sum_, value);
}

Histogram::Snapshot Histogram::Read() const {
  Snapshot snapshot;
  snapshot.cumulative.resize(bounds_.size() + 1);
  uint64_t running = 0;
  for (size_t i = 0; i <= bounds_.size(); ++i) {
    running += buckets_[i].load(std::memory_order_relaxed);
    snapshot.cumulative[i] = running;
  }
  snapshot.sum = sum_.load(std::memory_order_relaxed);
  return snapshot;
}

void Histogram::AppendSamples(std::string_view name, std::string_view labels,
                              std::string* out) const {
  const Snapshot snapshot = Read();
  for (size_t i = 0; i <= bounds_.size(); ++i) {
    const std::string le =
        "le=\"" + (i < bounds_.size() ? FormatValue(bounds_[i]) : std::string("+Inf")) + "\"";
    AppendLine(out, name, "_bucket", labels, le, std::to_string(snapshot.cumulative[i]));
  }
  AppendLine(out, name, "_sum", labels, "", FormatValue(snapshot.sum));
  AppendLine(out, name, "_count", labels, "", std::to_string(snapshot.cumulative.back()));
}

std::vector<double> ExponentialBuckets(double start, double factor, int count) {
  CHECK(start > 0 && factor > 1 && count >= 0) << "bad exponential buckets";
  std::vector<double> bounds;
  for (int i = 0; i < count; ++i, start *= factor) bounds.push_back(start);
  return bounds;
}

std::vector<double> LinearBuckets(double start, double width, int count) {
  CHECK(width > 0 && count >= 0) << "bad linear buckets";
  std::vector<double> bounds;
  for (int i = 0; i < count; ++i) bounds.push_back(start + i * width);
  return bounds;
}

std::vector<double> DefaultLatencyBuckets() { return ExponentialBuckets(0.0005, 2, 18); }

}  // namespace flashserve::metrics
