// Byte sizes written the way operators write them: "10GiB", "512MiB", "1.5GB", "4096".
#pragma once

#include <compare>
#include <cstdint>
#include <string>
#include <string_view>

#include "absl/status/statusor.h"

namespace flashserve::options {

// A count of bytes. A distinct type rather than a bare integer so that an options field declares
// that its text form carries a unit ("10GiB"), and so that it cannot be confused with an int64
// option in OptionSet::Add.
struct ByteSize {
  uint64_t bytes = 0;

  static constexpr ByteSize KiB(uint64_t n) { return {n << 10}; }
  static constexpr ByteSize MiB(uint64_t n) { return {n << 20}; }
  static constexpr ByteSize GiB(uint64_t n) { return {n << 30}; }
  static constexpr ByteSize TiB(uint64_t n) { return {n << 40}; }

  friend constexpr auto operator<=>(ByteSize, ByteSize) = default;
};

// Parses "<number>[ ]<unit>". The number is decimal digits with an optional fraction ("1.5").
// Units (case-insensitive): none or B = bytes; KB MB GB TB PB (and K M G T P) are powers of 1000;
// KiB MiB GiB TiB PiB (and Ki Mi Gi Ti Pi) are powers of 1024.
// Errors: InvalidArgument for an empty string, a sign, an unknown unit, a value that is not a
// whole number of bytes ("0.5B") or one that does not fit in 64 bits. Exact: no floating point.
absl::StatusOr<ByteSize> ParseByteSize(std::string_view text);

// Formats exactly, in the largest binary unit that divides the value ("10GiB"), else the largest
// decimal unit ("1500MB"), else bytes ("1000001B"). ParseByteSize(FormatByteSize(x)) == x.
std::string FormatByteSize(ByteSize size);

}  // namespace flashserve::options
