#include "common/options/byte_size.h"

#include <array>
#include <cstdint>
#include <limits>
#include <string>
#include <string_view>

#include "absl/numeric/int128.h"
#include "absl/status/status.h"
#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"

namespace flashserve::options {
namespace {

struct Unit {
  absl::string_view name;  // canonical spelling, used by FormatByteSize
  absl::string_view alias;
  uint64_t multiplier;
};

constexpr uint64_t kKilo = 1000;
constexpr std::array<Unit, 11> kUnits = {{
    {"B", "", 1},
    {"KiB", "Ki", uint64_t{1} << 10},
    {"MiB", "Mi", uint64_t{1} << 20},
    {"GiB", "Gi", uint64_t{1} << 30},
    {"TiB", "Ti", uint64_t{1} << 40},
    {"PiB", "Pi", uint64_t{1} << 50},
    {"KB", "K", kKilo},
    {"MB", "M", kKilo* kKilo},
    {"GB", "G", kKilo* kKilo* kKilo},
    {"TB", "T", kKilo* kKilo* kKilo* kKilo},
    {"PB", "P", kKilo* kKilo* kKilo* kKilo* kKilo},
}};

bool IsDigit(char c) { return c >= '0' && c <= '9'; }

absl::Status Invalid(absl::string_view text, absl::string_view why) {
  return absl::InvalidArgumentError(absl::StrCat("invalid byte size '", text, "': ", why,
                                                 " (examples: 4096, 512MiB, 10GiB, 1.5GB)"));
}

}  // namespace

absl::StatusOr<ByteSize> ParseByteSize(std::string_view std_text) {
  const absl::string_view text(std_text.data(), std_text.size());
  const absl::string_view rest = absl::StripAsciiWhitespace(text);
  if (rest.empty()) return Invalid(text, "empty");

  // Integer and fraction digits, accumulated exactly in 128 bits.
  absl::uint128 whole = 0;
  size_t i = 0;
  for (; i < rest.size() && IsDigit(rest[i]); ++i) {
    whole = whole * 10 + static_cast<uint64_t>(rest[i] - '0');
    if (whole > std::numeric_limits<uint64_t>::max()) return Invalid(text, "too large");
  }
  const size_t whole_digits = i;
  absl::uint128 fraction = 0;
  absl::uint128 fraction_scale = 1;
  size_t fraction_digits = 0;
  if (i < rest.size() && rest[i] == '.') {
    for (++i; i < rest.size() && IsDigit(rest[i]); ++i, ++fraction_digits) {
      if (fraction_digits >= 18) return Invalid(text, "too many fraction digits");
      fraction = fraction * 10 + static_cast<uint64_t>(rest[i] - '0');
      fraction_scale *= 10;
    }
    if (fraction_digits == 0) return Invalid(text, "no digits after the decimal point");
  }
  if (whole_digits == 0) return Invalid(text, "expected a number");

  absl::string_view unit_text = absl::StripLeadingAsciiWhitespace(rest.substr(i));
  const Unit* unit = nullptr;
  for (const Unit& u : kUnits) {
    if (absl::EqualsIgnoreCase(unit_text, u.name) || absl::EqualsIgnoreCase(unit_text, u.alias)) {
      unit = &u;
      break;
    }
  }
  if (unit == nullptr) return Invalid(text, absl::StrCat("unknown unit '", unit_text, "'"));

  const absl::uint128 scaled_fraction = fraction * unit->multiplier;  // < 10^18 * 2^50: fits
  if (scaled_fraction % fraction_scale != 0) return Invalid(text, "not a whole number of bytes");
  const absl::uint128 max = std::numeric_limits<uint64_t>::max();
  // whole < 2^64 and multiplier <= 2^50, so the product fits in 128 bits.
  const absl::uint128 total = whole * unit->multiplier + scaled_fraction / fraction_scale;
  if (total > max) return Invalid(text, "too large");
  return ByteSize{absl::Uint128Low64(total)};
}

std::string FormatByteSize(ByteSize size) {
  if (size.bytes == 0) return "0B";
  // kUnits lists binary units before decimal ones, each group smallest first: walk each group
  // from its largest unit so the first exact divisor is the largest in the preferred group.
  for (int group_begin : {1, 6}) {
    for (int u = group_begin + 4; u >= group_begin; --u) {
      if (size.bytes % kUnits[u].multiplier == 0) {
        return absl::StrCat(size.bytes / kUnits[u].multiplier, kUnits[u].name);
      }
    }
  }
  return absl::StrCat(size.bytes, "B");
}

}  // namespace flashserve::options
