// Builds .safetensors files (and sharded checkpoints with an index) atomically.
//
//   SafetensorsWriter writer;
//   RETURN_IF_ERROR(writer.Add("w", DType::kBF16, {2, 3}, bytes));
//   writer.SetMetadata("format", "pt");
//   RETURN_IF_ERROR(writer.Write(path));
#pragma once

#include <cstdint>
#include <map>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "common/safetensors/dtype.h"

namespace flashserve::safetensors {

// Collects tensors in memory, then serialises them. The data section is laid out by descending
// element size, then by name, with no gaps, so every tensor is naturally aligned relative to the
// file start (the header is padded with spaces to a multiple of 8 bytes). Not thread-safe.
class SafetensorsWriter {
 public:
  // Adds a tensor, copying `bytes`. Errors: InvalidArgument for an empty or non-UTF-8 name, the
  // reserved name
  // "__metadata__", a negative dim, an overflowing element count, or bytes.size() != numel *
  // DTypeSize(dtype); AlreadyExists for a repeated name.
  absl::Status Add(std::string name, DType dtype, std::vector<int64_t> shape,
                   std::span<const uint8_t> bytes);
  absl::Status Add(std::string name, DType dtype, std::vector<int64_t> shape,
                   std::string_view bytes);

  // Sets a "__metadata__" entry (replacing an earlier value for the key).
  // Errors: InvalidArgument if key or value is not valid UTF-8.
  absl::Status SetMetadata(std::string key, std::string value);

  std::vector<std::string> TensorNames() const;  // sorted
  uint64_t data_bytes() const;                   // the data section's size

  // The complete file image. Cost: one copy of all tensor bytes.
  std::string Serialize() const;

  // Writes the image to a temporary file beside `path`, fsyncs it, renames it over `path`, and
  // fsyncs the directory, so readers see the old file or the new one, never a partial one.
  // Errors: errno-derived codes (NotFound for a missing directory, PermissionDenied, ...) with
  // the path; the temporary file is removed on failure.
  absl::Status Write(const std::string& path) const;

 private:
  struct Tensor {
    DType dtype;
    std::vector<int64_t> shape;
    std::string bytes;
  };
  // The JSON header, padded with spaces to make 8 + size a multiple of 8; also the tensor order.
  std::string Header(std::vector<const std::pair<const std::string, Tensor>*>* order) const;

  std::map<std::string, Tensor> tensors_;
  std::map<std::string, std::string> metadata_;
};

// Writes `contents` to `path` atomically (temp file in the same directory, fsync, rename,
// directory fsync). Errors: errno-derived codes naming the path.
absl::Status WriteFileAtomically(const std::string& path, std::string_view contents);

// One shard of a checkpoint: the file name inside the checkpoint directory and its tensors.
struct CheckpointShard {
  std::string file_name;  // e.g. "model-00001-of-00002.safetensors"
  SafetensorsWriter writer;
};

// Writes every shard into `dir` (which must exist) plus model.safetensors.index.json holding
// {"metadata": {"total_size": <sum of data bytes>}, "weight_map": {tensor: file_name}}.
// Errors: InvalidArgument for a duplicate shard file name or a tensor in two shards; write
// errors as SafetensorsWriter::Write.
absl::Status WriteShardedCheckpoint(const std::string& dir,
                                    const std::vector<CheckpointShard>& shards);

// Writes model.safetensors.index.json into `dir` with the given weight map (tests use it to
// build inconsistent indexes). Errors: as WriteFileAtomically.
absl::Status WriteCheckpointIndex(const std::string& dir,
                                  const std::map<std::string, std::string>& weight_map,
                                  uint64_t total_size);

}  // namespace flashserve::safetensors
