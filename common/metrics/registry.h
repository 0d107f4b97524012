// A Prometheus metrics registry that writes the text exposition format (0.0.4) itself.
//
//   Registry registry;
//   ASSIGN_OR_RETURN(CounterFamily* reads, registry.AddCounter(
//       "fs_cache_reads_total", "Blocks read, by tier.", {"tier"}));
//   Counter& ssd_reads = reads->WithLabels({"ssd"});   // once, at start-up
//   ssd_reads.Increment();                             // hot path: lock-free
//   std::string body = registry.Expose();              // GET /metrics
//
// Ownership: the Registry owns its families and their children; pointers and references handed
// out stay valid until the Registry is destroyed. Thread safety: all methods are thread-safe;
// registration and Expose take a mutex, updates to a child never do. Families cannot be removed.
#pragma once

#include <map>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_set.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "common/metrics/family.h"
#include "common/metrics/metric_types.h"

namespace flashserve::metrics {

class Registry {
 public:
  Registry() = default;
  Registry(const Registry&) = delete;
  Registry& operator=(const Registry&) = delete;

  // Registers a family. Errors (at registration, never at scrape):
  //   InvalidArgument: name not [a-zA-Z_:][a-zA-Z0-9_:]*; a label name not [a-zA-Z_][a-zA-Z0-9_]*,
  //     starting with "__", or repeated; "le" as a histogram label; histogram bounds that are not
  //     finite and strictly increasing (a trailing +Inf is accepted and dropped).
  //   AlreadyExists: the name, or a sample name it produces (a histogram's name_bucket, name_sum,
  //     name_count), is already taken by another family.
  absl::StatusOr<CounterFamily*> AddCounter(std::string_view name, std::string_view help,
                                            std::vector<std::string> label_names = {});
  absl::StatusOr<GaugeFamily*> AddGauge(std::string_view name, std::string_view help,
                                        std::vector<std::string> label_names = {});
  absl::StatusOr<HistogramFamily*> AddHistogram(std::string_view name, std::string_view help,
                                                std::vector<std::string> label_names,
                                                std::vector<double> bounds);

  // The exposition text: for each family sorted by name, "# HELP" and "# TYPE" lines then its
  // samples, children sorted by label values. Cost: proportional to the number of series.
  std::string Expose() const;

 private:
  template <typename Child>
  absl::StatusOr<Family<Child>*> Add(std::string_view name, std::string_view help,
                                     std::vector<std::string> label_names,
                                     typename Child::Config config);

  mutable absl::Mutex mu_;
  std::map<std::string, std::unique_ptr<internal::FamilyBase>> families_ ABSL_GUARDED_BY(mu_);
  absl::flat_hash_set<std::string> sample_names_ ABSL_GUARDED_BY(mu_);
};

}  // namespace flashserve::metrics
