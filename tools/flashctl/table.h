// Plain-text tables for flashctl's human-readable output (`--json` is the scripting format).
#pragma once

#include <string>
#include <vector>

namespace flashserve::flashctl {

// A table with a header row; columns are left-aligned except those marked numeric.
class Table {
 public:
  explicit Table(std::vector<std::string> header, std::vector<bool> numeric = {});
  void AddRow(std::vector<std::string> row);
  // Renders with two spaces between columns and a dashed rule under the header.
  std::string Render() const;

 private:
  std::vector<std::string> header_;
  std::vector<bool> numeric_;
  std::vector<std::vector<std::string>> rows_;
};

// 1234567 -> "1,234,567".
std::string WithThousands(long long value);
// Bytes in the largest binary unit that keeps the value >= 1 ("1.50 GiB").
std::string HumanBytes(double bytes);
// Parameter counts: "284.3B", "13.1M", "512".
std::string HumanCount(double count);

}  // namespace flashserve::flashctl
