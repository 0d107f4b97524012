// Shared helpers for the tokenizer tests: fixture paths, file and JSONL reading, hex.
#pragma once

#include <cstdlib>
#include <fstream>
#include <memory>
#include <sstream>
#include <string>
#include <vector>

#include "gtest/gtest.h"
#include "model/tokenizer/tokenizer.h"
#include "nlohmann/json.hpp"

namespace flashserve::tokenizer::testing {

inline std::string SourceDir() {
  const char* dir = std::getenv("FS_SOURCE_DIR");
  return dir != nullptr ? std::string(dir) : std::string(".");
}
inline std::string FixtureDir() { return SourceDir() + "/tests/conformance/data/tokenizer"; }
inline std::string TinyDir() { return SourceDir() + "/tests/conformance/data/v41-tiny"; }

inline std::string ReadFileOrDie(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  EXPECT_TRUE(in.good()) << "cannot open " << path;
  std::ostringstream s;
  s << in.rdbuf();
  return s.str();
}

inline std::vector<nlohmann::json> ReadJsonl(const std::string& path) {
  std::ifstream in(path);
  EXPECT_TRUE(in.good()) << "cannot open " << path;
  std::vector<nlohmann::json> lines;
  std::string line;
  while (std::getline(in, line)) {
    if (!line.empty()) lines.push_back(nlohmann::json::parse(line));
  }
  return lines;
}

inline std::string Hex(std::string_view bytes) {
  static const char* kDigits = "0123456789abcdef";
  std::string out;
  for (unsigned char c : bytes) {
    out.push_back(kDigits[c >> 4]);
    out.push_back(kDigits[c & 15]);
  }
  return out;
}

inline std::string FromHex(const std::string& hex) {
  std::string out;
  for (size_t i = 0; i + 1 < hex.size(); i += 2) {
    out.push_back(static_cast<char>(std::stoi(hex.substr(i, 2), nullptr, 16)));
  }
  return out;
}

// The stand-in DeepSeek tokenizer of the fixtures, loaded once per test binary.
inline const Tokenizer& StandIn() {
  static const Tokenizer* const tokenizer = [] {
    auto loaded = Tokenizer::Load(FixtureDir());
    if (!loaded.ok()) {
      ADD_FAILURE() << loaded.status();
      std::abort();
    }
    return loaded->release();
  }();
  return *tokenizer;
}

}  // namespace flashserve::tokenizer::testing
