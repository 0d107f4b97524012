// The tiny V4.1 model's tokenizer (2048 ids, plain ByteLevel pre-tokenizer with the GPT-2 regex):
// loads, names its special tokens, and round-trips the golden prompts.
#include <string>
#include <vector>

#include "gtest/gtest.h"
#include "model/tokenizer/stream_decoder.h"
#include "model/tokenizer/tokenizer.h"
#include "model/tokenizer/tokenizer_test_util.h"

namespace flashserve::tokenizer {
namespace {

using nlohmann::json;

class TinyTokenizerTest : public ::testing::Test {
 protected:
  void SetUp() override {
    auto loaded = Tokenizer::Load(testing::TinyDir() + "/tokenizer.json");
    ASSERT_TRUE(loaded.ok()) << loaded.status();
    tok_ = *std::move(loaded);
    golden_ = json::parse(testing::ReadFileOrDie(testing::TinyDir() + "/golden.json"));
  }
  std::vector<TokenId> PromptIds(const char* name) const {
    return golden_["prompts"][name]["ids"].get<std::vector<TokenId>>();
  }
  std::unique_ptr<Tokenizer> tok_;
  json golden_;
};

TEST_F(TinyTokenizerTest, VocabularyAndSpecialIds) {
  EXPECT_EQ(tok_->VocabSize(), 2048u);
  EXPECT_EQ(tok_->special_ids().bos, 0);
  EXPECT_EQ(tok_->special_ids().eos, 1);
  EXPECT_EQ(tok_->special_ids().pad, 2);
  for (const auto& [name, id] : golden_["special_tokens"].items()) {
    EXPECT_EQ(tok_->TokenToId(name), id.get<TokenId>()) << name;
    EXPECT_TRUE(tok_->IsSpecial(id.get<TokenId>())) << name;
  }
}

// Prompt a is BOS plus the first 200 tokens of the text's encoding.
TEST_F(TinyTokenizerTest, PromptAIsBosPlusTextPrefix) {
  const std::vector<TokenId> ids = PromptIds("a");
  const std::string text = golden_["prompts"]["a"]["text"].get<std::string>();
  ASSERT_EQ(ids.size(), 201u);
  ASSERT_EQ(ids.front(), 0);
  auto encoded = tok_->Encode(text);
  ASSERT_TRUE(encoded.ok());
  ASSERT_GT(encoded->size(), 200u);
  EXPECT_EQ(std::vector<TokenId>(encoded->begin(), encoded->begin() + 200),
            std::vector<TokenId>(ids.begin() + 1, ids.end()));
  auto decoded = tok_->Decode(ids);
  ASSERT_TRUE(decoded.ok());
  EXPECT_EQ(*tok_->Encode(*decoded), ids);
  EXPECT_EQ(decoded->rfind("<｜begin▁of▁sentence｜>The quick brown fox", 0), 0u);
}

// Prompt b is BOS <｜User｜> question <｜Assistant｜></think>, 26 ids; the question's final "."
// is not in the golden ids (the fixture keeps the prompt length even), so the ids hold the
// encoding of the text without its last token.
TEST_F(TinyTokenizerTest, PromptBDecodesAndReencodes) {
  const std::vector<TokenId> ids = PromptIds("b");
  const std::string text = golden_["prompts"]["b"]["text"].get<std::string>();
  ASSERT_EQ(text.back(), '.');
  const std::string question = text.substr(0, text.size() - 1);
  auto decoded = tok_->Decode(ids);
  ASSERT_TRUE(decoded.ok());
  EXPECT_EQ(*decoded, "<｜begin▁of▁sentence｜><｜User｜>" + question + "<｜Assistant｜></think>");
  EXPECT_EQ(*tok_->Encode(*decoded), ids);
  EXPECT_EQ(*tok_->Decode(ids, /*skip_special=*/true), question);
  std::vector<TokenId> with_dot(ids.begin() + 2, ids.end() - 2);
  with_dot.push_back(*tok_->TokenToId("."));
  EXPECT_EQ(*tok_->Encode(text), with_dot);
  // Treating special tokens as text gives different ids (the control tokens are not matched).
  EXPECT_NE(*tok_->Encode(*decoded, {.split_special = true}), ids);
}

TEST_F(TinyTokenizerTest, PromptCReencodesAndStreams) {
  const std::vector<TokenId> ids = PromptIds("c");
  auto decoded = tok_->Decode(ids);
  ASSERT_TRUE(decoded.ok());
  EXPECT_EQ(*tok_->Encode(*decoded), ids);
  StreamDecoder stream(tok_.get());
  std::string streamed;
  for (TokenId id : ids) ASSERT_TRUE(stream.Next(id, &streamed).ok());
  stream.Flush(&streamed);
  EXPECT_EQ(streamed, *decoded);
}

TEST_F(TinyTokenizerTest, GreedyOutputsDecodeLosslessly) {
  // Model outputs are arbitrary ids; whatever bytes they make, the stream equals Decode.
  for (const char* name : {"a", "b", "c"}) {
    const auto ids = golden_["prompts"][name]["greedy_tokens"].get<std::vector<TokenId>>();
    StreamDecoder stream(tok_.get());
    std::string streamed;
    for (TokenId id : ids) ASSERT_TRUE(stream.Next(id, &streamed).ok());
    stream.Flush(&streamed);
    EXPECT_EQ(streamed, *tok_->Decode(ids)) << name;
  }
}

}  // namespace
}  // namespace flashserve::tokenizer
