#include "common/metrics/metric_types.h"

#include <cmath>
#include <cstdint>
#include <map>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/str_split.h"
#include "absl/time/time.h"
#include "common/base/clock.h"
#include "common/metrics/registry.h"
#include "common/metrics/scoped_timer.h"
#include "common/metrics/text_format.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace flashserve::metrics {
namespace {

TEST(HistogramTest, BoundsAreInclusive) {
  Histogram h(Histogram::Config{{1, 2, 5}});
  for (double v : {-3.0, 1.0, 1.0000001, 2.0, 5.0, 5.0000001, 1e300, double{NAN}}) h.Observe(v);
  const Histogram::Snapshot s = h.Read();
  // le=1: {-3, 1}; le=2: + {1.0000001, 2}; le=5: + {5}; +Inf: + {5.0000001, 1e300}. NaN dropped.
  EXPECT_EQ(s.cumulative, (std::vector<uint64_t>{2, 4, 5, 7}));
  EXPECT_EQ(s.sum, -3.0 + 1.0 + 1.0000001 + 2.0 + 5.0 + 5.0000001 + 1e300);
}

TEST(HistogramTest, NoBoundsMeansOnlyInf) {
  Histogram h(Histogram::Config{});
  h.Observe(4);
  std::string out;
  h.AppendSamples("h", "", &out);
  EXPECT_EQ(out, "h_bucket{le=\"+Inf\"} 1\nh_sum 4\nh_count 1\n");
}

TEST(CounterTest, IgnoresNegativeAndNanIncrements) {
  Counter c(Counter::Config{});
  c.Increment(2.5);
  c.Increment(-1);
  c.Increment(NAN);
  c.Increment(0);
  EXPECT_EQ(c.Value(), 2.5);
}

TEST(GaugeTest, SetIncrementDecrement) {
  Gauge g(Gauge::Config{});
  g.Set(10);
  g.Increment(0.5);
  g.Decrement(3);
  EXPECT_EQ(g.Value(), 7.5);
  g.Set(-2);
  EXPECT_EQ(g.Value(), -2);
}

TEST(TextFormatTest, ValuesAndNames) {
  EXPECT_EQ(FormatValue(0), "0");
  EXPECT_EQ(FormatValue(1), "1");
  EXPECT_EQ(FormatValue(0.1), "0.1");
  EXPECT_EQ(FormatValue(-2.5), "-2.5");
  EXPECT_EQ(FormatValue(1e-05), "1e-05");
  EXPECT_EQ(FormatValue(123456789012), "123456789012");
  EXPECT_EQ(FormatValue(INFINITY), "+Inf");
  EXPECT_EQ(FormatValue(-INFINITY), "-Inf");
  EXPECT_EQ(FormatValue(NAN), "NaN");
  EXPECT_TRUE(IsValidMetricName("a:b_c9"));
  EXPECT_FALSE(IsValidMetricName("9a"));
  EXPECT_TRUE(IsValidLabelName("_a"));
  EXPECT_FALSE(IsValidLabelName("__a"));
  EXPECT_FALSE(IsValidLabelName("a:b"));
}

TEST(BucketsTest, Helpers) {
  EXPECT_EQ(ExponentialBuckets(1, 2, 4), (std::vector<double>{1, 2, 4, 8}));
  EXPECT_EQ(LinearBuckets(0, 0.5, 3), (std::vector<double>{0, 0.5, 1}));
  const std::vector<double> latency = DefaultLatencyBuckets();
  ASSERT_EQ(latency.size(), 18u);
  EXPECT_EQ(latency.front(), 0.0005);
  EXPECT_EQ(latency.back(), 0.0005 * 131072);
}

TEST(ScopedTimerTest, ObservesElapsedFromInjectedClock) {
  FakeClock clock;
  Histogram h(Histogram::Config{{0.1, 1}});
  {
    ScopedTimer timer(h, clock);
    clock.Advance(absl::Milliseconds(250));
  }
  {
    ScopedTimer timer(h, clock);
    clock.Advance(absl::Seconds(3));
    EXPECT_EQ(timer.Stop(), absl::Seconds(3));
    clock.Advance(absl::Seconds(3));
    EXPECT_EQ(timer.Stop(), absl::Seconds(3));  // second Stop observes nothing
  }
  {
    ScopedTimer timer(h, clock);
    clock.Advance(absl::Milliseconds(1));
    timer.Cancel();
  }
  const Histogram::Snapshot s = h.Read();
  EXPECT_EQ(s.cumulative, (std::vector<uint64_t>{0, 1, 2}));
  EXPECT_EQ(s.sum, 3.25);
}

// A minimal reader of the exposition format: enough to check what Expose() writes hangs together.
struct Sample {
  std::string name;
  std::map<std::string, std::string> labels;
  double value = 0;
};

std::string Unescape(std::string_view s) {
  std::string out;
  for (size_t i = 0; i < s.size(); ++i) {
    if (s[i] == '\\' && i + 1 < s.size()) {
      ++i;
      out += s[i] == 'n' ? '\n' : s[i];
    } else {
      out += s[i];
    }
  }
  return out;
}

Sample ParseSample(std::string_view line) {
  Sample sample;
  const size_t brace = line.find('{');
  const size_t space = line.rfind(' ');
  sample.name = std::string(line.substr(0, std::min(brace, space)));
  if (brace != std::string_view::npos) {
    size_t i = brace + 1;
    while (line[i] != '}') {
      const size_t eq = line.find('=', i);
      std::string key(line.substr(i, eq - i));
      size_t j = eq + 2;  // past ="
      while (line[j] != '"') j += line[j] == '\\' ? 2 : 1;
      sample.labels[key] = Unescape(line.substr(eq + 2, j - eq - 2));
      i = j + 1;
      if (line[i] == ',') ++i;
    }
  }
  const std::string_view value = line.substr(space + 1);
  if (value == "+Inf") {
    sample.value = INFINITY;
  } else {
    EXPECT_TRUE(absl::SimpleAtod(absl::string_view(value.data(), value.size()), &sample.value))
        << line;
  }
  return sample;
}

TEST(ExpositionTest, ParsesBackConsistently) {
  Registry registry;
  HistogramFamily* h = *registry.AddHistogram("rpc_seconds", "RPC \"latency\"\nin s.",
                                              {"method", "code"}, {0.01, 0.1, 1});
  CounterFamily* c = *registry.AddCounter("rpc_total", "RPCs.", {"method"});
  const std::vector<std::pair<std::string, std::string>> keys = {
      {"Get", "OK"}, {"Put \"x\"", "OK"}, {"Get", "NOT_FOUND"}, {"a\\b\nc", "OK"}};
  for (size_t k = 0; k < keys.size(); ++k) {
    Histogram& child = h->WithLabels({keys[k].first, keys[k].second});
    for (size_t i = 0; i <= 10 * k; ++i) child.Observe(0.003 * static_cast<double>(i * i));
    c->WithLabels({keys[k].first}).Increment(static_cast<double>(k + 1));
  }

  std::map<std::string, std::string> types;
  std::map<std::string, std::map<std::string, double>> inf_bucket, count;  // by label set
  std::map<std::string, double> last_bucket;
  std::string previous_series;
  const std::vector<std::string> lines = absl::StrSplit(registry.Expose(), '\n', absl::SkipEmpty());
  for (std::string_view line : lines) {
    if (line.starts_with("# TYPE ")) {
      std::vector<std::string> parts = absl::StrSplit(std::string(line.substr(7)), ' ');
      ASSERT_EQ(parts.size(), 2u);
      types[parts[0]] = parts[1];
      continue;
    }
    if (line.starts_with("# HELP ")) {
      EXPECT_EQ(line.find('\n'), std::string_view::npos);
      continue;
    }
    const Sample s = ParseSample(line);
    if (s.name == "rpc_total") {
      EXPECT_EQ(types["rpc_total"], "counter");
      continue;
    }
    ASSERT_EQ(types["rpc_seconds"], "histogram") << line;
    const std::string series = s.labels.at("method") + "|" + s.labels.at("code");
    if (s.name == "rpc_seconds_bucket") {
      const double le = s.labels.at("le") == "+Inf" ? INFINITY : std::stod(s.labels.at("le"));
      if (series == previous_series) {
        EXPECT_GE(s.value, last_bucket[series]) << line;
      }
      last_bucket[series] = s.value;
      previous_series = series;
      if (std::isinf(le)) inf_bucket["rpc_seconds"][series] = s.value;
    } else if (s.name == "rpc_seconds_count") {
      count["rpc_seconds"][series] = s.value;
    } else {
      EXPECT_EQ(s.name, "rpc_seconds_sum");
    }
  }
  ASSERT_EQ(count["rpc_seconds"].size(), keys.size());
  EXPECT_EQ(count, inf_bucket);
  for (size_t k = 0; k < keys.size(); ++k) {
    EXPECT_EQ(count["rpc_seconds"][keys[k].first + "|" + keys[k].second], 10.0 * k + 1);
  }
}

}  // namespace
}  // namespace flashserve::metrics
