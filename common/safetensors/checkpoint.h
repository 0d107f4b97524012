// A model checkpoint: one .safetensors file, or a directory of shards tied together by
// model.safetensors.index.json. Presents the shards as one flat tensor namespace.
//
//   ASSIGN_OR_RETURN(auto ckpt, Checkpoint::Open("/models/v41"));
//   ASSIGN_OR_RETURN(TensorView w, ckpt->GetChecked("embed.weight", DType::kBF16, {-1, 4096}));
#pragma once

#include <cstdint>
#include <initializer_list>
#include <map>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"
#include "common/safetensors/safetensors.h"

namespace flashserve::safetensors {

inline constexpr char kIndexFileName[] = "model.safetensors.index.json";
inline constexpr char kSingleFileName[] = "model.safetensors";

// Immutable after Open; all const methods are thread-safe. Views stay valid while it lives.
class Checkpoint {
 public:
  // `path` is a .safetensors file, or a directory holding model.safetensors.index.json (its
  // "weight_map" maps tensor name -> shard file name in the same directory) or, failing that,
  // model.safetensors. Every shard is opened (mmap) and validated as SafetensorsFile::Open does.
  // Errors: NotFound if the path, the index's shards, or any checkpoint file are missing;
  // DataLoss for a malformed index or shard, or an inconsistent one: a tensor listed in the
  // index but missing from its shard, a tensor in a shard but not in the index, or a tensor in
  // more than one shard (the message lists up to 10 such problems, naming tensors and files).
  static absl::StatusOr<std::unique_ptr<Checkpoint>> Open(const std::string& path);

  // The path given to Open.
  const std::string& path() const { return path_; }

  // The open shards, sorted by path (one entry for a single-file checkpoint).
  const std::vector<std::unique_ptr<SafetensorsFile>>& files() const { return files_; }

  // All tensor names across shards, sorted.
  std::vector<std::string> TensorNames() const;
  size_t num_tensors() const { return where_.size(); }
  bool Contains(std::string_view name) const;

  // The shard that holds `name`. Errors: NotFound naming the tensor and the checkpoint.
  absl::StatusOr<const SafetensorsFile*> FileOf(std::string_view name) const;

  // The view of `name` in its shard. Errors: NotFound naming the tensor and the checkpoint.
  absl::StatusOr<TensorView> Get(std::string_view name) const;

  // Get plus an expectation check (-1 matches any dim). Errors: NotFound as Get;
  // FailedPrecondition naming the shard file, tensor, expected and actual dtype/shape.
  absl::StatusOr<TensorView> GetChecked(std::string_view name, DType dtype,
                                        std::span<const int64_t> shape) const;
  absl::StatusOr<TensorView> GetChecked(std::string_view name, DType dtype,
                                        std::initializer_list<int64_t> shape) const {
    return GetChecked(name, dtype, std::span<const int64_t>(shape.begin(), shape.size()));
  }

 private:
  Checkpoint() = default;
  absl::Status OpenSingle(const std::string& file);
  absl::Status OpenIndexed(const std::string& dir, const std::string& index_path);

  std::string path_;
  std::vector<std::unique_ptr<SafetensorsFile>> files_;
  std::map<std::string, const SafetensorsFile*, std::less<>> where_;
};

}  // namespace flashserve::safetensors
