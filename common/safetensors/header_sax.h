// Internal: the SAX handler that turns a safetensors JSON header into HeaderEntry records while
// parsing, so that no DOM is built and malformed input stops at the first problem.
#pragma once

#include <cstdint>
#include <map>
#include <set>
#include <string>
#include <vector>

#include "common/safetensors/header_parser.h"
#include "nlohmann/json.hpp"

namespace flashserve::safetensors::internal {

// Raw per-tensor fields as the header gave them; ParseLayout validates them afterwards.
struct RawEntry {
  std::string name;
  std::string dtype;
  std::vector<int64_t> shape;
  std::vector<uint64_t> offsets;
  bool has_dtype = false;
  bool has_shape = false;
  bool has_offsets = false;
};

// Duck-typed handler for nlohmann::json::sax_parse. After a failed parse, error() holds the
// first problem (without the file label). Not thread-safe; one handler per parse.
class HeaderSax {
 public:
  using json = nlohmann::json;

  bool null() { return Scalar("null"); }
  bool boolean(bool) { return Scalar("a boolean"); }
  bool number_integer(json::number_integer_t value);
  bool number_unsigned(json::number_unsigned_t value);
  bool number_float(json::number_float_t, const json::string_t&) { return Scalar("a float"); }
  bool string(json::string_t& value);
  bool binary(json::binary_t&) { return Scalar("binary"); }
  bool start_object(std::size_t);
  bool key(json::string_t& value);
  bool end_object();
  bool start_array(std::size_t);
  bool end_array();
  bool parse_error(std::size_t position, const std::string& last_token,
                   const nlohmann::detail::exception& ex);

  const std::string& error() const { return error_; }
  std::vector<RawEntry>& entries() { return entries_; }
  std::map<std::string, std::string>& metadata() { return metadata_; }

 private:
  enum class Ctx { kRoot, kMetadata, kEntry, kShape, kOffsets };

  // A non-container value, described for messages.
  bool Scalar(const char* what);
  // Records the first error; returns false so that parsing stops.
  bool Fail(std::string message);
  // Describes where the current value sits, e.g. `tensor "a": field "shape"`.
  std::string Where() const;

  std::vector<Ctx> stack_;  // at most 3 deep: root, entry, shape/offsets
  int skip_depth_ = 0;      // > 0 while skipping the value of an unknown entry field
  bool seen_root_ = false;
  std::string root_key_;  // current tensor name (or "__metadata__")
  std::string field_;     // current key inside an entry or the metadata
  std::set<std::string> root_keys_;
  std::set<std::string> entry_keys_;
  std::vector<RawEntry> entries_;
  std::map<std::string, std::string> metadata_;
  std::string error_;
};

}  // namespace flashserve::safetensors::internal
