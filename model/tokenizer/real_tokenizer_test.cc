// Optional: DeepSeek's real V4/V4.1 tokenizer.json, when FS_DEEPSEEK_TOKENIZER names it (file or
// directory), must give the ids observed with the real tokenizer (quoted in the fixture README,
// "What is known about DeepSeek's real tokenizer"). Skipped when the variable is unset: the real
// file is not in the repository.
#include <cstdlib>
#include <string>
#include <vector>

#include "gtest/gtest.h"
#include "model/tokenizer/tokenizer.h"

namespace flashserve::tokenizer {
namespace {

TEST(RealDeepSeekTokenizer, MatchesObservedIds) {
  const char* path = std::getenv("FS_DEEPSEEK_TOKENIZER");
  if (path == nullptr || *path == '\0') GTEST_SKIP() << "FS_DEEPSEEK_TOKENIZER not set";
  auto tok = Tokenizer::Load(path);
  ASSERT_TRUE(tok.ok()) << tok.status();
  EXPECT_EQ((*tok)->VocabSize(), 129280u);
  const std::vector<std::pair<std::string, std::vector<TokenId>>> probes = {
      {"Hello, world! 123\nsecond line", {19923, 14, 2058, 3, 223, 6895, 201, 10930, 2562}},
      {"你好，世界！ Καλημέρα κόσμε 🌍",
       {30594, 303, 3427, 1175, 51901, 25696, 29537, 11983, 122189, 2781, 30619, 73369, 238}},
      {"<｜begin▁of▁sentence｜><｜User｜>question<｜Assistant｜><think>reason</think>answer"
       "<｜end▁of▁sentence｜>",
       {0, 128803, 20072, 128804, 128821, 86512, 128822, 19995, 1}},
      {"｜DSML｜<｜action｜><｜query｜><｜authority｜><｜domain｜><｜title｜><｜read_url｜>"
       "<｜latest_reminder｜>",
       {128825, 128829, 128830, 128831, 128832, 128836, 128845, 128828}},
  };
  for (const auto& [text, ids] : probes) {
    auto got = (*tok)->Encode(text);
    ASSERT_TRUE(got.ok()) << got.status();
    EXPECT_EQ(*got, ids) << text;
    EXPECT_EQ(*(*tok)->Decode(ids), text);
  }
}

}  // namespace
}  // namespace flashserve::tokenizer
