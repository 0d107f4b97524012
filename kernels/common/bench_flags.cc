// ParseBenchFlags (bench_flags.h).
#include "kernels/common/bench_flags.h"

#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>

namespace flashserve::kernels {
namespace {

void PrintUsage(const char* argv0, std::initializer_list<BenchFlag> flags) {
  std::string usage = std::string("usage: ") + argv0;
  for (const BenchFlag& f : flags) {
    usage += std::string(" [") + f.name() + (f.is_switch() ? "]" : " N]");
  }
  std::fprintf(stderr, "%s\n", usage.c_str());
}

// A whole decimal integer (optional sign), no trailing characters, in int64_t's range.
bool ParseInt(const char* s, int64_t* out) {
  if (*s == '\0') return false;
  errno = 0;
  char* end = nullptr;
  const long long v = std::strtoll(s, &end, 10);
  if (errno != 0 || *end != '\0') return false;
  *out = v;
  return true;
}

}  // namespace

void BenchFlag::Set(int64_t v) const {
  if (i32_ != nullptr) *i32_ = static_cast<int>(v);
  if (i64_ != nullptr) *i64_ = v;
}

void BenchFlag::Set() const {
  if (switch_ != nullptr) *switch_ = true;
}

bool ParseBenchFlags(int argc, char** argv, std::initializer_list<BenchFlag> flags,
                     std::string* command) {
  for (int i = 1; i < argc; ++i) {
    *command += std::string(" ") + argv[i];
    const BenchFlag* flag = nullptr;
    for (const BenchFlag& f : flags) {
      if (std::strcmp(argv[i], f.name()) == 0) flag = &f;
    }
    if (flag == nullptr) {
      std::fprintf(stderr, "unknown argument '%s'\n", argv[i]);
      PrintUsage(argv[0], flags);
      return false;
    }
    if (flag->is_switch()) {
      flag->Set();
      continue;
    }
    if (i + 1 >= argc) {
      std::fprintf(stderr, "%s needs a value\n", flag->name());
      PrintUsage(argv[0], flags);
      return false;
    }
    *command += std::string(" ") + argv[++i];
    int64_t v = 0;
    if (!ParseInt(argv[i], &v) || v < flag->min() || v > flag->max()) {
      std::fprintf(stderr, "%s needs a whole number in [%lld, %lld], got '%s'\n", flag->name(),
                   static_cast<long long>(flag->min()), static_cast<long long>(flag->max()),
                   argv[i]);
      PrintUsage(argv[0], flags);
      return false;
    }
    flag->Set(v);
  }
  return true;
}

}  // namespace flashserve::kernels
