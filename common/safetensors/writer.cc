#include "common/safetensors/writer.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <exception>
#include <set>
#include <utility>

#include "absl/strings/str_cat.h"
#include "common/base/strings.h"
#include "common/safetensors/header_parser.h"
#include "common/safetensors/safetensors.h"
#include "nlohmann/json.hpp"

namespace flashserve::safetensors {
namespace {

using internal::QuoteName;

absl::Status ErrnoError(int err, std::string_view what, const std::string& path) {
  return absl::Status(absl::ErrnoToStatusCode(err), absl::StrCat(::flashserve::ToAbsl(what), " ",
                                                                 path, ": ", std::strerror(err)));
}

// nlohmann's dump rejects invalid UTF-8 by throwing; we check once, up front, instead.
bool IsValidUtf8(const std::string& s) {
  try {
    (void)nlohmann::json(s).dump();
    return true;
  } catch (const std::exception&) {
    return false;
  }
}

absl::Status WriteAll(int fd, std::string_view bytes, const std::string& path) {
  while (!bytes.empty()) {
    const ssize_t n = write(fd, bytes.data(), bytes.size());
    if (n < 0) {
      if (errno == EINTR) continue;
      return ErrnoError(errno, "cannot write", path);
    }
    bytes.remove_prefix(static_cast<size_t>(n));
  }
  return absl::OkStatus();
}

absl::Status SyncDirectoryOf(const std::string& path) {
  const size_t slash = path.rfind('/');
  const std::string dir = slash == std::string::npos ? "."
                          : slash == 0               ? "/"
                                                     : path.substr(0, slash);
  const int fd = open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (fd < 0) return ErrnoError(errno, "cannot open directory", dir);
  const int rc = fsync(fd);
  const int err = errno;
  close(fd);
  if (rc != 0) return ErrnoError(err, "cannot fsync directory", dir);
  return absl::OkStatus();
}

// Writes `chunks` in order to a temp file beside `path`, then publishes it by rename.
absl::Status WriteChunksAtomically(const std::string& path,
                                   const std::vector<std::string_view>& chunks) {
  std::string temp = path + ".tmp.XXXXXX";
  const int fd = mkostemp(temp.data(), O_CLOEXEC);
  if (fd < 0) return ErrnoError(errno, "cannot create temporary file for", path);
  absl::Status status;
  if (fchmod(fd, 0644) != 0) status = ErrnoError(errno, "cannot chmod", temp);
  for (size_t i = 0; status.ok() && i < chunks.size(); ++i) {
    status = WriteAll(fd, chunks[i], temp);
  }
  if (status.ok() && fsync(fd) != 0) status = ErrnoError(errno, "cannot fsync", temp);
  if (close(fd) != 0 && status.ok()) status = ErrnoError(errno, "cannot close", temp);
  if (status.ok() && rename(temp.c_str(), path.c_str()) != 0) {
    status = ErrnoError(errno, "cannot rename temporary file onto", path);
  }
  if (!status.ok()) {
    unlink(temp.c_str());
    return status;
  }
  return SyncDirectoryOf(path);
}

std::string LengthPrefix(uint64_t n) {
  std::string out(8, '\0');
  for (int i = 0; i < 8; ++i) out[i] = static_cast<char>((n >> (8 * i)) & 0xff);
  return out;
}

}  // namespace

absl::Status SafetensorsWriter::Add(std::string name, DType dtype, std::vector<int64_t> shape,
                                    std::string_view bytes) {
  if (name.empty() || name == "__metadata__" || !IsValidUtf8(name)) {
    return absl::InvalidArgumentError(absl::StrCat("invalid tensor name ", QuoteName(name)));
  }
  if (tensors_.count(name) != 0) {
    return absl::AlreadyExistsError(absl::StrCat("tensor ", QuoteName(name), " added twice"));
  }
  int64_t numel = 1;
  for (int64_t dim : shape) {
    if (dim < 0 || __builtin_mul_overflow(numel, dim, &numel)) {
      return absl::InvalidArgumentError(
          absl::StrCat("tensor ", QuoteName(name), ": bad shape ", ShapeString(shape)));
    }
  }
  uint64_t nbytes = 0;
  if (__builtin_mul_overflow(static_cast<uint64_t>(numel), DTypeSize(dtype), &nbytes) ||
      nbytes != bytes.size()) {
    return absl::InvalidArgumentError(
        absl::StrCat("tensor ", QuoteName(name), ": ", ::flashserve::ToAbsl(DTypeName(dtype)),
                     ShapeString(shape), " needs ", nbytes, " bytes, got ", bytes.size()));
  }
  tensors_.emplace(std::move(name), Tensor{dtype, std::move(shape), std::string(bytes)});
  return absl::OkStatus();
}

absl::Status SafetensorsWriter::Add(std::string name, DType dtype, std::vector<int64_t> shape,
                                    std::span<const uint8_t> bytes) {
  return Add(std::move(name), dtype, std::move(shape),
             std::string_view(reinterpret_cast<const char*>(bytes.data()), bytes.size()));
}

absl::Status SafetensorsWriter::SetMetadata(std::string key, std::string value) {
  if (!IsValidUtf8(key) || !IsValidUtf8(value)) {
    return absl::InvalidArgumentError(
        absl::StrCat("metadata ", QuoteName(key), ": key or value is not valid UTF-8"));
  }
  metadata_[std::move(key)] = std::move(value);
  return absl::OkStatus();
}

std::vector<std::string> SafetensorsWriter::TensorNames() const {
  std::vector<std::string> names;
  for (const auto& [name, tensor] : tensors_) names.push_back(name);
  return names;
}

uint64_t SafetensorsWriter::data_bytes() const {
  uint64_t total = 0;
  for (const auto& [name, tensor] : tensors_) total += tensor.bytes.size();
  return total;
}

std::string SafetensorsWriter::Header(
    std::vector<const std::pair<const std::string, Tensor>*>* order) const {
  order->clear();
  for (const auto& entry : tensors_) order->push_back(&entry);
  // Larger elements first keeps every tensor aligned to its element size without gaps.
  std::stable_sort(order->begin(), order->end(), [](const auto* a, const auto* b) {
    return DTypeSize(a->second.dtype) > DTypeSize(b->second.dtype);
  });
  nlohmann::json header = nlohmann::json::object();
  if (!metadata_.empty()) header["__metadata__"] = metadata_;
  uint64_t offset = 0;
  for (const auto* entry : *order) {
    const Tensor& t = entry->second;
    header[entry->first] = {{"dtype", std::string(DTypeName(t.dtype))},
                            {"shape", t.shape},
                            {"data_offsets", {offset, offset + t.bytes.size()}}};
    offset += t.bytes.size();
  }
  std::string text = header.dump();  // cannot throw: names and metadata were checked in Add
  while ((8 + text.size()) % 8 != 0) text.push_back(' ');
  return text;
}

std::string SafetensorsWriter::Serialize() const {
  std::vector<const std::pair<const std::string, Tensor>*> order;
  const std::string header = Header(&order);
  std::string out = LengthPrefix(header.size()) + header;
  for (const auto* entry : order) out += entry->second.bytes;
  return out;
}

absl::Status SafetensorsWriter::Write(const std::string& path) const {
  std::vector<const std::pair<const std::string, Tensor>*> order;
  const std::string header = Header(&order);
  const std::string prefix = LengthPrefix(header.size());
  std::vector<std::string_view> chunks = {prefix, header};
  for (const auto* entry : order) chunks.push_back(entry->second.bytes);
  return WriteChunksAtomically(path, chunks);
}

absl::Status WriteFileAtomically(const std::string& path, std::string_view contents) {
  return WriteChunksAtomically(path, {contents});
}

absl::Status WriteCheckpointIndex(const std::string& dir,
                                  const std::map<std::string, std::string>& weight_map,
                                  uint64_t total_size) {
  nlohmann::json index = {{"metadata", {{"total_size", total_size}}}, {"weight_map", weight_map}};
  std::string text;
  try {
    text = index.dump(2);
  } catch (const std::exception& e) {
    return absl::InvalidArgumentError(absl::StrCat("cannot encode index: ", e.what()));
  }
  return WriteFileAtomically(dir + "/model.safetensors.index.json", text);
}

absl::Status WriteShardedCheckpoint(const std::string& dir,
                                    const std::vector<CheckpointShard>& shards) {
  std::map<std::string, std::string> weight_map;
  std::set<std::string> files;
  uint64_t total_size = 0;
  for (const CheckpointShard& shard : shards) {
    if (!files.insert(shard.file_name).second) {
      return absl::InvalidArgumentError(absl::StrCat("shard file ", shard.file_name, " twice"));
    }
    for (const std::string& name : shard.writer.TensorNames()) {
      if (!weight_map.emplace(name, shard.file_name).second) {
        return absl::InvalidArgumentError(
            absl::StrCat("tensor ", QuoteName(name), " is in two shards"));
      }
    }
    total_size += shard.writer.data_bytes();
  }
  for (const CheckpointShard& shard : shards) {
    if (absl::Status s = shard.writer.Write(dir + "/" + shard.file_name); !s.ok()) return s;
  }
  return WriteCheckpointIndex(dir, weight_map, total_size);
}

}  // namespace flashserve::safetensors
