#include "common/metrics/registry.h"

#include <algorithm>
#include <cmath>
#include <memory>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "absl/container/flat_hash_set.h"
#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "common/base/strings.h"
#include "common/metrics/text_format.h"

namespace flashserve::metrics {
namespace {

// The sample names a family writes; two families may not share any.
template <typename Child>
std::vector<std::string> SampleNames(std::string_view name) {
  if constexpr (std::is_same_v<Child, Histogram>) {
    return {std::string(name), absl::StrCat(::flashserve::ToAbsl(name), "_bucket"),
            absl::StrCat(::flashserve::ToAbsl(name), "_sum"),
            absl::StrCat(::flashserve::ToAbsl(name), "_count")};
  } else {
    return {std::string(name)};
  }
}

absl::Status CheckLabels(std::string_view name, const std::vector<std::string>& labels,
                         bool histogram) {
  absl::flat_hash_set<std::string> seen;
  for (const std::string& label : labels) {
    if (!IsValidLabelName(label)) {
      return absl::InvalidArgumentError(absl::StrCat("metric ", ::flashserve::ToAbsl(name),
                                                     ": invalid label name '", label, "'"));
    }
    if (histogram && label == "le") {
      return absl::InvalidArgumentError(absl::StrCat("metric ", ::flashserve::ToAbsl(name),
                                                     ": 'le' is reserved for histogram buckets"));
    }
    if (!seen.insert(label).second) {
      return absl::InvalidArgumentError(
          absl::StrCat("metric ", ::flashserve::ToAbsl(name), ": label '", label, "' repeated"));
    }
  }
  return absl::OkStatus();
}

}  // namespace

namespace internal {

void FamilyBase::AppendHeader(std::string_view type, std::string* out) const {
  absl::StrAppend(out, "# HELP ", name_, " ", EscapeHelp(help_), "\n# TYPE ", name_, " ",
                  ::flashserve::ToAbsl(type), "\n");
}

std::string FamilyBase::RenderLabels(const std::vector<std::string>& values) const {
  std::string out;
  for (size_t i = 0; i < values.size(); ++i) {
    absl::StrAppend(&out, i == 0 ? "" : ",", label_names_[i], "=\"", EscapeLabelValue(values[i]),
                    "\"");
  }
  return out;
}

}  // namespace internal

template <typename Child>
absl::StatusOr<Family<Child>*> Registry::Add(std::string_view name, std::string_view help,
                                             std::vector<std::string> label_names,
                                             typename Child::Config config) {
  if (!IsValidMetricName(name)) {
    return absl::InvalidArgumentError(absl::StrCat(
        "invalid metric name '", ::flashserve::ToAbsl(name), "' (want [a-zA-Z_:][a-zA-Z0-9_:]*)"));
  }
  const absl::Status labels_ok = CheckLabels(name, label_names, std::is_same_v<Child, Histogram>);
  if (!labels_ok.ok()) return labels_ok;
  const std::vector<std::string> samples = SampleNames<Child>(name);

  absl::MutexLock lock(&mu_);
  for (const std::string& sample : samples) {
    if (sample_names_.contains(sample)) {
      return absl::AlreadyExistsError(absl::StrCat("metric ", ::flashserve::ToAbsl(name),
                                                   ": sample name '", sample,
                                                   "' is already registered"));
    }
  }
  sample_names_.insert(samples.begin(), samples.end());
  auto family = std::make_unique<Family<Child>>(std::string(name), std::string(help),
                                                std::move(label_names), std::move(config));
  Family<Child>* raw = family.get();
  families_.emplace(std::string(name), std::move(family));
  return raw;
}

absl::StatusOr<CounterFamily*> Registry::AddCounter(std::string_view name, std::string_view help,
                                                    std::vector<std::string> label_names) {
  return Add<Counter>(name, help, std::move(label_names), Counter::Config{});
}

absl::StatusOr<GaugeFamily*> Registry::AddGauge(std::string_view name, std::string_view help,
                                                std::vector<std::string> label_names) {
  return Add<Gauge>(name, help, std::move(label_names), Gauge::Config{});
}

absl::StatusOr<HistogramFamily*> Registry::AddHistogram(std::string_view name,
                                                        std::string_view help,
                                                        std::vector<std::string> label_names,
                                                        std::vector<double> bounds) {
  if (!bounds.empty() && bounds.back() == INFINITY) bounds.pop_back();
  for (size_t i = 0; i < bounds.size(); ++i) {
    if (!std::isfinite(bounds[i]) || (i > 0 && !(bounds[i - 1] < bounds[i]))) {
      return absl::InvalidArgumentError(
          absl::StrCat("metric ", ::flashserve::ToAbsl(name),
                       ": histogram bounds must be finite and strictly increasing"));
    }
  }
  return Add<Histogram>(name, help, std::move(label_names), Histogram::Config{std::move(bounds)});
}

std::string Registry::Expose() const {
  std::string out;
  absl::MutexLock lock(&mu_);
  for (const auto& [name, family] : families_) family->AppendTo(&out);
  return out;
}

}  // namespace flashserve::metrics
