// Debian's Abseil (20220623) is built with its own absl::string_view
// (ABSL_OPTION_USE_STD_STRING_VIEW 0), which std::string_view does not convert to. Our public
// APIs take std::string_view; call ToAbsl() where one is handed to absl (StrCat, Status, ...).
#pragma once

#include <string_view>

#include "absl/strings/string_view.h"

namespace flashserve {

inline absl::string_view ToAbsl(std::string_view s) {
  return absl::string_view(s.data(), s.size());
}
inline std::string_view ToStd(absl::string_view s) { return std::string_view(s.data(), s.size()); }

}  // namespace flashserve
