// Zero-copy reader for one .safetensors file.
//
// Format: an 8-byte little-endian header length N, N bytes of JSON header, then the data
// section. The header maps tensor names to {"dtype", "shape", "data_offsets": [begin, end]}
// (offsets relative to the data section) plus an optional "__metadata__" string->string map.
//
//   ASSIGN_OR_RETURN(auto file, SafetensorsFile::Open(path));
//   ASSIGN_OR_RETURN(TensorView w, file->GetChecked("embed.weight", DType::kBF16, {2048, 256}));
//   std::span<const uint16_t> bits = w.as<uint16_t>();
//
// Every structural property is validated once in Open/FromBytes (see README.md), so Get never
// reads outside the mapping. Malformed files yield kDataLoss naming the file (and the tensor).
#pragma once

#include <cstddef>
#include <cstdint>
#include <initializer_list>
#include <map>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"
#include "common/base/check.h"
#include "common/safetensors/dtype.h"

namespace flashserve::safetensors {

// Largest header accepted; real checkpoints use well under 10 MB.
inline constexpr uint64_t kMaxHeaderBytes = 100ull << 20;

// A tensor inside an open file. Does not own anything: `name` and `data` point into the
// SafetensorsFile (for files from Open, `data` points into the read-only mmap), and are valid
// while that object lives. Copyable; safe to read from any thread.
struct TensorView {
  std::string_view name;
  DType dtype = DType::kU8;
  std::vector<int64_t> shape;
  const uint8_t* data = nullptr;
  size_t nbytes = 0;  // == numel() * DTypeSize(dtype), checked on open

  // Product of the dims (1 for a scalar, 0 if any dim is 0). Cannot overflow: checked on open.
  int64_t numel() const {
    int64_t n = 1;
    for (int64_t d : shape) n *= d;
    return n;
  }

  // The bytes viewed as T. CHECKs (aborts) that nbytes is a multiple of sizeof(T) and that data
  // is aligned for T; use IsAlignedFor<T>() first when the file is not trusted to be aligned
  // (files from SafetensorsWriter always are).
  template <typename T>
  std::span<const T> as() const {
    CHECK(nbytes % sizeof(T) == 0)
        << "tensor " << name << ": " << nbytes << " bytes is not a multiple of " << sizeof(T);
    CHECK(IsAlignedFor<T>()) << "tensor " << name << " is not aligned for a " << sizeof(T)
                             << "-byte type";
    return {reinterpret_cast<const T*>(data), nbytes / sizeof(T)};
  }

  template <typename T>
  bool IsAlignedFor() const {
    return reinterpret_cast<uintptr_t>(data) % alignof(T) == 0;
  }

  std::span<const uint8_t> bytes() const { return {data, nbytes}; }
};

// Renders a shape as "[2, 3]" for messages.
std::string ShapeString(std::span<const int64_t> shape);

// One .safetensors file, mapped read-only. Immutable after Open: all const methods are
// thread-safe. Views returned by Get stay valid until the object is destroyed.
class SafetensorsFile {
 public:
  // Maps `path` read-only and validates the header and every tensor entry.
  // Errors: NotFound if the file does not exist; other errno-derived codes for open/mmap
  // failures; DataLoss for any malformed content (message names the file and the tensor).
  // Cost: one mmap plus a parse of the header; the data section is not read.
  static absl::StatusOr<std::unique_ptr<SafetensorsFile>> Open(const std::string& path);

  // Same validation over in-memory bytes (tests, fuzzing). `name` labels errors and path().
  // The bytes are owned by the returned object.
  static absl::StatusOr<std::unique_ptr<SafetensorsFile>> FromBytes(std::string name,
                                                                    std::string bytes);

  ~SafetensorsFile();
  SafetensorsFile(const SafetensorsFile&) = delete;
  SafetensorsFile& operator=(const SafetensorsFile&) = delete;

  // The path given to Open (or the name given to FromBytes).
  const std::string& path() const { return path_; }

  // The "__metadata__" entries (empty if the header has none).
  const std::map<std::string, std::string>& metadata() const { return metadata_; }

  // All tensor names, sorted.
  std::vector<std::string> TensorNames() const;
  size_t num_tensors() const { return tensors_.size(); }

  bool Contains(std::string_view name) const;

  // The view of tensor `name`. Errors: NotFound naming the tensor and the file.
  absl::StatusOr<TensorView> Get(std::string_view name) const;

  // Get plus an expectation check. A dim of -1 in `shape` matches any size.
  // Errors: NotFound as Get; FailedPrecondition naming file, tensor, expected and actual
  // dtype/shape on a mismatch, or if the data is not aligned to DTypeSize(dtype).
  absl::StatusOr<TensorView> GetChecked(std::string_view name, DType dtype,
                                        std::span<const int64_t> shape) const;
  absl::StatusOr<TensorView> GetChecked(std::string_view name, DType dtype,
                                        std::initializer_list<int64_t> shape) const {
    return GetChecked(name, dtype, std::span<const int64_t>(shape.begin(), shape.size()));
  }

  // The whole file (header included) and the data section, e.g. to check pointer provenance.
  std::span<const uint8_t> file_bytes() const { return {base_, size_}; }
  std::span<const uint8_t> data_section() const { return {data_, data_size_}; }

 private:
  struct Entry {
    DType dtype;
    std::vector<int64_t> shape;
    uint64_t begin;
    uint64_t end;
  };
  class Mapping;

  SafetensorsFile() = default;
  // Parses the header of the bytes at base_/size_ and fills the tables.
  absl::Status Init();
  TensorView MakeView(const std::string& name, const Entry& entry) const;

  std::string path_;
  std::unique_ptr<Mapping> mapping_;  // set by Open
  std::string owned_bytes_;           // set by FromBytes
  const uint8_t* base_ = nullptr;
  size_t size_ = 0;
  const uint8_t* data_ = nullptr;
  size_t data_size_ = 0;
  std::map<std::string, std::string> metadata_;
  std::map<std::string, Entry, std::less<>> tensors_;
};

// Checks `view` against an expected dtype and shape (-1 matches any dim). `where` names the file
// or checkpoint in the message. Errors: FailedPrecondition as SafetensorsFile::GetChecked.
absl::Status CheckTensor(const TensorView& view, std::string_view where, DType dtype,
                         std::span<const int64_t> shape);

}  // namespace flashserve::safetensors
