// Element types of the safetensors format and their on-disk names and sizes.
#pragma once

#include <cstddef>
#include <string_view>

#include "absl/status/statusor.h"

namespace flashserve::safetensors {

// The dtypes a safetensors header may name. FP4 (E2M1) data is stored packed, two values per
// byte, as kU8 or kI8; the format has no 4-bit dtype, so sizes are always whole bytes.
enum class DType {
  kBool,
  kU8,
  kI8,
  kI16,
  kU16,
  kI32,
  kU32,
  kI64,
  kU64,
  kF16,
  kBF16,
  kF32,
  kF64,
  kF8E4M3,
  kF8E5M2,
  kF8E8M0,
};

// Every DType, in declaration order (for tests and exhaustive switches).
inline constexpr DType kAllDTypes[] = {
    DType::kBool, DType::kU8,     DType::kI8,     DType::kI16,    DType::kU16,  DType::kI32,
    DType::kU32,  DType::kI64,    DType::kU64,    DType::kF16,    DType::kBF16, DType::kF32,
    DType::kF64,  DType::kF8E4M3, DType::kF8E5M2, DType::kF8E8M0,
};

// Maps a header name ("BOOL", "U8", "I8", ..., "BF16", "F8_E4M3", "F8_E5M2", "F8_E8M0") to its
// DType. Names are case-sensitive, as the format writes them.
// Errors: InvalidArgument naming the unknown dtype. Thread-safe, no allocation on success.
absl::StatusOr<DType> ParseDType(std::string_view name);

// The header name of `dtype` (inverse of ParseDType). Returns a static string. Thread-safe.
std::string_view DTypeName(DType dtype);

// Size of one element in bytes (1 for kBool and the FP8 types). Thread-safe.
size_t DTypeSize(DType dtype);

}  // namespace flashserve::safetensors
