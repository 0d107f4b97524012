// flashctl: the FlashServe operator CLI. Parses the command line (CLI11) and dispatches to one
// function per command (commands/*.cc).
#include <CLI/CLI.hpp>

#include <iostream>

#include "tools/flashctl/commands/commands.h"
#include "tools/flashctl/commands/tokenizer_commands.h"

int main(int argc, char** argv) {
  using namespace flashserve::flashctl;
  CLI::App app{"flashctl: inspect and manage a FlashServe deployment"};
  app.require_subcommand(1);

  CLI::App* checkpoint = app.add_subcommand("checkpoint", "inspect model checkpoints and configs");
  checkpoint->require_subcommand(1);
  CheckpointInspectOptions inspect;
  CLI::App* inspect_cmd = checkpoint->add_subcommand(
      "inspect", "config summary, layer schedule, parameter counts, KV bytes per token");
  inspect_cmd->add_option("path", inspect.path, "checkpoint directory or config.json")->required();
  inspect_cmd->add_flag("--json", inspect.json, "print JSON instead of tables");

  TokenizeOptions tokenize;
  CLI::App* tokenize_cmd = app.add_subcommand("tokenize", "encode text with a tokenizer.json");
  tokenize_cmd->add_option("--tokenizer", tokenize.tokenizer, "tokenizer.json or its directory")
      ->required();
  auto* text_opt = tokenize_cmd->add_option("--text", tokenize.text, "text to encode");
  auto* stdin_opt = tokenize_cmd->add_flag("--stdin", tokenize.read_stdin, "encode standard input");
  text_opt->excludes(stdin_opt);
  tokenize_cmd->add_flag("--json", tokenize.json, "print {\"ids\": [...], \"tokens\": [...]}");

  DetokenizeOptions detokenize;
  CLI::App* detokenize_cmd = app.add_subcommand("detokenize", "decode token ids to text");
  detokenize_cmd->add_option("--tokenizer", detokenize.tokenizer, "tokenizer.json or its directory")
      ->required();
  detokenize_cmd->add_option("--ids", detokenize.ids, "ids: \"1,2,3\", \"1 2 3\" or \"[1, 2, 3]\"")
      ->required();
  detokenize_cmd->add_flag("--skip-special", detokenize.skip_special, "drop special tokens");

  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    return app.exit(e) == 0 ? 0 : 2;
  }
  if (inspect_cmd->parsed()) return RunCheckpointInspect(inspect);
  if (tokenize_cmd->parsed()) {
    if (!tokenize.read_stdin && text_opt->count() == 0) {
      std::cerr << "flashctl tokenize: give --text TEXT or --stdin\n";
      return 2;
    }
    return RunTokenize(tokenize);
  }
  if (detokenize_cmd->parsed()) return RunDetokenize(detokenize);
  return 2;
}
