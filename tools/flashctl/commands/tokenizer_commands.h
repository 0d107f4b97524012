// flashctl's tokenizer commands (tokenize.cc, detokenize.cc): plain functions over options
// structs, as in commands.h. They print to stdout and return the exit code (0 ok, 1 failure with
// one line on stderr). Link: fs_model_tokenizer, nlohmann_json.
#pragma once

#include <string>

namespace flashserve::flashctl {

struct TokenizeOptions {
  std::string tokenizer;  // directory holding tokenizer.json (+ tokenizer_config.json), or the file
  std::string text;       // the text to encode (ignored with read_stdin)
  bool read_stdin = false;  // encode all of standard input instead of `text`
  bool json = false;        // print {"ids":[...],"tokens":[...]} instead of space-separated ids
};
// `flashctl tokenize TOKENIZER (TEXT | --stdin) [--json]`: the ids of the text, every added
// token matched, nothing added (no BOS). Errors: unreadable tokenizer, invalid UTF-8 input.
int RunTokenize(const TokenizeOptions& options);

struct DetokenizeOptions {
  std::string tokenizer;      // as TokenizeOptions::tokenizer
  std::string ids;            // "1,2,3", "1 2 3" or "[1, 2, 3]"
  bool skip_special = false;  // drop special added tokens (BOS, EOS, ...) from the text
};
// `flashctl detokenize TOKENIZER IDS [--skip-special]`: the decoded text followed by a newline
// (invalid UTF-8 shown as U+FFFD). Errors: unreadable tokenizer, a malformed or unknown id.
int RunDetokenize(const DetokenizeOptions& options);

}  // namespace flashserve::flashctl
