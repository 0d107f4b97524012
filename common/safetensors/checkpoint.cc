#include "common/safetensors/checkpoint.h"

#include <sys/stat.h>

#include <cerrno>
#include <cstring>
#include <fstream>
#include <set>
#include <sstream>
#include <utility>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "common/base/strings.h"
#include "common/safetensors/header_parser.h"
#include "nlohmann/json.hpp"

namespace flashserve::safetensors {
namespace {

using internal::QuoteName;
using json = nlohmann::json;

constexpr size_t kMaxProblemsReported = 10;

absl::Status StatError(int err, const std::string& path) {
  return absl::Status(absl::ErrnoToStatusCode(err),
                      absl::StrCat("checkpoint ", path, ": ", std::strerror(err)));
}

bool IsRegularFile(const std::string& path) {
  struct stat st;
  return stat(path.c_str(), &st) == 0 && S_ISREG(st.st_mode);
}

// Reads and parses the index, rejecting duplicate keys at any level (nlohmann keeps the last).
absl::StatusOr<std::map<std::string, std::string>> ReadWeightMap(const std::string& path) {
  auto corrupt = [&](std::string_view why) {
    return absl::DataLossError(
        absl::StrCat("checkpoint index ", path, ": ", ::flashserve::ToAbsl(why)));
  };
  struct stat st;
  if (stat(path.c_str(), &st) != 0) return StatError(errno, path);
  if (static_cast<uint64_t>(st.st_size) > kMaxHeaderBytes) return corrupt("file is too large");
  std::ifstream in(path, std::ios::binary);
  if (!in) return absl::UnavailableError(absl::StrCat("cannot read checkpoint index ", path));
  std::stringstream buffer;
  buffer << in.rdbuf();
  const std::string text = buffer.str();

  std::vector<std::set<std::string>> open_objects;
  std::string duplicate;
  json::parser_callback_t check_keys = [&](int, json::parse_event_t event, json& parsed) {
    if (event == json::parse_event_t::object_start) open_objects.emplace_back();
    if (event == json::parse_event_t::object_end && !open_objects.empty()) open_objects.pop_back();
    if (event == json::parse_event_t::key && !open_objects.empty() && parsed.is_string() &&
        !open_objects.back().insert(parsed.get<std::string>()).second && duplicate.empty()) {
      duplicate = parsed.get<std::string>();
    }
    return true;
  };
  const json index = json::parse(text, check_keys, /*allow_exceptions=*/false);
  if (index.is_discarded()) return corrupt("not valid JSON");
  if (!duplicate.empty()) return corrupt(absl::StrCat("duplicate key ", QuoteName(duplicate)));
  if (!index.is_object() || !index.contains("weight_map") || !index["weight_map"].is_object()) {
    return corrupt("missing \"weight_map\" object");
  }
  std::map<std::string, std::string> weight_map;
  for (const auto& [tensor, file] : index["weight_map"].items()) {
    if (!file.is_string()) {
      return corrupt(absl::StrCat("tensor ", QuoteName(tensor), ": shard is not a string"));
    }
    const std::string& name = file.get_ref<const std::string&>();
    if (name.empty() || name[0] == '/' || name.find("..") != std::string::npos) {
      return corrupt(
          absl::StrCat("tensor ", QuoteName(tensor), ": bad shard file name ", QuoteName(name)));
    }
    weight_map.emplace(tensor, name);
  }
  return weight_map;
}

}  // namespace

absl::StatusOr<std::unique_ptr<Checkpoint>> Checkpoint::Open(const std::string& path) {
  struct stat st;
  if (stat(path.c_str(), &st) != 0) return StatError(errno, path);
  std::unique_ptr<Checkpoint> checkpoint(new Checkpoint());
  checkpoint->path_ = path;
  absl::Status status;
  if (!S_ISDIR(st.st_mode)) {
    status = checkpoint->OpenSingle(path);
  } else if (const std::string index = path + "/" + kIndexFileName; IsRegularFile(index)) {
    status = checkpoint->OpenIndexed(path, index);
  } else if (const std::string single = path + "/" + kSingleFileName; IsRegularFile(single)) {
    status = checkpoint->OpenSingle(single);
  } else {
    status = absl::NotFoundError(absl::StrCat("checkpoint directory ", path, " holds neither ",
                                              kIndexFileName, " nor ", kSingleFileName));
  }
  if (!status.ok()) return status;
  return checkpoint;
}

absl::Status Checkpoint::OpenSingle(const std::string& file) {
  absl::StatusOr<std::unique_ptr<SafetensorsFile>> opened = SafetensorsFile::Open(file);
  if (!opened.ok()) return opened.status();
  for (std::string& name : (*opened)->TensorNames()) where_.emplace(std::move(name), opened->get());
  files_.push_back(*std::move(opened));
  return absl::OkStatus();
}

absl::Status Checkpoint::OpenIndexed(const std::string& dir, const std::string& index_path) {
  absl::StatusOr<std::map<std::string, std::string>> weight_map = ReadWeightMap(index_path);
  if (!weight_map.ok()) return weight_map.status();
  std::map<std::string, const SafetensorsFile*> by_shard;
  for (const auto& [tensor, shard] : *weight_map) by_shard.emplace(shard, nullptr);
  for (auto& [shard, file] : by_shard) {
    absl::StatusOr<std::unique_ptr<SafetensorsFile>> opened =
        SafetensorsFile::Open(dir + "/" + shard);
    if (!opened.ok()) {
      return absl::Status(
          opened.status().code(),
          absl::StrCat(opened.status().message(), "; shard of checkpoint ", index_path));
    }
    file = opened->get();
    files_.push_back(*std::move(opened));
  }

  std::vector<std::string> problems;
  for (const auto& [tensor, shard] : *weight_map) {
    const SafetensorsFile* file = by_shard.at(shard);
    if (file->Contains(tensor)) {
      where_.emplace(tensor, file);
    } else {
      problems.push_back(absl::StrCat("tensor ", QuoteName(tensor), " is listed for ", file->path(),
                                      " but missing from it"));
    }
  }
  for (const auto& [shard, file] : by_shard) {
    for (const std::string& tensor : file->TensorNames()) {
      auto listed = weight_map->find(tensor);
      if (listed == weight_map->end()) {
        problems.push_back(absl::StrCat("tensor ", QuoteName(tensor), " in ", file->path(),
                                        " is not in the index"));
      } else if (listed->second != shard) {
        problems.push_back(absl::StrCat("tensor ", QuoteName(tensor), " is in ", file->path(),
                                        " and also indexed to ", dir, "/", listed->second,
                                        " (duplicate across shards)"));
      }
    }
  }
  if (problems.empty()) return absl::OkStatus();
  const size_t total = problems.size();
  if (problems.size() > kMaxProblemsReported) problems.resize(kMaxProblemsReported);
  return absl::DataLossError(absl::StrCat("checkpoint ", index_path, " is inconsistent (", total,
                                          " problems): ", absl::StrJoin(problems, "; ")));
}

std::vector<std::string> Checkpoint::TensorNames() const {
  std::vector<std::string> names;
  names.reserve(where_.size());
  for (const auto& [name, file] : where_) names.push_back(name);
  return names;
}

bool Checkpoint::Contains(std::string_view name) const { return where_.find(name) != where_.end(); }

absl::StatusOr<const SafetensorsFile*> Checkpoint::FileOf(std::string_view name) const {
  auto it = where_.find(name);
  if (it == where_.end()) {
    return absl::NotFoundError(
        absl::StrCat("tensor ", QuoteName(name), " not found in checkpoint ", path_));
  }
  return it->second;
}

absl::StatusOr<TensorView> Checkpoint::Get(std::string_view name) const {
  absl::StatusOr<const SafetensorsFile*> file = FileOf(name);
  if (!file.ok()) return file.status();
  return (*file)->Get(name);
}

absl::StatusOr<TensorView> Checkpoint::GetChecked(std::string_view name, DType dtype,
                                                  std::span<const int64_t> shape) const {
  absl::StatusOr<const SafetensorsFile*> file = FileOf(name);
  if (!file.ok()) return file.status();
  return (*file)->GetChecked(name, dtype, shape);
}

}  // namespace flashserve::safetensors
