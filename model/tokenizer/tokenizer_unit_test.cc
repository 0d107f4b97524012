// Mechanism tests on small hand-made inputs: UTF-8 repair and streaming (expected values from
// CPython 3.11's bytes.decode / incremental decoder, errors="replace"), BPE merge order, the
// Oniguruma -> PCRE2 translation, added-token matching rules, and input validation.
#include <string>
#include <thread>
#include <vector>

#include "gtest/gtest.h"
#include "model/tokenizer/byte_level.h"
#include "model/tokenizer/regex_split.h"
#include "model/tokenizer/stream_decoder.h"
#include "model/tokenizer/tokenizer.h"
#include "model/tokenizer/tokenizer_test_util.h"
#include "model/tokenizer/utf8.h"

namespace flashserve::tokenizer {
namespace {

using nlohmann::json;

std::string Lossy(std::string_view bytes) {
  std::string out;
  AppendLossyUtf8(bytes, &out);
  return out;
}

const std::string kFffd = "\xEF\xBF\xBD";

TEST(Utf8, LossyDecodeMatchesPython) {
  EXPECT_EQ(Lossy("\xE4\xBD"), kFffd);
  EXPECT_EQ(Lossy("\xED\xA0\x80"), kFffd + kFffd + kFffd);              // surrogate
  EXPECT_EQ(Lossy("\xF0\x9F\x98"), kFffd);                              // truncated emoji
  EXPECT_EQ(Lossy("\xC0\xAF"), kFffd + kFffd);                          // overlong
  EXPECT_EQ(Lossy("\xF4\x90\x80\x80"), kFffd + kFffd + kFffd + kFffd);  // above U+10FFFF
  EXPECT_EQ(Lossy("a\xE2\x82"
                  "b"),
            "a" + kFffd + "b");
  EXPECT_EQ(Lossy("\xE0\x80\x80"), kFffd + kFffd + kFffd);
  EXPECT_EQ(Lossy("\xF0\x90\x80"
                  "A"),
            kFffd + "A");
  EXPECT_EQ(Lossy("\xFF\xFE"), kFffd + kFffd);
  EXPECT_EQ(Lossy("h\xC3\xA9llo \xF0\x9F\x98\x80"), "h\xC3\xA9llo \xF0\x9F\x98\x80");
  EXPECT_TRUE(IsValidUtf8("\xF4\x8F\xBF\xBF"));
  EXPECT_FALSE(IsValidUtf8("\xED\xA0\x80"));
}

TEST(ByteLevel, Alphabet) {
  EXPECT_EQ(ByteToToken(' '), "Ġ");
  EXPECT_EQ(ByteToToken('\n'), "Ċ");
  EXPECT_EQ(ByteToToken('A'), "A");
  EXPECT_EQ(ByteLevelToBytes("ĠHello"), " Hello");
  EXPECT_EQ(ByteLevelToBytes("<｜User｜>"), std::nullopt);
  for (int b = 0; b < 256; ++b) EXPECT_EQ(CodePointToByte(ByteToCodePoint(b)), b);
}

// Streams byte chunks through the single-byte ids of the stand-in (ids 3..258 are the bytes).
std::vector<std::string> StreamBytes(const std::vector<std::string>& chunks, std::string* tail) {
  const Tokenizer& tok = testing::StandIn();
  StreamDecoder stream(&tok);
  std::vector<std::string> out;
  for (const std::string& chunk : chunks) {
    std::string text;
    for (char c : chunk) {
      const TokenId id = *tok.TokenToId(ByteToToken(static_cast<uint8_t>(c)));
      EXPECT_TRUE(stream.Next(id, &text).ok());
    }
    out.push_back(text);
  }
  stream.Flush(tail);
  return out;
}

TEST(StreamDecoder, FollowsCPythonIncrementalDecoder) {
  std::string tail;
  EXPECT_EQ(StreamBytes({"\xED", "\xA0", "\x80"}, &tail),
            (std::vector<std::string>{"", "", kFffd + kFffd + kFffd}));
  EXPECT_EQ(tail, "");
  tail.clear();
  EXPECT_EQ(StreamBytes({"\xED", "\xA0"}, &tail), (std::vector<std::string>{"", ""}));
  EXPECT_EQ(tail, kFffd + kFffd);  // the truncated surrogate waits until the flush
  tail.clear();
  EXPECT_EQ(StreamBytes({"\xE0", "\x80", "A"}, &tail),
            (std::vector<std::string>{"", kFffd + kFffd, "A"}));
  tail.clear();
  EXPECT_EQ(StreamBytes({"\xF0\x9F", "\x98", "\x80\xF0"}, &tail),
            (std::vector<std::string>{"", "", "\xF0\x9F\x98\x80"}));
  EXPECT_EQ(tail, kFffd);
}

// A minimal byte-level tokenizer: the 256 byte tokens (ids 0..255) plus `extra` entries, merges
// in the given order, GPT-2 style ByteLevel pre-tokenizer without regex.
json MinimalTokenizer(const std::vector<std::string>& extra,
                      const std::vector<std::pair<std::string, std::string>>& merges) {
  json vocab = json::object();
  for (int b = 0; b < 256; ++b) vocab[ByteToToken(static_cast<uint8_t>(b))] = b;
  for (size_t i = 0; i < extra.size(); ++i) vocab[extra[i]] = 256 + static_cast<int>(i);
  json m = json::array();
  for (const auto& [a, b] : merges) m.push_back({a, b});
  return json{
      {"version", "1.0"},
      {"model", {{"type", "BPE"}, {"vocab", vocab}, {"merges", m}}},
      {"pre_tokenizer", {{"type", "ByteLevel"}, {"add_prefix_space", false}, {"use_regex", false}}},
      {"decoder", {{"type", "ByteLevel"}}}};
}

std::vector<std::string> Tokens(const Tokenizer& tok, std::string_view text) {
  std::vector<std::string> out;
  const absl::StatusOr<std::vector<TokenId>> ids = tok.Encode(text);
  if (!ids.ok()) return {std::string(ids.status().message())};
  for (TokenId id : *ids) out.emplace_back(*tok.IdToToken(id));
  return out;
}

TEST(Bpe, MergesApplyInRankOrderLeftmostFirst) {
  auto bc_first =
      Tokenizer::FromJson(MinimalTokenizer({"bc", "ab"}, {{"b", "c"}, {"a", "b"}}).dump());
  ASSERT_TRUE(bc_first.ok()) << bc_first.status();
  EXPECT_EQ(Tokens(**bc_first, "abc"), (std::vector<std::string>{"a", "bc"}));
  auto ab_first =
      Tokenizer::FromJson(MinimalTokenizer({"bc", "ab"}, {{"a", "b"}, {"b", "c"}}).dump());
  ASSERT_TRUE(ab_first.ok());
  EXPECT_EQ(Tokens(**ab_first, "abc"), (std::vector<std::string>{"ab", "c"}));
  // Equal ranks: the leftmost pair merges first.
  auto aa =
      Tokenizer::FromJson(MinimalTokenizer({"aa", "aaaa"}, {{"a", "a"}, {"aa", "aa"}}).dump());
  ASSERT_TRUE(aa.ok());
  EXPECT_EQ(Tokens(**aa, "aaa"), (std::vector<std::string>{"aa", "a"}));
  EXPECT_EQ(Tokens(**aa, "aaaaa"), (std::vector<std::string>{"aaaa", "a"}));
  // Repeated pieces come from the cache and must not differ.
  EXPECT_EQ(Tokens(**aa, "aaaaa"), (std::vector<std::string>{"aaaa", "a"}));
}

TEST(Bpe, IgnoreMergesTakesWholePieceFromVocab) {
  json j = MinimalTokenizer({"xy", "xyz"}, {{"x", "y"}});
  EXPECT_EQ(Tokens(**Tokenizer::FromJson(j.dump()), "xyz"), (std::vector<std::string>{"xy", "z"}));
  j["model"]["ignore_merges"] = true;
  EXPECT_EQ(Tokens(**Tokenizer::FromJson(j.dump()), "xyz"), (std::vector<std::string>{"xyz"}));
}

TEST(Regex, TranslationKeepsOnigurumaMeaning) {
  EXPECT_EQ(*TranslateOnigurumaPattern(R"(\s+(?!\S))"),
            R"([\t-\r\x{85}\p{Z}]+(?![^\t-\r\x{85}\p{Z}]))");
  EXPECT_EQ(*TranslateOnigurumaPattern(R"([^\s\p{L}])"), R"([^\t-\r\x{85}\p{Z}\p{L}])");
  EXPECT_EQ(*TranslateOnigurumaPattern(R"(\u00e9\v)"), R"(\x{00e9}\x{0B})");
  for (const char* bad : {R"(\d+)", R"(\w)", R"(\h)", R"(^a)", R"(a$)", R"((?i)a)", R"([a[b]])",
                          R"(\p{Han})", R"(a{,3})", R"([\S])", R"(\1)"}) {
    EXPECT_EQ(TranslateOnigurumaPattern(bad).status().code(), absl::StatusCode::kInvalidArgument)
        << bad;
  }
}

std::vector<std::string> Pieces(std::string_view text) {
  std::vector<std::string> out;
  const absl::StatusOr<std::vector<Span>> pieces = testing::StandIn().PreTokenize(text);
  if (!pieces.ok()) return {std::string(pieces.status().message())};
  for (const Span& s : *pieces) out.emplace_back(text.substr(s.begin, s.end - s.begin));
  return out;
}

// Oniguruma's \s is the White_Space property: U+0085 is a space, U+180E (Cf since Unicode 6.3)
// and U+200B are not; PCRE2's native \s would also take U+180E.
TEST(Regex, WhitespaceClassIsOniguruma) {
  EXPECT_EQ(Pieces("\u0085\n"), (std::vector<std::string>{"\u0085\n"}));
  EXPECT_EQ(Pieces("\u180E\n"), (std::vector<std::string>{"\u180E", "\n"}));
  EXPECT_EQ(Pieces("\u200B\n"), (std::vector<std::string>{"\u200B", "\n"}));
  EXPECT_EQ(Pieces("1234567"), (std::vector<std::string>{"123", "456", "7"}));
  EXPECT_EQ(Pieces("a  b"), (std::vector<std::string>{"a", " ", " b"}));
}

TEST(AddedTokens, LeftmostLongestAndInvalidInput) {
  json j = MinimalTokenizer({}, {});
  j["added_tokens"] =
      json::array({{{"id", 300}, {"content", "<a>"}, {"special", true}, {"normalized", false}},
                   {{"id", 301}, {"content", "<a><b>"}, {"special", false}, {"normalized", false}},
                   {{"id", 302}, {"content", "b>"}, {"special", false}, {"normalized", false}}});
  auto tok = Tokenizer::FromJson(j.dump());
  ASSERT_TRUE(tok.ok()) << tok.status();
  EXPECT_EQ(*(*tok)->Encode("x<a><b>"), (std::vector<TokenId>{'x', 301}));
  EXPECT_EQ(*(*tok)->Encode("<a>b>"), (std::vector<TokenId>{300, 302}));
  // split_special: "<a>" is text but still consumed its span in the scan; "b>" is matched.
  EXPECT_EQ(*(*tok)->Encode("<a>b>", {.split_special = true}),
            (std::vector<TokenId>{'<', 'a', '>', 302}));
  EXPECT_EQ((*tok)->VocabSize(), 303u);
  // Normalized tokens are matched only in what the non-normalized pass left.
  j["added_tokens"][1]["normalized"] = true;
  auto two_pass = Tokenizer::FromJson(j.dump());
  ASSERT_TRUE(two_pass.ok());
  EXPECT_EQ(*(*two_pass)->Encode("x<a><b>"), (std::vector<TokenId>{'x', 300, '<', 302}));
  EXPECT_FALSE((*tok)->IsValid(299));
  EXPECT_EQ((*tok)->Encode("bad \xFF").status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_TRUE((*tok)->Encode("").ok());
}

// Concurrent encoders (each with its own thread-local piece cache) agree with the fixture.
TEST(Concurrency, ParallelEncodesEqualFixture) {
  const Tokenizer& tok = testing::StandIn();
  const std::vector<json> cases =
      testing::ReadJsonl(testing::FixtureDir() + "/encode_cases.jsonl");
  std::vector<int> mismatches(4, 0);
  std::vector<std::thread> threads;
  for (int t = 0; t < 4; ++t) {
    threads.emplace_back([&, t] {
      for (int round = 0; round < 3; ++round) {
        for (const json& c : cases) {
          auto ids = tok.Encode(c["text"].get<std::string>());
          mismatches[t] += !ids.ok() || *ids != c["ids"].get<std::vector<TokenId>>();
        }
      }
    });
  }
  for (std::thread& t : threads) t.join();
  EXPECT_EQ(mismatches, std::vector<int>(4, 0));
}

}  // namespace
}  // namespace flashserve::tokenizer
