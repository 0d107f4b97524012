#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <utility>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "common/base/strings.h"
#include "common/safetensors/header_parser.h"
#include "common/safetensors/safetensors.h"

namespace flashserve::safetensors {

using internal::QuoteName;

// Owns a read-only private mapping of a whole file.
class SafetensorsFile::Mapping {
 public:
  Mapping(void* addr, size_t size) : addr_(addr), size_(size) {}
  ~Mapping() { munmap(addr_, size_); }
  Mapping(const Mapping&) = delete;
  Mapping& operator=(const Mapping&) = delete;
  const uint8_t* data() const { return static_cast<const uint8_t*>(addr_); }

 private:
  void* addr_;
  size_t size_;
};

namespace {

absl::Status ErrnoError(int err, std::string_view what, const std::string& path) {
  return absl::Status(absl::ErrnoToStatusCode(err),
                      absl::StrCat(::flashserve::ToAbsl(what), " safetensors file ", path, ": ",
                                   std::strerror(err)));
}

// Closes a file descriptor on scope exit.
struct FdCloser {
  int fd;
  ~FdCloser() { close(fd); }
};

}  // namespace

std::string ShapeString(std::span<const int64_t> shape) {
  std::string out = "[";
  for (size_t i = 0; i < shape.size(); ++i) absl::StrAppend(&out, i ? ", " : "", shape[i]);
  return out + "]";
}

SafetensorsFile::~SafetensorsFile() = default;

absl::StatusOr<std::unique_ptr<SafetensorsFile>> SafetensorsFile::Open(const std::string& path) {
  const int fd = open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return ErrnoError(errno, "cannot open", path);
  FdCloser closer{fd};
  struct stat st;
  if (fstat(fd, &st) != 0) return ErrnoError(errno, "cannot stat", path);
  if (!S_ISREG(st.st_mode)) {
    return absl::FailedPreconditionError(
        absl::StrCat("safetensors file ", path, ": not a regular file"));
  }
  const size_t size = static_cast<size_t>(st.st_size);
  if (size < 8) {
    // mmap cannot map an empty file; the parser reports the short file with a clear message.
    auto file = FromBytes(path, std::string(size, '\0'));
    if (file.ok()) return absl::InternalError("short file unexpectedly parsed");
    return file.status();
  }
  void* addr = mmap(nullptr, size, PROT_READ, MAP_PRIVATE, fd, 0);
  if (addr == MAP_FAILED) return ErrnoError(errno, "cannot mmap", path);
  std::unique_ptr<SafetensorsFile> file(new SafetensorsFile());
  file->path_ = path;
  file->mapping_ = std::make_unique<Mapping>(addr, size);
  file->base_ = file->mapping_->data();
  file->size_ = size;
  if (absl::Status s = file->Init(); !s.ok()) return s;
  return file;
}

absl::StatusOr<std::unique_ptr<SafetensorsFile>> SafetensorsFile::FromBytes(std::string name,
                                                                            std::string bytes) {
  std::unique_ptr<SafetensorsFile> file(new SafetensorsFile());
  file->path_ = std::move(name);
  file->owned_bytes_ = std::move(bytes);
  file->base_ = reinterpret_cast<const uint8_t*>(file->owned_bytes_.data());
  file->size_ = file->owned_bytes_.size();
  if (absl::Status s = file->Init(); !s.ok()) return s;
  return file;
}

absl::Status SafetensorsFile::Init() {
  absl::StatusOr<internal::ParsedLayout> layout =
      internal::ParseLayout(path_, std::span<const uint8_t>(base_, size_));
  if (!layout.ok()) return layout.status();
  data_ = base_ + 8 + layout->header_size;
  data_size_ = size_ - 8 - layout->header_size;
  metadata_ = std::move(layout->metadata);
  for (internal::HeaderEntry& t : layout->tensors) {
    tensors_.emplace(
        std::move(t.name),
        Entry{.dtype = t.dtype, .shape = std::move(t.shape), .begin = t.begin, .end = t.end});
  }
  return absl::OkStatus();
}

std::vector<std::string> SafetensorsFile::TensorNames() const {
  std::vector<std::string> names;
  names.reserve(tensors_.size());
  for (const auto& [name, entry] : tensors_) names.push_back(name);
  return names;
}

bool SafetensorsFile::Contains(std::string_view name) const {
  return tensors_.find(name) != tensors_.end();
}

TensorView SafetensorsFile::MakeView(const std::string& name, const Entry& entry) const {
  return TensorView{.name = name,
                    .dtype = entry.dtype,
                    .shape = entry.shape,
                    .data = data_ + entry.begin,
                    .nbytes = static_cast<size_t>(entry.end - entry.begin)};
}

absl::StatusOr<TensorView> SafetensorsFile::Get(std::string_view name) const {
  auto it = tensors_.find(name);
  if (it == tensors_.end()) {
    return absl::NotFoundError(
        absl::StrCat("tensor ", QuoteName(name), " not found in safetensors file ", path_));
  }
  return MakeView(it->first, it->second);
}

absl::StatusOr<TensorView> SafetensorsFile::GetChecked(std::string_view name, DType dtype,
                                                       std::span<const int64_t> shape) const {
  absl::StatusOr<TensorView> view = Get(name);
  if (!view.ok()) return view.status();
  if (absl::Status s = CheckTensor(*view, path_, dtype, shape); !s.ok()) return s;
  return view;
}

absl::Status CheckTensor(const TensorView& view, std::string_view where, DType dtype,
                         std::span<const int64_t> shape) {
  bool shape_ok = shape.size() == view.shape.size();
  for (size_t i = 0; shape_ok && i < shape.size(); ++i) {
    shape_ok = shape[i] == -1 || shape[i] == view.shape[i];
  }
  if (dtype != view.dtype || !shape_ok) {
    return absl::FailedPreconditionError(absl::StrCat(
        "tensor ", QuoteName(view.name), " in ", ::flashserve::ToAbsl(where), ": expected ",
        ::flashserve::ToAbsl(DTypeName(dtype)), ShapeString(shape), ", found ",
        ::flashserve::ToAbsl(DTypeName(view.dtype)), ShapeString(view.shape)));
  }
  if (reinterpret_cast<uintptr_t>(view.data) % DTypeSize(dtype) != 0) {
    return absl::FailedPreconditionError(
        absl::StrCat("tensor ", QuoteName(view.name), " in ", ::flashserve::ToAbsl(where),
                     ": data is not aligned to ", DTypeSize(dtype), " bytes"));
  }
  return absl::OkStatus();
}

}  // namespace flashserve::safetensors
