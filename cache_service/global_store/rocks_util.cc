#include "cache_service/global_store/rocks_util.h"

#include "absl/strings/str_cat.h"
#include "common/base/strings.h"

namespace flashserve::cache {

absl::Status FromRocks(const rocksdb::Status& status, std::string_view context) {
  if (status.ok()) return absl::OkStatus();
  const std::string message = absl::StrCat(ToAbsl(context), ": ", status.ToString());
  switch (status.code()) {
    case rocksdb::Status::kNotFound:
      return absl::NotFoundError(message);
    case rocksdb::Status::kCorruption:
      return absl::DataLossError(message);
    case rocksdb::Status::kIOError:
    case rocksdb::Status::kBusy:
    case rocksdb::Status::kTimedOut:
    case rocksdb::Status::kTryAgain:
      return absl::UnavailableError(message);
    case rocksdb::Status::kInvalidArgument:
      return absl::InvalidArgumentError(message);
    default:
      return absl::InternalError(message);
  }
}

}  // namespace flashserve::cache
