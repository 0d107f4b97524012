#include "common/safetensors/header_sax.h"

#include <limits>
#include <utility>

#include "absl/strings/str_cat.h"

namespace flashserve::safetensors::internal {
namespace {

constexpr char kMetadataKey[] = "__metadata__";
// torch caps tensors at 64 dims; the cap also bounds memory for hostile shapes.
constexpr size_t kMaxRank = 64;

}  // namespace

bool HeaderSax::Fail(std::string message) {
  if (error_.empty()) error_ = std::move(message);
  return false;
}

std::string HeaderSax::Where() const {
  if (root_key_ == kMetadataKey) return absl::StrCat("\"__metadata__\" key ", QuoteName(field_));
  return absl::StrCat("tensor ", QuoteName(root_key_), ": field ", QuoteName(field_));
}

bool HeaderSax::Scalar(const char* what) {
  if (skip_depth_ > 0) return true;
  if (stack_.empty()) return Fail(absl::StrCat("header is ", what, ", not a JSON object"));
  switch (stack_.back()) {
    case Ctx::kRoot:
      if (root_key_ == kMetadataKey)
        return Fail(absl::StrCat("\"__metadata__\" is ", what, ", not an object"));
      return Fail(
          absl::StrCat("tensor ", QuoteName(root_key_), ": entry is ", what, ", not an object"));
    case Ctx::kMetadata:
      return Fail(absl::StrCat(Where(), ": value is ", what, ", not a string"));
    case Ctx::kEntry:
      if (field_ == "dtype") return Fail(absl::StrCat(Where(), " is ", what, ", not a string"));
      if (field_ == "shape" || field_ == "data_offsets") {
        return Fail(absl::StrCat(Where(), " is ", what, ", not an array"));
      }
      return true;  // unknown scalar field: ignored
    case Ctx::kShape:
      return Fail(absl::StrCat(Where(), ": dim is ", what, ", not an integer"));
    case Ctx::kOffsets:
      return Fail(absl::StrCat(Where(), ": element is ", what, ", not an unsigned integer"));
  }
  return Fail("internal: unknown parser context");
}

bool HeaderSax::number_integer(json::number_integer_t value) {
  // nlohmann reports non-negative integers through number_unsigned; this one is negative.
  if (skip_depth_ > 0 || stack_.empty()) return Scalar("a negative integer");
  if (stack_.back() == Ctx::kShape) {
    return Fail(absl::StrCat(Where(), ": negative dim ", value));
  }
  if (stack_.back() == Ctx::kOffsets) {
    return Fail(absl::StrCat(Where(), ": negative offset ", value));
  }
  return Scalar("an integer");
}

bool HeaderSax::number_unsigned(json::number_unsigned_t value) {
  if (skip_depth_ > 0 || stack_.empty()) return Scalar("an integer");
  if (stack_.back() == Ctx::kShape) {
    if (value > static_cast<uint64_t>(std::numeric_limits<int64_t>::max())) {
      return Fail(absl::StrCat(Where(), ": dim ", value, " exceeds int64"));
    }
    auto& shape = entries_.back().shape;
    if (shape.size() >= kMaxRank)
      return Fail(absl::StrCat(Where(), ": more than ", kMaxRank, " dims"));
    shape.push_back(static_cast<int64_t>(value));
    return true;
  }
  if (stack_.back() == Ctx::kOffsets) {
    auto& offsets = entries_.back().offsets;
    if (offsets.size() >= 2) return Fail(absl::StrCat(Where(), " must be [begin, end]"));
    offsets.push_back(value);
    return true;
  }
  return Scalar("an integer");
}

bool HeaderSax::string(json::string_t& value) {
  if (skip_depth_ > 0 || stack_.empty()) return Scalar("a string");
  if (stack_.back() == Ctx::kMetadata) {
    metadata_[field_] = std::move(value);
    return true;
  }
  if (stack_.back() == Ctx::kEntry && field_ == "dtype") {
    entries_.back().dtype = std::move(value);
    entries_.back().has_dtype = true;
    return true;
  }
  return Scalar("a string");
}

bool HeaderSax::start_object(std::size_t) {
  if (skip_depth_ > 0) {
    ++skip_depth_;
    return true;
  }
  if (stack_.empty()) {
    if (seen_root_) return Fail("header holds more than one JSON value");
    seen_root_ = true;
    stack_.push_back(Ctx::kRoot);
    return true;
  }
  switch (stack_.back()) {
    case Ctx::kRoot:
      if (root_key_ == kMetadataKey) {
        stack_.push_back(Ctx::kMetadata);
      } else {
        entries_.push_back(RawEntry{.name = root_key_});
        entry_keys_.clear();
        stack_.push_back(Ctx::kEntry);
      }
      return true;
    case Ctx::kEntry:
      if (field_ == "dtype" || field_ == "shape" || field_ == "data_offsets") break;
      skip_depth_ = 1;
      return true;
    default:
      break;
  }
  return Scalar("an object");
}

bool HeaderSax::start_array(std::size_t) {
  if (skip_depth_ > 0) {
    ++skip_depth_;
    return true;
  }
  if (!stack_.empty() && stack_.back() == Ctx::kEntry) {
    if (field_ == "shape") {
      entries_.back().has_shape = true;
      stack_.push_back(Ctx::kShape);
      return true;
    }
    if (field_ == "data_offsets") {
      entries_.back().has_offsets = true;
      stack_.push_back(Ctx::kOffsets);
      return true;
    }
    if (field_ != "dtype") {
      skip_depth_ = 1;
      return true;
    }
  }
  return Scalar("an array");
}

bool HeaderSax::key(json::string_t& value) {
  if (skip_depth_ > 0) return true;
  // Keys only arrive inside objects, so the stack is non-empty and its top is an object.
  switch (stack_.back()) {
    case Ctx::kRoot:
      if (!root_keys_.insert(value).second) {
        return Fail(absl::StrCat("duplicate key ", QuoteName(value), " in the header"));
      }
      root_key_ = std::move(value);
      return true;
    case Ctx::kMetadata:
      if (metadata_.count(value) != 0) {
        return Fail(absl::StrCat("duplicate key ", QuoteName(value), " in \"__metadata__\""));
      }
      field_ = std::move(value);
      return true;
    case Ctx::kEntry:
      if (!entry_keys_.insert(value).second) {
        return Fail(
            absl::StrCat("tensor ", QuoteName(root_key_), ": duplicate field ", QuoteName(value)));
      }
      field_ = std::move(value);
      return true;
    default:
      return Fail("internal: key outside an object");
  }
}

bool HeaderSax::end_object() {
  if (skip_depth_ > 0) {
    --skip_depth_;
    return true;
  }
  stack_.pop_back();
  return true;
}

bool HeaderSax::end_array() {
  if (skip_depth_ > 0) {
    --skip_depth_;
    return true;
  }
  stack_.pop_back();
  return true;
}

bool HeaderSax::parse_error(std::size_t position, const std::string& last_token,
                            const nlohmann::detail::exception& ex) {
  return Fail(absl::StrCat("header is not valid JSON (byte ", position, "): ", ex.what()));
}

}  // namespace flashserve::safetensors::internal
