// Every line of encode_cases.jsonl against the stand-in tokenizer: ids (all added tokens,
// split_special, no_added), token strings, the pre-tokenizer's splits, offsets and decoding.
#include <map>
#include <string>
#include <vector>

#include "gtest/gtest.h"
#include "model/tokenizer/tokenizer.h"
#include "model/tokenizer/tokenizer_test_util.h"

namespace flashserve::tokenizer {
namespace {

using nlohmann::json;
using testing::FixtureDir;
using testing::ReadJsonl;
using testing::StandIn;

std::vector<Span> Spans(const json& pairs) {
  std::vector<Span> spans;
  for (const json& p : pairs) spans.push_back({p[0].get<uint32_t>(), p[1].get<uint32_t>()});
  return spans;
}

// Counts cases equal per field and reports the first mismatches in detail.
class Tally {
 public:
  void Check(const std::string& field, bool equal, const json& c, const std::string& detail) {
    auto& [ok, total] = counts_[field];
    ++total;
    if (equal) {
      ++ok;
    } else if (++reported_ <= 20) {
      ADD_FAILURE() << field << " differs for case " << c["id"] << " (" << c["category"]
                    << ") text=" << c["text"].dump() << "\n  " << detail;
    }
  }
  void Report(size_t expected_cases) const {
    for (const auto& [field, count] : counts_) {
      std::printf("  %-20s %zu/%zu cases equal\n", field.c_str(), count.first, count.second);
      EXPECT_EQ(count.first, expected_cases) << field;
      EXPECT_EQ(count.second, expected_cases) << field;
    }
  }

 private:
  std::map<std::string, std::pair<size_t, size_t>> counts_;
  int reported_ = 0;
};

std::string Dump(const std::vector<TokenId>& ids) { return json(ids).dump(); }

TEST(EncodeFixture, EveryCaseEqualsReference) {
  const Tokenizer& tok = StandIn();
  const std::vector<json> cases = ReadJsonl(FixtureDir() + "/encode_cases.jsonl");
  ASSERT_EQ(cases.size(), 376u);
  Tally tally;
  for (const json& c : cases) {
    const std::string text = c["text"].get<std::string>();
    ASSERT_EQ(testing::Hex(text), c["utf8_hex"].get<std::string>());

    auto enc = tok.EncodeWithOffsets(text);
    ASSERT_TRUE(enc.ok()) << enc.status();
    const auto want_ids = c["ids"].get<std::vector<TokenId>>();
    tally.Check("ids", enc->ids == want_ids, c, Dump(enc->ids) + " vs " + Dump(want_ids));

    std::vector<std::string> tokens;
    for (TokenId id : enc->ids) tokens.emplace_back(*tok.IdToToken(id));
    tally.Check("tokens", tokens == c["tokens"].get<std::vector<std::string>>(), c,
                json(tokens).dump());
    tally.Check("offsets_char", enc->char_offsets == Spans(c["offsets_char"]), c, "");
    tally.Check("offsets_byte", enc->byte_offsets == Spans(c["offsets_byte"]), c, "");

    auto split = tok.Encode(text, {.split_special = true});
    ASSERT_TRUE(split.ok()) << split.status();
    const auto want_split = c["ids_split_special"].get<std::vector<TokenId>>();
    tally.Check("ids_split_special", *split == want_split, c,
                Dump(*split) + " vs " + Dump(want_split));
    auto plain = tok.Encode(text, {.no_added = true});
    ASSERT_TRUE(plain.ok()) << plain.status();
    const auto want_plain = c["ids_no_added"].get<std::vector<TokenId>>();
    tally.Check("ids_no_added", *plain == want_plain, c, Dump(*plain) + " vs " + Dump(want_plain));

    // splits: [piece text, [start, end) in code points] on the whole text.
    auto pieces = tok.PreTokenize(text);
    ASSERT_TRUE(pieces.ok()) << pieces.status();
    json got_splits = json::array();
    for (const Span& s : *pieces) {
      auto cps = [&](uint32_t byte) {
        uint32_t n = 0;
        for (uint32_t i = 0; i < byte; ++i) n += (static_cast<uint8_t>(text[i]) & 0xC0) != 0x80;
        return n;
      };
      got_splits.push_back({text.substr(s.begin, s.end - s.begin), {cps(s.begin), cps(s.end)}});
    }
    tally.Check("splits", got_splits == c["splits"], c, got_splits.dump());

    auto decoded = tok.Decode(enc->ids);
    ASSERT_TRUE(decoded.ok());
    tally.Check("decode", *decoded == c["decode"].get<std::string>(), c, *decoded);
    auto skipped = tok.Decode(enc->ids, /*skip_special=*/true);
    ASSERT_TRUE(skipped.ok());
    tally.Check("decode_skip_special", *skipped == c["decode_skip_special"].get<std::string>(), c,
                *skipped);
  }
  std::printf("encode_cases.jsonl: %zu cases\n", cases.size());
  tally.Report(cases.size());
}

// Merges written as "a b" strings (the older serialisation) give the same tokenizer.
TEST(EncodeFixture, StringMergesEqualPairMerges) {
  json j = json::parse(testing::ReadFileOrDie(FixtureDir() + "/tokenizer.json"));
  for (json& m : j["model"]["merges"]) m = m[0].get<std::string>() + " " + m[1].get<std::string>();
  auto tok = Tokenizer::FromJson(j.dump());
  ASSERT_TRUE(tok.ok()) << tok.status();
  size_t equal = 0;
  const std::vector<json> cases = ReadJsonl(FixtureDir() + "/encode_cases.jsonl");
  for (const json& c : cases) {
    auto ids = (*tok)->Encode(c["text"].get<std::string>());
    ASSERT_TRUE(ids.ok());
    equal += *ids == c["ids"].get<std::vector<TokenId>>();
  }
  EXPECT_EQ(equal, cases.size());
}

// The chat prompts (official encoder, vLLM, vLLM serving) and the parser's model outputs carry
// their stand-in ids too: every one must match, and decode back to its text.
TEST(EncodeFixture, ChatPromptsAndModelOutputs) {
  const Tokenizer& tok = StandIn();
  size_t total = 0, equal = 0;
  auto check = [&](const json& text, const json& ids, const std::string& name) {
    if (text.is_null()) return;
    ++total;
    auto got = tok.Encode(text.get<std::string>());
    ASSERT_TRUE(got.ok()) << got.status();
    const auto want = ids.get<std::vector<TokenId>>();
    const bool ok = *got == want && *tok.Decode(want) == text.get<std::string>();
    EXPECT_TRUE(ok) << name;
    equal += ok;
  };
  for (const json& c : ReadJsonl(FixtureDir() + "/chat_cases.jsonl")) {
    for (const char* variant : {"official", "vllm", "vllm_serving"}) {
      if (!c.contains(variant) || c[variant].is_null()) continue;
      check(c[variant]["prompt"], c[variant]["ids"], c["name"].get<std::string>() + "/" + variant);
    }
  }
  for (const json& c : ReadJsonl(FixtureDir() + "/parse_cases.jsonl")) {
    check(c["text"], c["ids"], c["name"].get<std::string>());
  }
  std::printf("chat_cases.jsonl + parse_cases.jsonl: %zu/%zu encodings equal\n", equal, total);
  EXPECT_EQ(equal, total);
  EXPECT_GT(total, 90u);
}

}  // namespace
}  // namespace flashserve::tokenizer
