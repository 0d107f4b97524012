// The command lines of the GPU bench_* binaries: `--name N` options with integer values in a
// range, and switches without a value. Host code, no CUDA.
#pragma once

#include <cstdint>
#include <initializer_list>
#include <limits>
#include <string>

namespace flashserve::kernels {

// One option: an integer (`int` or `int64_t` target, accepted in [min, max]) or a switch (`bool`
// target, set to true when present).
class BenchFlag {
 public:
  BenchFlag(const char* name, int* value, int64_t min = 1,
            int64_t max = std::numeric_limits<int>::max())
      : name_(name), i32_(value), min_(min), max_(max) {}
  BenchFlag(const char* name, int64_t* value, int64_t min = 1,
            int64_t max = std::numeric_limits<int64_t>::max())
      : name_(name), i64_(value), min_(min), max_(max) {}
  BenchFlag(const char* name, bool* value) : name_(name), switch_(value) {}

  const char* name() const { return name_; }
  bool is_switch() const { return switch_ != nullptr; }
  int64_t min() const { return min_; }
  int64_t max() const { return max_; }
  void Set(int64_t v) const;  // integer options
  void Set() const;           // switches

 private:
  const char* name_;
  int* i32_ = nullptr;
  int64_t* i64_ = nullptr;
  bool* switch_ = nullptr;
  int64_t min_ = 0, max_ = 0;
};

// Parses argv[1 ..] against `flags`, appending every argument to *command (the command line as
// run, for the bench's report; it should start as argv[0]). An unknown argument, a missing value,
// a value that is not a whole decimal integer or lies outside the option's range prints the reason
// and a usage line ("usage: <argv[0]> [--iters N] ... [--separate]") to stderr and returns false;
// the targets of the options parsed before it keep their new values.
bool ParseBenchFlags(int argc, char** argv, std::initializer_list<BenchFlag> flags,
                     std::string* command);

}  // namespace flashserve::kernels
