// A metric family: one name, help text and fixed list of label names; one child per distinct
// tuple of label values. Created by Registry (registry.h), which owns it.
#pragma once

#include <initializer_list>
#include <map>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"
#include "absl/types/span.h"
#include "common/base/check.h"
#include "common/metrics/metric_types.h"

namespace flashserve::metrics {
namespace internal {

// The type-independent part: name, help, labels, and the exposition of the whole family.
class FamilyBase {
 public:
  FamilyBase(std::string name, std::string help, std::vector<std::string> label_names)
      : name_(std::move(name)), help_(std::move(help)), label_names_(std::move(label_names)) {}
  virtual ~FamilyBase() = default;
  FamilyBase(const FamilyBase&) = delete;
  FamilyBase& operator=(const FamilyBase&) = delete;

  const std::string& name() const { return name_; }
  const std::vector<std::string>& label_names() const { return label_names_; }

  // Appends "# HELP", "# TYPE" and every child's samples, children sorted by label values.
  virtual void AppendTo(std::string* out) const = 0;

 protected:
  void AppendHeader(std::string_view type, std::string* out) const;
  // `a="x",b="y"` for the given values (escaped), in label-name order.
  std::string RenderLabels(const std::vector<std::string>& values) const;

 private:
  const std::string name_;
  const std::string help_;
  const std::vector<std::string> label_names_;
};

}  // namespace internal

// Child is Counter, Gauge or Histogram. Thread-safe: WithLabels takes the family's mutex; the
// returned child is updated lock-free.
template <typename Child>
class Family final : public internal::FamilyBase {
 public:
  Family(std::string name, std::string help, std::vector<std::string> label_names,
         typename Child::Config config)
      : FamilyBase(std::move(name), std::move(help), std::move(label_names)),
        config_(std::move(config)) {
    // An unlabelled family has exactly one child; create it so it is exposed (as 0) at once.
    if (this->label_names().empty()) Get({});
  }

  // The child for these label values (one per label name, in order), created on first use. The
  // reference stays valid for the life of the Registry: look it up once, keep it, and update it
  // on the hot path. Cost: a mutex and a map lookup. CHECK-fails if the number of values differs
  // from the number of label names (a programming error). Values may be any UTF-8 text.
  Child& WithLabels(std::initializer_list<std::string_view> values) {
    return Get(std::vector<std::string>(values.begin(), values.end()));
  }
  Child& WithLabels(absl::Span<const std::string> values) {
    return Get(std::vector<std::string>(values.begin(), values.end()));
  }

  // Number of children created so far.
  size_t size() const {
    absl::MutexLock lock(&mu_);
    return children_.size();
  }

  void AppendTo(std::string* out) const override {
    AppendHeader(Child::kType, out);
    absl::MutexLock lock(&mu_);
    for (const auto& [values, child] : children_) {
      child->AppendSamples(name(), RenderLabels(values), out);
    }
  }

 private:
  Child& Get(std::vector<std::string> values) {
    CHECK_EQ(values.size(), label_names().size()) << "metric " << name() << ": wrong label count";
    absl::MutexLock lock(&mu_);
    std::unique_ptr<Child>& child = children_[std::move(values)];
    if (child == nullptr) child = std::make_unique<Child>(config_);
    return *child;
  }

  const typename Child::Config config_;
  mutable absl::Mutex mu_;
  // std::map: exposition in label-value order; unique_ptr: children never move.
  std::map<std::vector<std::string>, std::unique_ptr<Child>> children_ ABSL_GUARDED_BY(mu_);
};

using CounterFamily = Family<Counter>;
using GaugeFamily = Family<Gauge>;
using HistogramFamily = Family<Histogram>;

}  // namespace flashserve::metrics
