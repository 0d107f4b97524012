// Every line of decode_cases.jsonl: per-id token strings, bytes, flags and decodes; id sequences
// with split UTF-8, invalid bytes and added tokens: Decode, skip_special, every prefix, and the
// StreamDecoder's per-step chunks and final flush.
#include <string>
#include <vector>

#include "gtest/gtest.h"
#include "model/tokenizer/stream_decoder.h"
#include "model/tokenizer/tokenizer.h"
#include "model/tokenizer/tokenizer_test_util.h"

namespace flashserve::tokenizer {
namespace {

using nlohmann::json;
using testing::FixtureDir;
using testing::Hex;
using testing::StandIn;

TEST(DecodeFixture, EveryIdEqualsReference) {
  const Tokenizer& tok = StandIn();
  size_t ids = 0, equal = 0;
  for (const json& c : testing::ReadJsonl(FixtureDir() + "/decode_cases.jsonl")) {
    if (c["kind"] != "id") continue;
    ++ids;
    const TokenId id = c["id"].get<TokenId>();
    const std::vector<TokenId> one{id};
    const bool ok = *tok.IdToToken(id) == c["token"].get<std::string>() &&
                    Hex(*tok.TokenBytes(id)) == c["bytes_hex"].get<std::string>() &&
                    tok.IsAdded(id) == c["added"].get<bool>() &&
                    tok.IsSpecial(id) == c["special"].get<bool>() &&
                    tok.TokenToId(c["token"].get<std::string>()) == id &&
                    *tok.Decode(one) == c["decode"].get<std::string>() &&
                    *tok.Decode(one, true) == c["decode_skip_special"].get<std::string>();
    EXPECT_TRUE(ok) << "id " << id << " token " << c["token"];
    equal += ok;
  }
  std::printf("decode_cases.jsonl ids: %zu/%zu equal\n", equal, ids);
  EXPECT_EQ(ids, 4280u);
  EXPECT_EQ(equal, ids);
  EXPECT_EQ(tok.VocabSize(), 4280u);
}

TEST(DecodeFixture, EverySequenceEqualsReference) {
  const Tokenizer& tok = StandIn();
  size_t sequences = 0, equal = 0, chunks_equal = 0;
  for (const json& c : testing::ReadJsonl(FixtureDir() + "/decode_cases.jsonl")) {
    if (c["kind"] != "sequence") continue;
    ++sequences;
    SCOPED_TRACE(c["name"].get<std::string>());
    const auto ids = c["ids"].get<std::vector<TokenId>>();
    const std::string want = c["decode"].get<std::string>();
    bool ok = true;
    for (size_t k = 0; k < ids.size(); ++k) {
      ok &= Hex(*tok.TokenBytes(ids[k])) == c["per_id_bytes_hex"][k].get<std::string>();
    }
    ok &= *tok.Decode(ids) == want;
    ok &= *tok.Decode(ids, true) == c["decode_skip_special"].get<std::string>();
    ok &= c["python_utf8_replace"].get<std::string>() == want;
    for (size_t k = 1; k <= ids.size(); ++k) {
      const std::vector<TokenId> prefix(ids.begin(), ids.begin() + static_cast<ptrdiff_t>(k));
      ok &= *tok.Decode(prefix) == c["prefix_decodes"][k - 1].get<std::string>();
    }
    // Streaming: the concatenation is normative; the per-step chunks follow CPython.
    StreamDecoder stream(&tok);
    std::string all;
    bool same_chunks = true;
    for (size_t k = 0; k < ids.size(); ++k) {
      std::string chunk;
      ASSERT_TRUE(stream.Next(ids[k], &chunk).ok());
      same_chunks &= chunk == c["stream_chunks"][k].get<std::string>();
      all += chunk;
    }
    std::string tail;
    stream.Flush(&tail);
    same_chunks &= tail == c["stream_final_flush"].get<std::string>();
    all += tail;
    ok &= all == want;
    EXPECT_TRUE(ok) << "sequence differs";
    EXPECT_TRUE(same_chunks) << "stream chunks differ from CPython's";
    equal += ok;
    chunks_equal += same_chunks;
  }
  std::printf("decode_cases.jsonl sequences: %zu/%zu equal, stream chunks %zu/%zu equal\n", equal,
              sequences, chunks_equal, sequences);
  EXPECT_EQ(sequences, 55u);
  EXPECT_EQ(equal, sequences);
  EXPECT_EQ(chunks_equal, sequences);
}

TEST(DecodeFixture, StreamWithSkipSpecialEqualsDecode) {
  const Tokenizer& tok = StandIn();
  for (const json& c : testing::ReadJsonl(FixtureDir() + "/decode_cases.jsonl")) {
    if (c["kind"] != "sequence") continue;
    StreamDecoder stream(&tok, /*skip_special=*/true);
    std::string all;
    for (TokenId id : c["ids"].get<std::vector<TokenId>>()) ASSERT_TRUE(stream.Next(id, &all).ok());
    stream.Flush(&all);
    EXPECT_EQ(all, c["decode_skip_special"].get<std::string>()) << c["name"];
  }
}

TEST(DecodeFixture, UnknownIdsAreErrors) {
  const Tokenizer& tok = StandIn();
  const std::vector<TokenId> bad{5, 4280};
  std::string out = "keep";
  EXPECT_EQ(tok.DecodeAppend(bad, false, &out).code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(out, "keep");
  EXPECT_FALSE(tok.IdToToken(-1).ok());
  StreamDecoder stream(&tok);
  EXPECT_FALSE(stream.Next(4280, &out).ok());
}

}  // namespace
}  // namespace flashserve::tokenizer
