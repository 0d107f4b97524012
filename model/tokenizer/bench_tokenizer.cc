// Encode / decode throughput of the stand-in DeepSeek tokenizer on 1 MB texts.
//   build/bench/bench_tokenizer [repo root]     (run from the repository root by default)
// Corpora: "prose" = the two fixture READMEs (English, Markdown, some code) repeated to 1 MB;
// "mixed" = every encode_cases.jsonl text (18 categories, many scripts) repeated to 1 MB.
// Each encode is timed cold (fresh tokenizer, empty piece cache) and warm (best of 3).
#include <chrono>
#include <cstdio>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "model/tokenizer/stream_decoder.h"
#include "model/tokenizer/tokenizer.h"
#include "nlohmann/json.hpp"

namespace {

using flashserve::tokenizer::StreamDecoder;
using flashserve::tokenizer::TokenId;
using flashserve::tokenizer::Tokenizer;

constexpr size_t kTarget = 1 << 20;

std::string Read(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::ostringstream s;
  s << in.rdbuf();
  return s.str();
}

std::string RepeatTo(const std::string& unit) {
  std::string text;
  while (text.size() + unit.size() <= kTarget) text += unit;
  return text;
}

double Seconds(std::chrono::steady_clock::time_point start) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
}

int Run(const std::string& root, const std::string& name, const std::string& text) {
  const std::string dir = root + "/tests/conformance/data/tokenizer";
  auto cold = Tokenizer::Load(dir);
  if (!cold.ok()) {
    std::fprintf(stderr, "%s\n", std::string(cold.status().message()).c_str());
    return 1;
  }
  const double mb = static_cast<double>(text.size()) / 1e6;
  auto start = std::chrono::steady_clock::now();
  auto ids = (*cold)->Encode(text);
  const double cold_s = Seconds(start);
  if (!ids.ok()) return 1;
  double warm_s = 1e9;
  for (int i = 0; i < 3; ++i) {
    start = std::chrono::steady_clock::now();
    auto again = (*cold)->Encode(text);
    warm_s = std::min(warm_s, Seconds(start));
    if (!again.ok() || *again != *ids) return 1;
  }
  start = std::chrono::steady_clock::now();
  auto pieces = (*cold)->PreTokenize(text);
  const double split_s = Seconds(start);
  if (!pieces.ok()) return 1;
  start = std::chrono::steady_clock::now();
  auto decoded = (*cold)->Decode(*ids);
  const double decode_s = Seconds(start);
  StreamDecoder stream(cold->get());
  std::string streamed;
  streamed.reserve(text.size());
  start = std::chrono::steady_clock::now();
  for (TokenId id : *ids) (void)stream.Next(id, &streamed);
  stream.Flush(&streamed);
  const double stream_s = Seconds(start);
  if (!decoded.ok() || *decoded != text || streamed != text) {
    std::fprintf(stderr, "%s: round trip failed\n", name.c_str());
    return 1;
  }
  std::printf(
      "%-6s %.2f MB, %zu tokens, %zu pieces: encode cold %.1f MB/s, warm %.1f MB/s "
      "(regex splits alone %.1f MB/s); decode %.0f MB/s; stream %.1f ns/token\n",
      name.c_str(), mb, ids->size(), pieces->size(), mb / cold_s, mb / warm_s, mb / split_s,
      mb / decode_s, stream_s * 1e9 / static_cast<double>(ids->size()));
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  const std::string root = argc > 1 ? argv[1] : ".";
  const std::string prose = RepeatTo(Read(root + "/tests/conformance/data/tokenizer/README.md") +
                                     Read(root + "/tests/conformance/data/v41-tiny/README.md"));
  std::string unit;
  std::ifstream cases(root + "/tests/conformance/data/tokenizer/encode_cases.jsonl");
  for (std::string line; std::getline(cases, line);) {
    unit += nlohmann::json::parse(line)["text"].get<std::string>() + "\n";
  }
  if (prose.empty() || unit.empty()) {
    std::fprintf(stderr, "fixtures not found under %s\n", root.c_str());
    return 1;
  }
  std::printf("bench_tokenizer: single thread; reproduce: build/bench/bench_tokenizer %s\n",
              root.c_str());
  return Run(root, "prose", prose) | Run(root, "mixed", RepeatTo(unit));
}
