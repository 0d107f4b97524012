// flashctl tokenize TOKENIZER (TEXT | --stdin) [--json]
#include <iostream>
#include <iterator>
#include <string>

#include "model/tokenizer/tokenizer.h"
#include "nlohmann/json.hpp"
#include "tools/flashctl/commands/tokenizer_commands.h"

namespace flashserve::flashctl {

int RunTokenize(const TokenizeOptions& options) {
  auto tokenizer = tokenizer::Tokenizer::Load(options.tokenizer);
  if (!tokenizer.ok()) {
    std::cerr << "flashctl: " << tokenizer.status().message() << "\n";
    return 1;
  }
  std::string text = options.text;
  if (options.read_stdin) {
    text.assign(std::istreambuf_iterator<char>(std::cin), std::istreambuf_iterator<char>());
    if (std::cin.bad()) {
      std::cerr << "flashctl: reading standard input failed\n";
      return 1;
    }
  }
  auto ids = (*tokenizer)->Encode(text);
  if (!ids.ok()) {
    std::cerr << "flashctl: " << ids.status().message() << "\n";
    return 1;
  }
  if (options.json) {
    nlohmann::ordered_json doc;
    doc["ids"] = *ids;
    doc["tokens"] = nlohmann::ordered_json::array();
    // Token strings come from tokenizer.json, so they are valid UTF-8 and dump cannot throw.
    for (tokenizer::TokenId id : *ids)
      doc["tokens"].push_back(std::string(*(*tokenizer)->IdToToken(id)));
    std::cout << doc.dump() << "\n";
    return 0;
  }
  for (size_t i = 0; i < ids->size(); ++i) std::cout << (i ? " " : "") << (*ids)[i];
  std::cout << "\n";
  return 0;
}

}  // namespace flashserve::flashctl
