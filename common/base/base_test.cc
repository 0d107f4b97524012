#include <atomic>
#include <numeric>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "common/base/check.h"
#include "common/base/clock.h"
#include "common/base/hash.h"
#include "common/base/logging.h"
#include "common/base/status_macros.h"
#include "common/base/thread_pool.h"
#include "gtest/gtest.h"

namespace flashserve {
namespace {

absl::Status FailsWith(absl::StatusCode code) { return absl::Status(code, "inner"); }

absl::Status Propagates(absl::StatusCode code) {
  RETURN_IF_ERROR(FailsWith(code)) << "while doing " << 42;
  return absl::OkStatus();
}

absl::StatusOr<int> Half(int x) {
  if (x % 2 != 0) return absl::InvalidArgumentError("odd");
  return x / 2;
}

absl::StatusOr<int> Quarter(int x) {
  ASSIGN_OR_RETURN(int h, Half(x));
  ASSIGN_OR_RETURN(int q, Half(h), "second halving");
  return q;
}

absl::StatusOr<int> PropagatesIntoStatusOr() {
  RETURN_IF_ERROR(FailsWith(absl::StatusCode::kNotFound)) << "ctx";
  return 1;
}

TEST(StatusMacros, ReturnIfErrorKeepsCodeAndAppendsContext) {
  absl::Status s = Propagates(absl::StatusCode::kDataLoss);
  EXPECT_EQ(s.code(), absl::StatusCode::kDataLoss);
  EXPECT_EQ(s.message(), "inner; while doing 42");
  EXPECT_TRUE(Propagates(absl::StatusCode::kOk).ok());
  absl::StatusOr<int> r = PropagatesIntoStatusOr();
  EXPECT_EQ(r.status().code(), absl::StatusCode::kNotFound);
  EXPECT_EQ(r.status().message(), "inner; ctx");
}

TEST(StatusMacros, AssignOrReturn) {
  EXPECT_EQ(*Quarter(8), 2);
  EXPECT_EQ(Quarter(3).status().message(), "odd");
  EXPECT_EQ(Quarter(6).status().message(), "odd; second halving");
}

TEST(Check, AbortsWithMessage) {
  EXPECT_DEATH(CHECK_EQ(1 + 1, 3) << "arith", "CHECK failed.*arith");
  CHECK(true) << "not evaluated";
}

TEST(Clock, FakeClockAdvances) {
  FakeClock clock;
  absl::Time t0 = clock.Now();
  clock.Advance(absl::Minutes(10));
  EXPECT_EQ(clock.Now() - t0, absl::Minutes(10));
  EXPECT_LT(absl::AbsDuration(Clock::Real()->Now() - absl::Now()), absl::Seconds(5));
}

TEST(Hash, KnownValuesAndIncremental) {
  // XXH3-64 of the empty input with seed 0 (published test vector of the algorithm).
  EXPECT_EQ(Xxh3_64("", 0), 0x2D06800538D394C2ULL);
  std::string data(1000, '\0');
  for (size_t i = 0; i < data.size(); ++i) data[i] = static_cast<char>(i * 31 + 7);
  Xxh3Hasher h(5);
  h.Update(std::string_view(data).substr(0, 333));
  h.Update(std::string_view(data).substr(333));
  EXPECT_EQ(h.Digest(), Xxh3_64(data, 5));
  EXPECT_NE(Xxh3_64(data, 5), Xxh3_64(data, 6));
  data[500] ^= 1;
  EXPECT_NE(h.Digest(), Xxh3_64(data, 5));
  EXPECT_NE(Xxh3_128(data.data(), data.size()), Xxh3_128(data.data(), data.size(), 1));
}

TEST(ThreadPool, ParallelForCoversEveryIndexOnce) {
  ThreadPool pool(3);
  std::vector<std::atomic<int>> hits(10007);
  pool.ParallelFor(hits.size(), 100, [&](size_t b, size_t e) {
    for (size_t i = b; i < e; ++i) hits[i].fetch_add(1);
  });
  for (auto& h : hits) ASSERT_EQ(h.load(), 1);
  std::atomic<int> ran{0};
  for (int i = 0; i < 100; ++i) pool.Schedule([&] { ran.fetch_add(1); });
  pool.ParallelFor(0, 1, [&](size_t, size_t) { FAIL(); });
  // Destruction drains the queue.
}

TEST(ThreadPool, DestructorDrainsQueue) {
  std::atomic<int> ran{0};
  {
    ThreadPool pool(2);
    for (int i = 0; i < 1000; ++i) pool.Schedule([&] { ran.fetch_add(1); });
  }
  EXPECT_EQ(ran.load(), 1000);
}

TEST(Logging, ParseLevel) {
  logging::Level level;
  ASSERT_TRUE(logging::ParseLevel("WARN", &level).ok());
  EXPECT_EQ(level, logging::Level::kWarning);
  absl::Status s = logging::ParseLevel("verbose", &level);
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(s.message().find("verbose"), std::string::npos);
  logging::InitLogging({.level = logging::Level::kError, .json = true, .process_name = "t"});
  EXPECT_FALSE(logging::Enabled(logging::Level::kInfo));
  EXPECT_TRUE(logging::Enabled(logging::Level::kError));
  LOG(INFO) << "dropped";
  LOG(ERROR) << "emitted \"quoted\"";
}

}  // namespace
}  // namespace flashserve
