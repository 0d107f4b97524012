#include "cache_service/swa_pool/swa_key.h"

#include <numeric>
#include <vector>

#include "cache_service/global_store/test_util.h"
#include "gtest/gtest.h"

namespace flashserve::cache {
namespace {

// Known answer computed independently (Python hashlib) from the documented encoding.
TEST(SwaKeyTest, KnownAnswerMatchesTheDocumentedEncoding) {
  const ModelFingerprint fp =
      ComputeModelFingerprint(ModelIdentity{"config", "weights", "tokenizer", 1});
  std::vector<TokenId> prefix(70);
  std::iota(prefix.begin(), prefix.end(), 0);
  const SwaKey key = SwaKeyForPrefix(prefix, fp, "");
  EXPECT_EQ(key.ToHex(), "4a7584741af0ceff5bae0cb5f5d22dab0052a58a657ee784db8b851d2b749152");
  const std::vector<BlockKey> chain = ChainKeys(prefix, fp, "");
  absl::StatusOr<SwaKey> direct = ComputeSwaKey(chain[0], std::span(prefix).subspan(64), fp, "");
  ASSERT_TRUE(direct.ok());
  EXPECT_EQ(*direct, key);
}

TEST(SwaKeyTest, TailOfAFullBlockIsRejected) {
  const ModelFingerprint fp = testing::TestFingerprint("m");
  const std::vector<TokenId> tail = testing::Tokens(64, 1);
  EXPECT_TRUE(absl::IsInvalidArgument(ComputeSwaKey(BlockKey::Root(), tail, fp, "").status()));
  EXPECT_TRUE(ComputeSwaKey(BlockKey::Root(), std::span(tail).first(63), fp, "").ok());
}

TEST(SwaKeyTest, EveryPrefixLengthAndInputGivesItsOwnKey) {
  const ModelFingerprint fp = testing::TestFingerprint("m");
  const std::vector<TokenId> tokens = testing::Tokens(200, 5);
  std::vector<SwaKey> keys;
  for (size_t n = 0; n <= tokens.size(); ++n) {
    keys.push_back(SwaKeyForPrefix(std::span(tokens).first(n), fp, ""));
  }
  std::sort(keys.begin(), keys.end());
  EXPECT_EQ(std::adjacent_find(keys.begin(), keys.end()), keys.end());  // all distinct
  const auto p = std::span(tokens).first(130);
  const SwaKey base = SwaKeyForPrefix(p, fp, "");
  EXPECT_EQ(SwaKeyForPrefix(p, fp, ""), base);
  EXPECT_NE(SwaKeyForPrefix(p, fp, "tenant"), base);
  EXPECT_NE(SwaKeyForPrefix(p, testing::TestFingerprint("n"), ""), base);
  std::vector<TokenId> changed(p.begin(), p.end());
  changed[3] += 1;  // inside the chained blocks
  EXPECT_NE(SwaKeyForPrefix(changed, fp, ""), base);
  changed = std::vector<TokenId>(p.begin(), p.end());
  changed[129] += 1;  // in the tail
  EXPECT_NE(SwaKeyForPrefix(changed, fp, ""), base);
  // Domain separation: the SWA key of a 64-token prefix is not its block key.
  const auto one_block = std::span(tokens).first(64);
  EXPECT_NE(SwaKeyForPrefix(one_block, fp, "").bytes, ChainKeys(one_block, fp, "")[0].bytes);
}

}  // namespace
}  // namespace flashserve::cache
