// flashctl's commands: one file per command in this folder, each a plain function over an options
// struct. Only main.cc includes CLI11 (one slow translation unit per binary); commands print to
// stdout and return the process exit code (0 ok, 1 failure with one line on stderr, 2 usage).
#pragma once

#include <string>

namespace flashserve::flashctl {

struct CheckpointInspectOptions {
  std::string path;   // checkpoint directory, or a config.json (flat or HF)
  bool json = false;  // machine-readable output
};
// `flashctl checkpoint inspect PATH [--json]`: config summary, layer schedule, parameter counts by
// kind, KV bytes per token by tier. A directory with safetensors files is loaded and every tensor
// checked against the config; a bare config is inspected from the config alone.
int RunCheckpointInspect(const CheckpointInspectOptions& options);

}  // namespace flashserve::flashctl
