#include "common/safetensors/dtype.h"

#include <string>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"

namespace flashserve::safetensors {
namespace {

struct DTypeInfo {
  DType dtype;
  std::string_view name;
  size_t size;
};

// Indexed by the enum's value; the static_assert below keeps it in step with the enum.
constexpr DTypeInfo kInfo[] = {
    {DType::kBool, "BOOL", 1},      {DType::kU8, "U8", 1},          {DType::kI8, "I8", 1},
    {DType::kI16, "I16", 2},        {DType::kU16, "U16", 2},        {DType::kI32, "I32", 4},
    {DType::kU32, "U32", 4},        {DType::kI64, "I64", 8},        {DType::kU64, "U64", 8},
    {DType::kF16, "F16", 2},        {DType::kBF16, "BF16", 2},      {DType::kF32, "F32", 4},
    {DType::kF64, "F64", 8},        {DType::kF8E4M3, "F8_E4M3", 1}, {DType::kF8E5M2, "F8_E5M2", 1},
    {DType::kF8E8M0, "F8_E8M0", 1},
};
static_assert(std::size(kInfo) == std::size(kAllDTypes));

constexpr bool InfoMatchesEnum() {
  for (size_t i = 0; i < std::size(kInfo); ++i) {
    if (static_cast<size_t>(kInfo[i].dtype) != i) return false;
  }
  return true;
}
static_assert(InfoMatchesEnum(), "kInfo must be indexed by DType");

const DTypeInfo& Info(DType dtype) { return kInfo[static_cast<size_t>(dtype)]; }

}  // namespace

absl::StatusOr<DType> ParseDType(std::string_view name) {
  for (const DTypeInfo& info : kInfo) {
    if (info.name == name) return info.dtype;
  }
  return absl::InvalidArgumentError(
      absl::StrCat("unknown safetensors dtype \"", std::string(name), "\""));
}

std::string_view DTypeName(DType dtype) { return Info(dtype).name; }

size_t DTypeSize(DType dtype) { return Info(dtype).size; }

}  // namespace flashserve::safetensors
