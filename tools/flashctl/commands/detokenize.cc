// flashctl detokenize TOKENIZER IDS [--skip-special]
#include <charconv>
#include <iostream>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "model/tokenizer/tokenizer.h"
#include "tools/flashctl/commands/tokenizer_commands.h"

namespace flashserve::flashctl {
namespace {

// Ids separated by commas and/or whitespace, optionally inside [ ].
absl::StatusOr<std::vector<tokenizer::TokenId>> ParseIds(const std::string& text) {
  std::vector<tokenizer::TokenId> ids;
  size_t i = 0;
  const size_t n = text.size();
  auto is_separator = [](char c) {
    return c == ',' || c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '[' || c == ']';
  };
  while (i < n) {
    if (is_separator(text[i])) {
      ++i;
      continue;
    }
    size_t end = i;
    while (end < n && !is_separator(text[end])) ++end;
    tokenizer::TokenId id = 0;
    const auto [ptr, ec] = std::from_chars(text.data() + i, text.data() + end, id);
    if (ec != std::errc() || ptr != text.data() + end || id < 0) {
      return absl::InvalidArgumentError(absl::StrCat("bad token id \"", text.substr(i, end - i),
                                                     "\" (ids are non-negative integers)"));
    }
    ids.push_back(id);
    i = end;
  }
  return ids;
}

}  // namespace

int RunDetokenize(const DetokenizeOptions& options) {
  auto tokenizer = tokenizer::Tokenizer::Load(options.tokenizer);
  if (!tokenizer.ok()) {
    std::cerr << "flashctl: " << tokenizer.status().message() << "\n";
    return 1;
  }
  auto ids = ParseIds(options.ids);
  if (!ids.ok()) {
    std::cerr << "flashctl: " << ids.status().message() << "\n";
    return 1;
  }
  auto text = (*tokenizer)->Decode(*ids, options.skip_special);
  if (!text.ok()) {
    std::cerr << "flashctl: " << text.status().message() << "\n";
    return 1;
  }
  std::cout << *text << "\n";
  return 0;
}

}  // namespace flashserve::flashctl
