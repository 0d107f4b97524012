// Streaming: chunked calls == one call, bit for bit; the odd trailing token; state (de)serialised.
#include <random>
#include <vector>

#include "common/formats/bf16.h"
#include "gtest/gtest.h"
#include "kernels/compressor/compressor.h"
#include "kernels/compressor/compressor_test_util.h"

namespace flashserve::kernels {
namespace {

using compressor_test::Layer;
using compressor_test::RandomBf16;
using compressor_test::RandomLayer;
using compressor_test::RecipeCompress;
using compressor_test::Rows;
using compressor_test::RunChunks;

// Split patterns of n tokens: all 1s, odd sizes, even sizes, mixed (many chunks start on odd
// positions), and seeded random sizes.
std::vector<std::vector<int64_t>> Splits(int64_t n) {
  std::vector<std::vector<int64_t>> out;
  auto fill = [&](std::vector<int64_t> pattern) {
    std::vector<int64_t> v;
    int64_t done = 0;
    for (size_t i = 0; done < n; ++i) {
      const int64_t s = std::min(pattern[i % pattern.size()], n - done);
      v.push_back(s);
      done += s;
    }
    out.push_back(v);
  };
  fill({1});
  fill({3});
  fill({5, 7});
  fill({2});
  fill({4, 6});
  fill({1, 2});
  fill({2, 1, 1});
  fill({n - 1, 1});
  fill({1, n - 1});
  std::mt19937 rng(42);
  for (int k = 0; k < 4; ++k) {
    std::vector<int64_t> pattern;
    for (int i = 0; i < 16; ++i) pattern.push_back(1 + static_cast<int64_t>(rng() % 9));
    fill(pattern);
  }
  return out;
}

TEST(CompressorStream, ChunkedEqualsOneShotBitExact) {
  for (int64_t ratio : {1, 2, 4}) {
    const int64_t n = 61, c = 64, d = 96;
    std::unique_ptr<Layer> l = RandomLayer(ratio, c, d, 17);
    std::mt19937 rng(3);
    const std::vector<uint16_t> x = RandomBf16(n * d, -2.0f, 2.0f, rng);
    const Rows one = RunChunks(*l, x.data(), d, n, {n});
    ASSERT_EQ(static_cast<int64_t>(one.index.size()), n / ratio);
    EXPECT_EQ(one.latent, RecipeCompress(*l, x.data(), d, n));
    for (const auto& split : Splits(n)) {
      SCOPED_TRACE(::testing::Message() << "ratio " << ratio << " chunks " << split.size()
                                        << " first " << split[0]);
      const Rows chunked = RunChunks(*l, x.data(), d, n, split);
      EXPECT_EQ(chunked.index, one.index);
      EXPECT_EQ(chunked.latent, one.latent);
    }
  }
}

TEST(CompressorStream, OddTrailingTokenIsKeptAndCompletesOnTheNextCall) {
  const int64_t c = 32, d = 48;
  std::unique_ptr<Layer> l = RandomLayer(2, c, d, 23);
  std::mt19937 rng(4);
  const std::vector<uint16_t> x = RandomBf16(4 * d, -2.0f, 2.0f, rng);
  CompressorState st = MakeCompressorState(2, c).value();
  const Rows first = RunChunks(*l, x.data(), d, 3, {3}, 0, &st);
  EXPECT_EQ(first.index, std::vector<int64_t>({0}));
  ASSERT_EQ(st.pending, 1);
  EXPECT_EQ(st.next_pos, 3);
  // The held row is token 2's fp32 kv and gate logits.
  for (int64_t ch = 0; ch < c; ++ch) {
    EXPECT_EQ(st.kv[ch], compressor_test::RecipeDot(x.data() + 2 * d, l->wkv.data() + ch * d, d));
    EXPECT_EQ(st.score[ch],
              compressor_test::RecipeDot(x.data() + 2 * d, l->wgate.data() + ch * d, d));
  }
  const Rows second = RunChunks(*l, x.data() + 3 * d, d, 1, {1}, 3, &st);
  EXPECT_EQ(second.index, std::vector<int64_t>({1}));
  EXPECT_EQ(st.pending, 0);
  const Rows one = RunChunks(*l, x.data(), d, 4, {4});
  std::vector<uint16_t> both = first.latent;
  both.insert(both.end(), second.latent.begin(), second.latent.end());
  EXPECT_EQ(both, one.latent);
  // Decode-style single steps: nothing at even positions, one row at odd positions.
  CompressorState s2 = MakeCompressorState(2, c).value();
  EXPECT_TRUE(RunChunks(*l, x.data(), d, 1, {1}, 0, &s2).index.empty());
  EXPECT_EQ(RunChunks(*l, x.data() + d, d, 1, {1}, 1, &s2).index, std::vector<int64_t>({0}));
}

TEST(CompressorStream, SerialisedStateResumesExactly) {
  const int64_t c = 64, d = 96, n = 9;
  std::unique_ptr<Layer> l = RandomLayer(2, c, d, 29);
  std::mt19937 rng(6);
  const std::vector<uint16_t> x = RandomBf16(n * d, -2.0f, 2.0f, rng);
  CompressorState st = MakeCompressorState(2, c).value();
  const Rows head = RunChunks(*l, x.data(), d, 5, {5}, 0, &st);
  ASSERT_EQ(CompressorStateBytes(2, c), 16 + 8 * c);
  EXPECT_EQ(CompressorStateBytes(2, 512), 4112);
  std::vector<uint8_t> bytes(CompressorStateBytes(2, c));
  ASSERT_TRUE(SerializeCompressorState(st, bytes).ok());
  CompressorState restored = MakeCompressorState(2, c).value();
  ASSERT_TRUE(DeserializeCompressorState(bytes, restored).ok());
  EXPECT_EQ(restored.pending, 1);
  EXPECT_EQ(restored.next_pos, 5);
  const Rows tail = RunChunks(*l, x.data() + 5 * d, d, 4, {1, 3}, 5, &restored);
  std::vector<uint16_t> all = head.latent;
  all.insert(all.end(), tail.latent.begin(), tail.latent.end());
  EXPECT_EQ(all, RunChunks(*l, x.data(), d, 8, {8}).latent);
  // Corrupt pending count or wrong size: rejected, state untouched.
  bytes[8] = 2;
  EXPECT_FALSE(DeserializeCompressorState(bytes, restored).ok());
  EXPECT_EQ(restored.next_pos, 9);
  EXPECT_FALSE(DeserializeCompressorState({bytes.data(), bytes.size() - 1}, restored).ok());
}

}  // namespace
}  // namespace flashserve::kernels
