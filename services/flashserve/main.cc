// flashserve: the FlashServe server binary. The first argument is the role; the rest goes to it.
//   flashserve cache [--config FILE] [--cache.key=value ...]
//   flashserve generate --model DIR (--prompt TEXT | --tokens IDS) [...]
#include <iostream>
#include <string>
#include <string_view>
#include <vector>

#include "cache_service/server/cache_main.h"
#include "services/generate/generate.h"
#include "services/score/score.h"

namespace {

constexpr std::string_view kUsage =
    "usage: flashserve ROLE [--config FILE] [--key=value ...] [--help] [--print-config]\n"
    "roles:\n"
    "  cache    global KV cache (RocksDB on SSD) and SWA snapshot pool, gRPC + /metrics\n"
    "  generate run one prompt on the CPU backend: --model DIR (--prompt TEXT | --tokens IDS)\n"
    "           [--image FILE] [--max-tokens N] [--temperature T] [--seed S] [--json]\n"
    "  score    log-probabilities and perplexity of a sequence: --model DIR (--tokens IDS |\n"
    "           --text-file FILE) [--prefill-mode exact|ced] [--logits-out FILE] [--json]\n";

}  // namespace

int main(int argc, char** argv) {
  if (argc < 2) {
    std::cerr << kUsage;
    return 2;
  }
  const std::string_view role = argv[1];
  const std::vector<std::string> args(argv + 2, argv + argc);
  if (role == "cache") return flashserve::cache::RunCacheCommand(args);
  if (role == "generate") return flashserve::generate::RunGenerateCommand(args);
  if (role == "score") return flashserve::score::RunScoreCommand(args);
  if (role == "--help" || role == "-h" || role == "help") {
    std::cout << kUsage;
    return 0;
  }
  std::cerr << "flashserve: unknown role '" << role << "'\n" << kUsage;
  return 2;
}
