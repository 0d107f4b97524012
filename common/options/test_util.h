// Test helpers for common/options: a fresh temporary directory per test.
#pragma once

#include <filesystem>
#include <fstream>
#include <string>
#include <string_view>

#include "gtest/gtest.h"

namespace flashserve::options::testing_util {

// Creates <TempDir>/<suite>.<test>/ (emptied first) and writes files into it.
class TempConfigDir {
 public:
  TempConfigDir() {
    const auto* info = ::testing::UnitTest::GetInstance()->current_test_info();
    dir_ = std::filesystem::path(::testing::TempDir()) /
           (std::string("fs_options_") + info->test_suite_name() + "." + info->name());
    std::filesystem::remove_all(dir_);
    std::filesystem::create_directories(dir_);
  }
  ~TempConfigDir() {
    std::error_code ignored;
    std::filesystem::remove_all(dir_, ignored);
  }

  // Writes `contents` to <dir>/<name> and returns the full path.
  std::string Write(std::string_view name, std::string_view contents) const {
    const std::string path = (dir_ / name).string();
    std::ofstream out(path, std::ios::binary);
    out << contents;
    EXPECT_TRUE(out.good()) << path;
    return path;
  }
  std::string Path(std::string_view name) const { return (dir_ / name).string(); }

 private:
  std::filesystem::path dir_;
};

}  // namespace flashserve::options::testing_util
