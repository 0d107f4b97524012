// Ready-made validators for OptionSet::Add. Each returns InvalidArgument with a short reason; the
// OptionSet adds the key, value and source to the message.
#pragma once

#include <algorithm>
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/time/time.h"
#include "common/options/byte_size.h"
#include "common/options/option_set.h"

namespace flashserve::options {
namespace internal {
inline std::string ForMessage(int64_t v) { return absl::StrCat(v); }
inline std::string ForMessage(double v) { return absl::StrCat(v); }
inline std::string ForMessage(absl::Duration v) { return absl::FormatDuration(v); }
inline std::string ForMessage(ByteSize v) { return FormatByteSize(v); }
}  // namespace internal

// value >= min. T: int64_t, double, absl::Duration or ByteSize.
template <typename T>
Validator<T> AtLeast(T min) {
  return [min](const T& v) {
    if (v >= min) return absl::OkStatus();
    return absl::InvalidArgumentError(absl::StrCat("must be at least ", internal::ForMessage(min)));
  };
}

// lo <= value <= hi.
template <typename T>
Validator<T> InRange(T lo, T hi) {
  return [lo, hi](const T& v) {
    if (v >= lo && v <= hi) return absl::OkStatus();
    return absl::InvalidArgumentError(absl::StrCat("must be in [", internal::ForMessage(lo), ", ",
                                                   internal::ForMessage(hi), "]"));
  };
}

// A non-empty string.
inline Validator<std::string> NonEmpty() {
  return [](const std::string& v) {
    return v.empty() ? absl::InvalidArgumentError("must not be empty") : absl::OkStatus();
  };
}

// One of a fixed set of strings (an enum-like option).
inline Validator<std::string> OneOf(std::vector<std::string> allowed) {
  return [allowed = std::move(allowed)](const std::string& v) {
    if (std::find(allowed.begin(), allowed.end(), v) != allowed.end()) return absl::OkStatus();
    return absl::InvalidArgumentError(
        absl::StrCat("must be one of: ", absl::StrJoin(allowed, ", ")));
  };
}

}  // namespace flashserve::options
