#include "model/engram/ngram_hasher.h"

#include <algorithm>
#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "common/base/check.h"
#include "gtest/gtest.h"
#include "model/engram/engram_fixture.h"

namespace flashserve::model::engram {
namespace {

NgramHasher TinyHasher() {
  auto hasher = NgramHasher::FromConfig(testing::TinyConfig(), testing::GoldenTokenMap());
  CHECK_OK(hasher.status());
  return *std::move(hasher);
}

// Hashes `seq` in chunks of the given sizes (the last one takes the rest).
std::vector<int64_t> HashInChunks(const NgramHasher& hasher, const testing::GoldenSequence& seq,
                                  const std::vector<size_t>& sizes) {
  const size_t width = hasher.ids_per_position();
  std::vector<int64_t> out(seq.ids.size() * width, -7);
  NgramLookback lookback;
  size_t begin = 0;
  for (size_t c = 0; begin < seq.ids.size(); ++c) {
    const size_t len =
        c < sizes.size() ? std::min(sizes[c], seq.ids.size() - begin) : seq.ids.size() - begin;
    EXPECT_TRUE(hasher
                    .HashChunk(std::span(seq.ids).subspan(begin, len),
                               std::span(seq.dead).subspan(begin, len), lookback,
                               std::span(out).subspan(begin * width, len * width))
                    .ok());
    begin += len;
  }
  EXPECT_EQ(lookback.position, static_cast<int64_t>(seq.ids.size()));
  return out;
}

// The engine's path: one prefill call over the prompt, then one HashNext per decode step.
std::vector<int64_t> HashPrefillThenDecode(const NgramHasher& hasher,
                                           const testing::GoldenSequence& seq) {
  const size_t width = hasher.ids_per_position();
  const size_t n = seq.n_prompt;
  std::vector<int64_t> out(seq.ids.size() * width, -7);
  NgramLookback lookback;
  EXPECT_TRUE(hasher
                  .HashChunk(std::span(seq.ids).first(n), std::span(seq.dead).first(n), lookback,
                             std::span(out).first(n * width))
                  .ok());
  for (size_t p = n; p < seq.ids.size(); ++p) {
    EXPECT_TRUE(hasher
                    .HashNext(seq.ids[p], seq.dead[p] != 0, lookback,
                              std::span(out).subspan(p * width, width))
                    .ok());
  }
  return out;
}

void ExpectSameIds(const std::vector<int64_t>& got, const std::vector<int64_t>& want,
                   const std::string& what) {
  ASSERT_EQ(got.size(), want.size()) << what;
  int mismatches = 0;
  for (size_t i = 0; i < got.size(); ++i) {
    if (got[i] != want[i] && ++mismatches <= 5) {
      ADD_FAILURE() << what << ": position " << i / 24 << " layer " << (i / 12) % 2 << " column "
                    << i % 12 << ": got " << got[i] << " want " << want[i];
    }
  }
  EXPECT_EQ(mismatches, 0) << what;
}

class GoldenHashTest : public ::testing::TestWithParam<std::string> {};

TEST_P(GoldenHashTest, PrefillThenDecodeMatchesGolden) {
  const NgramHasher hasher = TinyHasher();
  ASSERT_EQ(hasher.ids_per_position(), 24);
  const testing::GoldenSequence seq = testing::LoadGoldenSequence(GetParam());
  ExpectSameIds(HashPrefillThenDecode(hasher, seq), seq.hash_ids, GetParam());
}

TEST_P(GoldenHashTest, FixtureTablesGiveTheSameIds) {
  // The hasher fed golden.json's own primes/offsets/multipliers agrees too.
  auto hasher = NgramHasher::Create(testing::GoldenLayout(), testing::GoldenMultipliers(),
                                    testing::GoldenTokenMap(), testing::TinyConfig().engram_pad_id);
  ASSERT_TRUE(hasher.ok()) << hasher.status();
  const testing::GoldenSequence seq = testing::LoadGoldenSequence(GetParam());
  ExpectSameIds(HashInChunks(*hasher, seq, {}), seq.hash_ids, GetParam());
}

TEST_P(GoldenHashTest, EveryChunkSplitMatchesOneShot) {
  const NgramHasher hasher = TinyHasher();
  const testing::GoldenSequence seq = testing::LoadGoldenSequence(GetParam());
  const std::vector<int64_t> one_shot = HashInChunks(hasher, seq, {});
  ExpectSameIds(one_shot, seq.hash_ids, "one shot");
  ExpectSameIds(HashInChunks(hasher, seq, std::vector<size_t>(seq.ids.size(), 1)), one_shot,
                "chunks of 1");
  for (size_t size : {2, 3, 5, 7, 16}) {
    ExpectSameIds(HashInChunks(hasher, seq, std::vector<size_t>(seq.ids.size(), size)), one_shot,
                  "chunks of " + std::to_string(size));
  }
  // Uneven splits, including empty chunks and cuts inside and right after the image span of c.
  ExpectSameIds(HashInChunks(hasher, seq, {0, 1, 12, 0, 4, 6, 2, 1, 3}), one_shot, "uneven");
  ExpectSameIds(HashInChunks(hasher, seq, {13, 9, 1}), one_shot, "around the span");
}

TEST_P(GoldenHashTest, DecodeStepsEqualBatch) {
  // HashNext over every position (no prefill) equals the batch form.
  const NgramHasher hasher = TinyHasher();
  const testing::GoldenSequence seq = testing::LoadGoldenSequence(GetParam());
  const size_t width = hasher.ids_per_position();
  std::vector<int64_t> out(seq.ids.size() * width);
  NgramLookback lookback;
  for (size_t p = 0; p < seq.ids.size(); ++p) {
    ASSERT_TRUE(hasher
                    .HashNext(seq.ids[p], seq.dead[p] != 0, lookback,
                              std::span(out).subspan(p * width, width))
                    .ok());
  }
  ExpectSameIds(out, HashInChunks(hasher, seq, {}), "decode steps");
  ExpectSameIds(out, seq.hash_ids, "decode steps vs golden");
}

INSTANTIATE_TEST_SUITE_P(Prompts, GoldenHashTest, ::testing::Values("a", "b", "c"));

TEST(NgramHasherTest, ImageSpanPositionsHashOnlyPad) {
  // Prompt c: positions 12..21 are dead, so every slot there is pad; the first text position
  // after the span sees only itself.
  const NgramHasher hasher = TinyHasher();
  const testing::GoldenSequence seq = testing::LoadGoldenSequence("c");
  for (int p = 0; p < 43; ++p) EXPECT_EQ(seq.dead[p] != 0, p >= 12 && p <= 21) << p;
  const std::vector<int64_t> ids = HashInChunks(hasher, seq, {});
  std::vector<int32_t> pads(4, testing::TinyConfig().engram_pad_id);
  std::vector<int64_t> all_pad(24);
  NgramLookback fresh;
  fresh.position = 100;  // far from the start: only the pad class matters
  fresh.recent.fill(hasher.pad_class());
  ASSERT_TRUE(hasher.HashNext(pads[0], false, fresh, all_pad).ok());
  for (int p = 12; p <= 21; ++p) {
    EXPECT_TRUE(std::equal(all_pad.begin(), all_pad.end(), ids.begin() + p * 24)) << p;
  }
}

TEST(NgramHasherTest, ErrorsLeaveTheLookbackUnchanged) {
  const NgramHasher hasher = TinyHasher();
  NgramLookback lookback;
  std::vector<int64_t> out(3 * 24);
  const std::vector<int32_t> ok_ids = {0, 5, 7};
  ASSERT_TRUE(hasher.HashChunk(ok_ids, {}, lookback, out).ok());
  const NgramLookback saved = lookback;
  const std::vector<int64_t> saved_out = out;

  const std::vector<int32_t> bad_ids = {1, 2048, 3};
  EXPECT_EQ(hasher.HashChunk(bad_ids, {}, lookback, out).code(),
            absl::StatusCode::kInvalidArgument);
  const std::vector<int32_t> negative = {-1, 2, 3};
  EXPECT_FALSE(hasher.HashChunk(negative, {}, lookback, out).ok());
  const std::vector<uint8_t> short_dead = {0, 0};
  EXPECT_FALSE(hasher.HashChunk(ok_ids, short_dead, lookback, out).ok());
  EXPECT_FALSE(hasher.HashChunk(ok_ids, {}, lookback, std::span(out).first(24)).ok());
  EXPECT_FALSE(hasher.HashNext(2048, false, lookback, std::span(out).first(24)).ok());
  EXPECT_FALSE(hasher.HashNext(4, false, lookback, std::span(out).first(23)).ok());
  EXPECT_EQ(lookback, saved);
  EXPECT_EQ(out, saved_out);
}

TEST(NgramHasherTest, FromConfigChecksTheClassCount) {
  ModelConfig config = testing::TinyConfig();
  config.engram_compressed_vocab_size = 1442;
  auto hasher = NgramHasher::FromConfig(config, testing::GoldenTokenMap());
  ASSERT_FALSE(hasher.ok());
  EXPECT_NE(hasher.status().message().find("1443"), absl::string_view::npos);
}

TEST(NgramHasherTest, CreateRejectsMalformedTables) {
  const int32_t pad = 2;
  std::vector<int64_t> mult = testing::GoldenMultipliers();
  mult.pop_back();
  EXPECT_FALSE(
      NgramHasher::Create(testing::GoldenLayout(), mult, testing::GoldenTokenMap(), pad).ok());
  CompressedTokenMap bad_map = testing::GoldenTokenMap();
  bad_map.class_of[5] = bad_map.num_classes;
  EXPECT_FALSE(
      NgramHasher::Create(testing::GoldenLayout(), testing::GoldenMultipliers(), bad_map, pad)
          .ok());
  EXPECT_FALSE(NgramHasher::Create(testing::GoldenLayout(), testing::GoldenMultipliers(),
                                   testing::GoldenTokenMap(), 2048)
                   .ok());
}

}  // namespace
}  // namespace flashserve::model::engram
