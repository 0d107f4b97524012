#include "common/metrics/registry.h"

#include <cstdint>
#include <map>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/numbers.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace flashserve::metrics {
namespace {

using ::testing::HasSubstr;

TEST(RegistryTest, CounterGaugeHistogramExactText) {
  Registry registry;
  absl::StatusOr<CounterFamily*> reads =
      registry.AddCounter("fs_cache_reads_total", "Blocks read, by tier.", {"tier", "op"});
  absl::StatusOr<GaugeFamily*> depth = registry.AddGauge("fs_queue_depth", "Waiting requests.");
  absl::StatusOr<HistogramFamily*> latency =
      registry.AddHistogram("fs_prefill_seconds", "Prefill time.", {"model"}, {0.1, 1, 2.5});
  ASSERT_TRUE(reads.ok() && depth.ok() && latency.ok());

  (*reads)->WithLabels({"ssd", "get"}).Increment(3);
  (*reads)->WithLabels({"dram", "get"}).Increment();
  (*reads)->WithLabels({"dram", "get"}).Increment(0.5);
  (*depth)->WithLabels({}).Set(7);
  (*depth)->WithLabels({}).Decrement(2);
  Histogram& h = (*latency)->WithLabels({"flash"});
  for (double v : {0.05, 0.1, 0.7, 3.0}) h.Observe(v);

  EXPECT_EQ(registry.Expose(),
            "# HELP fs_cache_reads_total Blocks read, by tier.\n"
            "# TYPE fs_cache_reads_total counter\n"
            "fs_cache_reads_total{tier=\"dram\",op=\"get\"} 1.5\n"
            "fs_cache_reads_total{tier=\"ssd\",op=\"get\"} 3\n"
            "# HELP fs_prefill_seconds Prefill time.\n"
            "# TYPE fs_prefill_seconds histogram\n"
            "fs_prefill_seconds_bucket{model=\"flash\",le=\"0.1\"} 2\n"
            "fs_prefill_seconds_bucket{model=\"flash\",le=\"1\"} 3\n"
            "fs_prefill_seconds_bucket{model=\"flash\",le=\"2.5\"} 3\n"
            "fs_prefill_seconds_bucket{model=\"flash\",le=\"+Inf\"} 4\n"
            "fs_prefill_seconds_sum{model=\"flash\"} 3.85\n"
            "fs_prefill_seconds_count{model=\"flash\"} 4\n"
            "# HELP fs_queue_depth Waiting requests.\n"
            "# TYPE fs_queue_depth gauge\n"
            "fs_queue_depth 5\n");
}

TEST(RegistryTest, UnlabelledFamiliesAreExposedAtZero) {
  Registry registry;
  ASSERT_TRUE(registry.AddCounter("a_total", "A.").ok());
  ASSERT_TRUE(registry.AddHistogram("b_seconds", "B.", {}, {1}).ok());
  ASSERT_TRUE(registry.AddGauge("c", "C.", {"x"}).ok());  // labelled: no child yet
  EXPECT_EQ(registry.Expose(),
            "# HELP a_total A.\n# TYPE a_total counter\na_total 0\n"
            "# HELP b_seconds B.\n# TYPE b_seconds histogram\n"
            "b_seconds_bucket{le=\"1\"} 0\nb_seconds_bucket{le=\"+Inf\"} 0\n"
            "b_seconds_sum 0\nb_seconds_count 0\n"
            "# HELP c C.\n# TYPE c gauge\n");
}

TEST(RegistryTest, EscapesHelpAndLabelValues) {
  Registry registry;
  absl::StatusOr<GaugeFamily*> g =
      registry.AddGauge("g", "Back\\slash and\nnewline \"quotes stay\".", {"path"});
  ASSERT_TRUE(g.ok());
  (*g)->WithLabels({"C:\\dir \"x\"\nnext"}).Set(-1.25);
  EXPECT_EQ(registry.Expose(),
            "# HELP g Back\\\\slash and\\nnewline \"quotes stay\".\n"
            "# TYPE g gauge\n"
            "g{path=\"C:\\\\dir \\\"x\\\"\\nnext\"} -1.25\n");
}

TEST(RegistryTest, ChildrenAreStableAndSortedByLabelValues) {
  Registry registry;
  CounterFamily* family = *registry.AddCounter("c_total", "C.", {"k"});
  Counter& b = family->WithLabels({"b"});
  Counter& a = family->WithLabels({"a"});
  const std::vector<std::string> b_again = {"b"};
  EXPECT_EQ(&family->WithLabels(b_again), &b);
  EXPECT_NE(&a, &b);
  EXPECT_EQ(family->size(), 2u);
  const std::string text = registry.Expose();
  EXPECT_LT(text.find("k=\"a\""), text.find("k=\"b\""));
}

TEST(RegistryTest, RejectsInvalidNamesAndLabels) {
  Registry registry;
  for (const char* bad : {"", "1abc", "a-b", "a b", "a.b", "é"}) {
    absl::StatusOr<CounterFamily*> c = registry.AddCounter(bad, "x");
    ASSERT_FALSE(c.ok()) << bad;
    EXPECT_EQ(c.status().code(), absl::StatusCode::kInvalidArgument);
    EXPECT_THAT(c.status().message(), HasSubstr("invalid metric name"));
  }
  EXPECT_TRUE(registry.AddCounter("_ok:name_1", "x").ok());
  int n = 0;
  for (std::vector<std::string> labels : std::vector<std::vector<std::string>>{
           {"a:b"}, {"__x"}, {"1a"}, {""}, {"a", "a"}, {"ok", "b-c"}}) {
    absl::StatusOr<GaugeFamily*> g = registry.AddGauge("g_" + std::to_string(n++), "x", labels);
    ASSERT_FALSE(g.ok()) << labels[0];
    EXPECT_EQ(g.status().code(), absl::StatusCode::kInvalidArgument) << g.status();
  }
  EXPECT_FALSE(registry.AddHistogram("h", "x", {"le"}, {1}).ok());
  EXPECT_TRUE(registry.AddGauge("g_le", "x", {"le"}).ok());  // only histograms reserve le
  EXPECT_FALSE(registry.AddHistogram("h1", "x", {}, {2, 1}).ok());
  EXPECT_FALSE(registry.AddHistogram("h2", "x", {}, {1, 1}).ok());
  EXPECT_FALSE(registry.AddHistogram("h3", "x", {}, {NAN}).ok());
  EXPECT_FALSE(registry.AddHistogram("h4", "x", {}, {-INFINITY, 1}).ok());
  absl::StatusOr<HistogramFamily*> inf = registry.AddHistogram("h5", "x", {}, {1, INFINITY});
  ASSERT_TRUE(inf.ok());
  EXPECT_EQ((*inf)->WithLabels({}).bounds(), std::vector<double>{1});
}

TEST(RegistryTest, DuplicateNamesAreRejected) {
  Registry registry;
  ASSERT_TRUE(registry.AddCounter("x_total", "x").ok());
  absl::StatusOr<GaugeFamily*> again = registry.AddGauge("x_total", "x");
  ASSERT_FALSE(again.ok());
  EXPECT_EQ(again.status().code(), absl::StatusCode::kAlreadyExists);
  ASSERT_TRUE(registry.AddHistogram("lat", "x", {}, {1}).ok());
  EXPECT_EQ(registry.AddGauge("lat_count", "x").status().code(), absl::StatusCode::kAlreadyExists);
  ASSERT_TRUE(registry.AddGauge("req_sum", "x").ok());
  EXPECT_EQ(registry.AddHistogram("req", "x", {}, {1}).status().code(),
            absl::StatusCode::kAlreadyExists);
  // A failed registration reserves nothing.
  EXPECT_TRUE(registry.AddCounter("req", "x").ok());
}

TEST(RegistryTest, ConcurrentIncrementsSumExactly) {
  Registry registry;
  CounterFamily* counters = *registry.AddCounter("hits_total", "x", {"t"});
  Gauge& gauge = (*registry.AddGauge("level", "x"))->WithLabels({});
  Histogram& hist = (*registry.AddHistogram("sizes", "x", {}, {1, 2}))->WithLabels({});
  constexpr int kThreads = 4;
  constexpr int kPerThread = 100000;
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&, t] {
      Counter& mine = counters->WithLabels({"shared"});
      for (int i = 0; i < kPerThread; ++i) {
        mine.Increment(2);
        gauge.Increment();
        hist.Observe((i + t) % 3);  // 0, 1, 2: integer sums stay exact
      }
    });
  }
  for (std::thread& t : threads) t.join();
  EXPECT_EQ(counters->WithLabels({"shared"}).Value(), 2.0 * kThreads * kPerThread);
  EXPECT_EQ(gauge.Value(), 1.0 * kThreads * kPerThread);
  const Histogram::Snapshot s = hist.Read();
  EXPECT_EQ(s.cumulative.back(), uint64_t{kThreads} * kPerThread);
  uint64_t expected_sum = 0;
  uint64_t le1 = 0;
  for (int t = 0; t < kThreads; ++t) {
    for (int i = 0; i < kPerThread; ++i) {
      expected_sum += (i + t) % 3;
      le1 += (i + t) % 3 <= 1;
    }
  }
  EXPECT_EQ(s.sum, static_cast<double>(expected_sum));
  EXPECT_EQ(s.cumulative[0], le1);
  EXPECT_EQ(s.cumulative[1], uint64_t{kThreads} * kPerThread);
}

}  // namespace
}  // namespace flashserve::metrics
