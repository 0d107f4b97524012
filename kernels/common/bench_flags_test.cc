// ParseBenchFlags: the bench binaries' option parsing (runs anywhere, no GPU).
#include "kernels/common/bench_flags.h"

#include <cstdint>
#include <string>
#include <vector>

#include "gtest/gtest.h"

namespace flashserve::kernels {
namespace {

struct Args {
  explicit Args(std::vector<std::string> a) : strings(std::move(a)) {
    for (std::string& s : strings) ptrs.push_back(s.data());
  }
  int argc() const { return static_cast<int>(ptrs.size()); }
  char** argv() { return ptrs.data(); }
  std::vector<std::string> strings;
  std::vector<char*> ptrs;
};

struct Opts {
  int iters = 50;
  int warmup = 10;
  int64_t tokens = 16384;
  bool separate = false;
};

bool Parse(Args& a, Opts* o, std::string* command) {
  *command = a.strings[0];
  return ParseBenchFlags(a.argc(), a.argv(),
                         {{"--iters", &o->iters},
                          {"--warmup", &o->warmup, 0},
                          {"--tokens", &o->tokens, 2, int64_t{1} << 40},
                          {"--separate", &o->separate}},
                         command);
}

TEST(BenchFlagsTest, ParsesIntegersAndSwitchesAndRecordsTheCommand) {
  Args a({"bench_x", "--tokens", "4096", "--separate", "--iters", "7", "--warmup", "0"});
  Opts o;
  std::string command;
  ASSERT_TRUE(Parse(a, &o, &command));
  EXPECT_EQ(o.iters, 7);
  EXPECT_EQ(o.warmup, 0);
  EXPECT_EQ(o.tokens, 4096);
  EXPECT_TRUE(o.separate);
  EXPECT_EQ(command, "bench_x --tokens 4096 --separate --iters 7 --warmup 0");
}

TEST(BenchFlagsTest, NoArgumentsKeepTheDefaults) {
  Args a({"bench_x"});
  Opts o;
  std::string command;
  ASSERT_TRUE(Parse(a, &o, &command));
  EXPECT_EQ(o.iters, 50);
  EXPECT_EQ(o.tokens, 16384);
  EXPECT_FALSE(o.separate);
  EXPECT_EQ(command, "bench_x");
}

TEST(BenchFlagsTest, RejectsBadArgumentsWithoutTouchingLaterTargets) {
  for (const std::vector<std::string>& bad : std::vector<std::vector<std::string>>{
           {"bench_x", "--iters", "0"},                         // below the range
           {"bench_x", "--warmup", "-1"},                       // below 0
           {"bench_x", "--tokens", "1"},                        // below its minimum 2
           {"bench_x", "--iters", "3x"},                        // not a whole number
           {"bench_x", "--iters", ""},                          // empty
           {"bench_x", "--iters", "4294967296"},                // beyond int
           {"bench_x", "--iters"},                              // missing value
           {"bench_x", "--bogus", "1"},                         // unknown
           {"bench_x", "--tokens", "99999999999999999999"}}) {  // beyond int64
    SCOPED_TRACE(bad.back());
    Args a(bad);
    Opts o;
    std::string command;
    EXPECT_FALSE(Parse(a, &o, &command));
    EXPECT_EQ(o.iters, 50);
    EXPECT_EQ(o.warmup, 10);
    EXPECT_EQ(o.tokens, 16384);
  }
}

}  // namespace
}  // namespace flashserve::kernels
