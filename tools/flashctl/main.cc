// flashctl: the FlashServe operator CLI. Parses the command line (CLI11) and dispatches to one
// function per command (commands/*.cc).
#include <CLI/CLI.hpp>

#include "tools/flashctl/commands/commands.h"

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

  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    return app.exit(e) == 0 ? 0 : 2;
  }
  if (inspect_cmd->parsed()) return RunCheckpointInspect(inspect);
  return 2;
}
