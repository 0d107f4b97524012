// The index-list builders against hand-written lists (spec §4.3 steps 2–3).
#include "kernels/attention/window_indices.h"

#include <cstdint>
#include <vector>

#include "absl/status/status.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace flashserve::kernels {
namespace {

using ::testing::ElementsAreArray;

constexpr int32_t X = -1;

std::vector<int32_t> Prefill(int64_t s, int64_t window) {
  auto l = BuildPrefillWindowIndices(s, window);
  EXPECT_TRUE(l.ok()) << l.status();
  if (!l.ok()) return {};
  EXPECT_EQ(l->rows, s);
  EXPECT_EQ(l->width, std::min(s, window));
  return l->ids;
}

std::vector<int32_t> Decode(int64_t start_pos, int64_t window) {
  auto l = BuildDecodeWindowIndices(start_pos, window);
  EXPECT_TRUE(l.ok()) << l.status();
  if (!l.ok()) return {};
  EXPECT_EQ(l->rows, 1);
  EXPECT_EQ(l->width, window);
  return l->ids;
}

std::vector<int32_t> Chunk(int64_t start_pos, int64_t s, int64_t window, int64_t width) {
  auto l = BuildChunkWindowIndices(start_pos, s, window, width);
  EXPECT_TRUE(l.ok()) << l.status();
  return l.ok() ? l->ids : std::vector<int32_t>{};
}

TEST(PrefillWindowIndices, SingleToken) {
  EXPECT_THAT(Prefill(1, 16), ElementsAreArray({0}));
  EXPECT_THAT(Prefill(1, 1), ElementsAreArray({0}));
}

TEST(PrefillWindowIndices, ShorterThanWindowTrailsMinusOnes) {
  EXPECT_THAT(Prefill(4, 8), ElementsAreArray({0, X, X, X,  //
                                               0, 1, X, X,  //
                                               0, 1, 2, X,  //
                                               0, 1, 2, 3}));
}

TEST(PrefillWindowIndices, EqualToWindow) {
  EXPECT_THAT(Prefill(3, 3), ElementsAreArray({0, X, X, 0, 1, X, 0, 1, 2}));
}

TEST(PrefillWindowIndices, LongerThanWindowSlides) {
  EXPECT_THAT(Prefill(6, 3), ElementsAreArray({0, X, X,  //
                                               0, 1, X,  //
                                               0, 1, 2,  //
                                               1, 2, 3,  //
                                               2, 3, 4,  //
                                               3, 4, 5}));
  // The released window: row 200 of a 201-token prompt covers 73 … 200.
  const std::vector<int32_t> ids = Prefill(201, 128);
  for (int64_t i = 0; i < 128; ++i) EXPECT_EQ(ids[200 * 128 + i], 73 + i);
  EXPECT_EQ(ids[5 * 128 + 5], 5);
  EXPECT_EQ(ids[5 * 128 + 6], X);
}

TEST(PrefillWindowIndices, EmptyPrompt) { EXPECT_TRUE(Prefill(0, 16).empty()); }

TEST(DecodeWindowIndices, WhileFillingLeadsMinusOnes) {
  EXPECT_THAT(Decode(0, 8), ElementsAreArray({X, X, X, X, X, X, X, 0}));
  EXPECT_THAT(Decode(3, 8), ElementsAreArray({X, X, X, X, 0, 1, 2, 3}));
  EXPECT_THAT(Decode(6, 8), ElementsAreArray({X, 0, 1, 2, 3, 4, 5, 6}));
}

TEST(DecodeWindowIndices, FullAndAfterWrapOldestFirst) {
  EXPECT_THAT(Decode(7, 8), ElementsAreArray({0, 1, 2, 3, 4, 5, 6, 7}));
  EXPECT_THAT(Decode(8, 8), ElementsAreArray({1, 2, 3, 4, 5, 6, 7, 0}));
  EXPECT_THAT(Decode(10, 8), ElementsAreArray({3, 4, 5, 6, 7, 0, 1, 2}));
  EXPECT_THAT(Decode(15, 8), ElementsAreArray({0, 1, 2, 3, 4, 5, 6, 7}));
  // The tiny fixture: prompt a (201 tokens), first decode step at position 201, window 16.
  EXPECT_THAT(Decode(201, 16),
              ElementsAreArray({10, 11, 12, 13, 14, 15, 0, 1, 2, 3, 4, 5, 6, 7, 8, 9}));
  EXPECT_THAT(Decode(0, 1), ElementsAreArray({0}));
  EXPECT_THAT(Decode(5, 1), ElementsAreArray({0}));
}

TEST(ChunkWindowIndices, FromPositionZeroIsThePrefillListShiftedByTheRing) {
  for (int64_t s : {1, 5, 16, 40}) {
    const std::vector<int32_t> prefill = Prefill(s, 16);
    std::vector<int32_t> shifted = prefill;
    for (auto& v : shifted) v = v < 0 ? -1 : v + 16;  // chunk rows follow the 16 ring rows
    EXPECT_THAT(Chunk(0, s, 16, std::min<int64_t>(s, 16)), ElementsAreArray(shifted)) << s;
  }
}

TEST(ChunkWindowIndices, OnAnExistingRing) {
  // W = 4, positions 5..7 after positions 0..4: the ring holds 1..4 in slots 1, 2, 3, 0; chunk
  // rows 4, 5, 6 hold positions 5, 6, 7.
  EXPECT_THAT(Chunk(5, 3, 4, 4), ElementsAreArray({2, 3, 0, 4,  //
                                                   3, 0, 4, 5,  //
                                                   0, 4, 5, 6}));
  // The ring is still filling (positions 0, 1): trailing -1s up to the width.
  EXPECT_THAT(Chunk(2, 1, 4, 3), ElementsAreArray({0, 1, 4}));
  EXPECT_THAT(Chunk(2, 1, 4, 4), ElementsAreArray({0, 1, 4, X}));
  EXPECT_THAT(Chunk(2, 2, 4, 4), ElementsAreArray({0, 1, 4, X, 0, 1, 4, 5}));
}

TEST(ChunkWindowIndices, RejectsWidthsThatCannotHoldTheWindowOrExceedIt) {
  EXPECT_EQ(BuildChunkWindowIndices(2, 2, 4, 3).status().code(),
            absl::StatusCode::kInvalidArgument);  // needs min(4, 4) = 4
  EXPECT_EQ(BuildChunkWindowIndices(0, 2, 4, 5).status().code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(BuildChunkWindowIndices(-1, 2, 4, 4).status().code(),
            absl::StatusCode::kInvalidArgument);
}

TEST(ConcatIndices, OffsetsCompressedEntriesAndKeepsMinusOnes) {
  const IndexList window{2, 2, {0, X, 0, 1}};
  const IndexList compressed{2, 2, {3, X, 0, 1}};
  auto l = ConcatIndices(window, compressed, 2);
  ASSERT_TRUE(l.ok()) << l.status();
  EXPECT_EQ(l->width, 4);
  EXPECT_THAT(l->ids, ElementsAreArray({0, X, 5, X, 0, 1, 2, 3}));
  // An empty top-k (no compressed row visible yet) leaves the window list.
  auto w = ConcatIndices(window, IndexList{2, 0, {}}, 2);
  ASSERT_TRUE(w.ok());
  EXPECT_THAT(w->ids, ElementsAreArray(window.ids));
}

TEST(ConcatIndices, Rejects) {
  const IndexList window{2, 1, {0, 1}};
  EXPECT_EQ(ConcatIndices(window, IndexList{1, 1, {0}}, 2).status().code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(ConcatIndices(window, IndexList{2, 1, {0, -2}}, 2).status().code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(ConcatIndices(window, IndexList{2, 1, {0, 2147483640}}, 10).status().code(),
            absl::StatusCode::kInvalidArgument);
  std::vector<int32_t> out(3);
  EXPECT_EQ(FillConcatIndices(2, window.ids, 1, window.ids, 1, 0, absl::MakeSpan(out)).code(),
            absl::StatusCode::kInvalidArgument);
}

TEST(WindowIndices, RejectBadArguments) {
  EXPECT_EQ(BuildPrefillWindowIndices(4, 0).status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(BuildPrefillWindowIndices(-1, 4).status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(BuildDecodeWindowIndices(-1, 4).status().code(), absl::StatusCode::kInvalidArgument);
  std::vector<int32_t> out(5);
  EXPECT_EQ(FillDecodeWindowIndices(0, 4, absl::MakeSpan(out)).code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(FillPrefillWindowIndices(2, 4, absl::MakeSpan(out)).code(),
            absl::StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace flashserve::kernels
