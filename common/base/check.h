// Invariant checks that abort the process: for broken invariants only (STYLE.md: bad input gets
// an absl::Status, never a CHECK). Debian's Abseil (20220623) predates absl/log, hence our own.
//
//   CHECK(ptr != nullptr) << "context " << value;
//   CHECK_EQ(a, b);  DCHECK(x) compiles away in NDEBUG builds.
#pragma once

#include <sstream>
#include <string>

namespace flashserve::internal {

// Accumulates a message and aborts in its destructor after printing file:line and the message.
class CheckFailure {
 public:
  CheckFailure(const char* file, int line, const char* condition);
  [[noreturn]] ~CheckFailure();
  std::ostream& stream() { return stream_; }

 private:
  std::ostringstream stream_;
};

// Lets `cond ? (void)0 : Voidify() & stream` discard the stream expression's type.
struct CheckVoidify {
  void operator&(std::ostream&) {}
};

}  // namespace flashserve::internal

#define CHECK(condition)                                 \
  (condition) ? (void)0                                  \
              : ::flashserve::internal::CheckVoidify() & \
                    ::flashserve::internal::CheckFailure(__FILE__, __LINE__, #condition).stream()

#define FS_CHECK_OP_(a, b, op) CHECK((a)op(b)) << "(" << (a) << " vs " << (b) << ") "
#define CHECK_EQ(a, b) FS_CHECK_OP_(a, b, ==)
#define CHECK_NE(a, b) FS_CHECK_OP_(a, b, !=)
#define CHECK_LT(a, b) FS_CHECK_OP_(a, b, <)
#define CHECK_LE(a, b) FS_CHECK_OP_(a, b, <=)
#define CHECK_GT(a, b) FS_CHECK_OP_(a, b, >)
#define CHECK_GE(a, b) FS_CHECK_OP_(a, b, >=)
#define CHECK_OK(expr)                                                 \
  do {                                                                 \
    const auto& fs_check_ok_status_ = (expr);                          \
    CHECK(fs_check_ok_status_.ok()) << fs_check_ok_status_.ToString(); \
  } while (false)

#ifdef NDEBUG
#define DCHECK(condition) \
  while (false) CHECK(condition)
#else
#define DCHECK(condition) CHECK(condition)
#endif
