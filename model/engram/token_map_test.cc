#include "model/engram/token_map.h"

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/status.h"
#include "common/base/status_macros.h"
#include "gtest/gtest.h"
#include "model/engram/engram_fixture.h"
#include "model/tokenizer/tokenizer.h"

namespace flashserve::model::engram {
namespace {

std::string Normalize(const std::string& text) {
  auto out = NormalizeTokenText(text);
  EXPECT_TRUE(out.ok()) << out.status();
  return out.ok() ? *out : "<error>";
}

TEST(NormalizeTokenTextTest, CaseAccentsAndCompatibility) {
  EXPECT_EQ(Normalize(" The"), "the");
  EXPECT_EQ(Normalize("THE"), "the");
  EXPECT_EQ(Normalize("Café"), "cafe");        // NFD + StripAccents
  EXPECT_EQ(Normalize("Cafe\u0301"), "cafe");  // already decomposed
  EXPECT_EQ(Normalize("\uFB01le"), "file");    // NFKC ligature
  EXPECT_EQ(Normalize("\uFF21\uFF22"), "ab");  // fullwidth Latin
  EXPECT_EQ(Normalize("<\uFF5CUser\uFF5C>"), "<|user|>");
  EXPECT_EQ(Normalize("\u00C5ngstr\u00F6m"), "angstrom");
}

TEST(NormalizeTokenTextTest, LowercaseIsPerCodePointWithoutContext) {
  // 'İ' decomposes under NFD to "I" + U+0307, StripAccents drops the dot: plain "i".
  EXPECT_EQ(Normalize("\u0130"), "i");
  EXPECT_EQ(Normalize("\u0130stanbul"), "istanbul");
  // No final-sigma rule (Rust char::to_lowercase): word-final Σ is σ, not ς.
  EXPECT_EQ(Normalize("\u039F\u03A3"), "\u03BF\u03C3");
  EXPECT_EQ(Normalize("\u03C2"), "\u03C2");
  EXPECT_EQ(Normalize("\u1E9E"), "\u00DF");  // capital sharp s
}

TEST(NormalizeTokenTextTest, MarksOfEveryKindAreStripped) {
  EXPECT_EQ(Normalize("\u0915\u093E"), "\u0915");  // Devanagari vowel sign AA (Mc)
  EXPECT_EQ(Normalize("a\u20DD"), "a");            // enclosing circle (Me)
  EXPECT_EQ(NormalizeTokenText("\u0301").value(), "");
}

TEST(NormalizeTokenTextTest, Whitespace) {
  EXPECT_EQ(Normalize(" "), " ");  // a lone space survives the strip
  EXPECT_EQ(Normalize("   "), " ");
  EXPECT_EQ(Normalize("\n\n"), " ");
  EXPECT_EQ(Normalize("\t \r\n"), " ");
  EXPECT_EQ(Normalize(" a \t b "), "a b");
  EXPECT_EQ(Normalize("\u3000"), " ");                  // NFKC turns the ideographic space into " "
  EXPECT_EQ(NormalizeTokenText("\u0085").value(), "");  // White_Space, not collapsed: stripped
  EXPECT_EQ(NormalizeTokenText(" \u00A0").value(), " ");  // NBSP -> " " by NFKC, then collapsed
  EXPECT_EQ(NormalizeTokenText("").value(), "");
}

TEST(NormalizeTokenTextTest, InvalidUtf8IsAnError) {
  EXPECT_EQ(NormalizeTokenText("\xC3").status().code(), absl::StatusCode::kInvalidArgument);
}

TEST(BuildCompressedTokenMapTest, KeysAndFirstSeenNumbering) {
  const std::vector<std::string> texts = {
      "The", " the", "\xEF\xBF\xBD", "\xEF\xBF\xBD", "x", "\u0301", "\u0301", " ", "  ", "THE"};
  const std::vector<std::string> raws = {"The", "Ġthe", "Ã", "Ä", "x", "m", "n", "Ġ", "ĠĠ", "THE"};
  auto map = BuildCompressedTokenMap(
      static_cast<int32_t>(texts.size()),
      [&](int32_t id) -> absl::StatusOr<std::string> { return texts[id]; },
      [&](int32_t id) -> absl::StatusOr<std::string> { return raws[id]; });
  ASSERT_TRUE(map.ok()) << map.status();
  // the | Ã | Ä | x | U+0301 (empty key: the raw text) | " "
  EXPECT_EQ(map->class_of, (std::vector<int32_t>{0, 0, 1, 2, 3, 4, 4, 5, 5, 0}));
  EXPECT_EQ(map->num_classes, 6);
}

TEST(BuildCompressedTokenMapTest, CallbackErrorsPropagate) {
  auto map = BuildCompressedTokenMap(
      3,
      [](int32_t id) -> absl::StatusOr<std::string> {
        if (id == 2) return absl::NotFoundError("no such id");
        return std::string("a");
      },
      [](int32_t) -> absl::StatusOr<std::string> { return std::string("a"); });
  ASSERT_FALSE(map.ok());
  EXPECT_EQ(map.status().code(), absl::StatusCode::kNotFound);
  EXPECT_NE(map.status().message().find("token id 2"), absl::string_view::npos);
}

TEST(BuildCompressedTokenMapTest, TinyTokenizerMatchesGolden) {
  auto tok = tokenizer::Tokenizer::Load(testing::FixtureDir() + "/tokenizer.json");
  ASSERT_TRUE(tok.ok()) << tok.status();
  ASSERT_EQ((*tok)->VocabSize(), 2048u);
  auto map = BuildCompressedTokenMap(
      static_cast<int32_t>((*tok)->VocabSize()),
      [&](int32_t id) { return (*tok)->Decode({id}, /*skip_special=*/false); },
      [&](int32_t id) -> absl::StatusOr<std::string> {
        ASSIGN_OR_RETURN(std::string_view raw, (*tok)->IdToToken(id));
        return std::string(raw);
      });
  ASSERT_TRUE(map.ok()) << map.status();
  const CompressedTokenMap golden = testing::GoldenTokenMap();
  EXPECT_EQ(map->num_classes, 1443);
  ASSERT_EQ(map->class_of.size(), golden.class_of.size());
  int mismatches = 0;
  for (size_t id = 0; id < golden.class_of.size(); ++id) {
    if (map->class_of[id] != golden.class_of[id] && ++mismatches <= 5) {
      ADD_FAILURE() << "id " << id << ": got " << map->class_of[id] << " want "
                    << golden.class_of[id];
    }
  }
  EXPECT_EQ(mismatches, 0);
  // The fixture's tokenizer has byte tokens that are not valid UTF-8 alone: the U+FFFD branch
  // (keyed by the raw token) is exercised, and so is the normalised one.
  int replacement = 0;
  for (int32_t id = 0; id < 2048; ++id) {
    if ((*tok)->Decode({id}).value().find("\xEF\xBF\xBD") != std::string::npos) ++replacement;
  }
  EXPECT_GT(replacement, 0);
}

}  // namespace
}  // namespace flashserve::model::engram
