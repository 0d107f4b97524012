// Test-only helpers for model_config_test: repository paths and JSON file access.
#pragma once

#include <cstdlib>
#include <fstream>
#include <sstream>
#include <string>

#include "nlohmann/json.hpp"

namespace flashserve::model::testing {

// Absolute-or-relative path of a file in the repository (tests run from the repo root; ctest
// also sets FS_SOURCE_DIR).
inline std::string RepoPath(const std::string& relative) {
  const char* root = std::getenv("FS_SOURCE_DIR");
  return (root != nullptr && *root != '\0' ? std::string(root) : std::string(".")) + "/" + relative;
}

inline std::string ReadText(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::ostringstream out;
  out << in.rdbuf();
  return out.str();
}

inline nlohmann::json ReadJson(const std::string& path) {
  return nlohmann::json::parse(ReadText(path));
}

inline const char kTinyConfig[] = "tests/conformance/data/v41-tiny/config.json";
inline const char kTinyDir[] = "tests/conformance/data/v41-tiny";
inline const char kReleasedFlat[] = "configs/deepseek-v41-flash/inference_config.json";
inline const char kReleasedHf[] = "configs/deepseek-v41-flash/config.json";
inline const char kReleasedDir[] = "configs/deepseek-v41-flash";

}  // namespace flashserve::model::testing
