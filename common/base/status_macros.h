// Status propagation for absl::Status / absl::StatusOr<T>: the one error convention of FlashServe.
//
//   RETURN_IF_ERROR(DoThing()) << "while loading " << path;
//   ASSIGN_OR_RETURN(auto file, SafetensorsFile::Open(path));
//
// RETURN_IF_ERROR accepts streamed context that is appended to the message ("<msg>; <context>")
// while keeping the status code. ASSIGN_OR_RETURN takes an optional third argument, a context
// string, with the same effect.
#pragma once

#include <sstream>
#include <string>
#include <utility>

#include "absl/status/status.h"
#include "absl/status/statusor.h"

namespace flashserve::internal {

// Collects streamed context and converts to the annotated status on destruction-free conversion.
class StatusContextBuilder {
 public:
  explicit StatusContextBuilder(absl::Status status) : status_(std::move(status)) {}

  template <typename T>
  StatusContextBuilder& operator<<(const T& value) {
    stream_ << value;
    return *this;
  }

  operator absl::Status() const {  // NOLINT(google-explicit-constructor)
    return Annotate(status_, stream_.str());
  }
  template <typename T>
  operator absl::StatusOr<T>() const {  // NOLINT(google-explicit-constructor)
    return absl::StatusOr<T>(Annotate(status_, stream_.str()));
  }

  static absl::Status Annotate(const absl::Status& status, const std::string& context) {
    if (context.empty()) return status;
    std::string message(status.message());
    if (!message.empty()) message += "; ";
    message += context;
    return absl::Status(status.code(), message);
  }

 private:
  absl::Status status_;
  std::ostringstream stream_;
};

inline const absl::Status& GetStatus(const absl::Status& status) { return status; }
template <typename T>
const absl::Status& GetStatus(const absl::StatusOr<T>& status_or) {
  return status_or.status();
}

}  // namespace flashserve::internal

#define FS_STATUS_CONCAT_INNER_(a, b) a##b
#define FS_STATUS_CONCAT_(a, b) FS_STATUS_CONCAT_INNER_(a, b)

// Evaluates expr (absl::Status or StatusOr); on error returns it from the enclosing function,
// with any streamed context appended.
#define RETURN_IF_ERROR(expr)                                                               \
  if (auto fs_status_tmp_ = ::flashserve::internal::GetStatus(expr); fs_status_tmp_.ok()) { \
  } else                                                                                    \
    return ::flashserve::internal::StatusContextBuilder(std::move(fs_status_tmp_))

#define FS_ASSIGN_OR_RETURN_IMPL_(var, lhs, rexpr, context)                                 \
  auto var = (rexpr);                                                                       \
  if (!var.ok()) {                                                                          \
    return ::flashserve::internal::StatusContextBuilder::Annotate(var.status(), (context)); \
  }                                                                                         \
  lhs = std::move(var).value()

#define FS_ASSIGN_OR_RETURN_2_(lhs, rexpr) \
  FS_ASSIGN_OR_RETURN_IMPL_(FS_STATUS_CONCAT_(fs_statusor_, __LINE__), lhs, rexpr, std::string())
#define FS_ASSIGN_OR_RETURN_3_(lhs, rexpr, context) \
  FS_ASSIGN_OR_RETURN_IMPL_(FS_STATUS_CONCAT_(fs_statusor_, __LINE__), lhs, rexpr, context)
#define FS_ASSIGN_OR_RETURN_PICK_(_1, _2, _3, NAME, ...) NAME

// ASSIGN_OR_RETURN(lhs, expr [, context]): lhs may declare a variable ("auto x").
#define ASSIGN_OR_RETURN(...)                                                                    \
  FS_ASSIGN_OR_RETURN_PICK_(__VA_ARGS__, FS_ASSIGN_OR_RETURN_3_, FS_ASSIGN_OR_RETURN_2_, unused) \
  (__VA_ARGS__)
