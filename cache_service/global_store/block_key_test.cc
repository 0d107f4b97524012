#include "cache_service/global_store/block_key.h"

#include <numeric>
#include <vector>

#include "cache_service/global_store/test_util.h"
#include "gtest/gtest.h"

namespace flashserve::cache {
namespace {

using testing::Tokens;

ModelFingerprint GoldenFingerprint() {
  return ComputeModelFingerprint(ModelIdentity{"config", "weights", "tokenizer", 1});
}

// Known answers computed independently (Python hashlib) from the byte layout in README.md: they
// pin the documented encoding to the code.
TEST(BlockKeyTest, KnownAnswersMatchTheDocumentedEncoding) {
  const ModelFingerprint fp = GoldenFingerprint();
  EXPECT_EQ(fp.ToHex(), "fe63e7a55a2daddfad976fc83b35761029e78358df4e87de17425faffedbf039");
  EXPECT_EQ(fp.layout_version, 1u);
  std::vector<TokenId> tokens(128);
  std::iota(tokens.begin(), tokens.end(), 0);
  const BlockKey k0 =
      ComputeBlockKey(BlockKey::Root(), std::span(tokens).first<kBlockTokens>(), fp, "");
  EXPECT_EQ(k0.ToHex(), "c4cd704de572ea70576acc56d16149b3d10db75dc65ea00f8a9f1bf705d4d8f1");
  const BlockKey k1 =
      ComputeBlockKey(k0, std::span(tokens).subspan(64).first<kBlockTokens>(), fp, "tenant-a");
  EXPECT_EQ(k1.ToHex(), "3cb9a9986ac6fd0b9f0986d42cd86d3bd65524333f867c96930e061d1f64c8ac");
  tokens[5] = -1;  // encoded as its 32-bit two's complement, 0xffffffff
  EXPECT_EQ(
      ComputeBlockKey(BlockKey::Root(), std::span(tokens).first<kBlockTokens>(), fp, "").ToHex(),
      "292bf7a5c8d2eeaadeaf4f1f46498513535baae2b8c6b77575df6cc9d97d7d3d");
}

TEST(BlockKeyTest, RootIsZeroAndHexRoundTrips) {
  EXPECT_TRUE(BlockKey::Root().IsRoot());
  EXPECT_EQ(BlockKey::Root().ToHex(), std::string(64, '0'));
  const BlockKey k = testing::KeyFor(0x1234567890);
  absl::StatusOr<BlockKey> back = BlockKey::FromHex(k.ToHex());
  ASSERT_TRUE(back.ok()) << back.status();
  EXPECT_EQ(*back, k);
  EXPECT_FALSE(BlockKey::FromHex("abc").ok());
  EXPECT_FALSE(BlockKey::FromHex(std::string(63, '0') + "g").ok());
  EXPECT_TRUE(BlockKey::FromHex(std::string(64, 'F')).ok());
}

TEST(BlockKeyTest, ChainIsDeterministicAndLinksParents) {
  const ModelFingerprint fp = GoldenFingerprint();
  const std::vector<TokenId> tokens = Tokens(64 * 3 + 17, 7);
  const std::vector<BlockKey> a = ChainKeys(tokens, fp, "salt");
  const std::vector<BlockKey> b = ChainKeys(tokens, fp, "salt");
  ASSERT_EQ(a.size(), 3u);  // the 17-token tail has no key
  EXPECT_EQ(a, b);
  BlockKey parent = BlockKey::Root();
  for (size_t i = 0; i < a.size(); ++i) {
    EXPECT_EQ(a[i], ComputeBlockKey(parent, std::span(tokens).subspan(64 * i).first<kBlockTokens>(),
                                    fp, "salt"));
    parent = a[i];
  }
  EXPECT_TRUE(ChainKeys(std::span(tokens).first(63), fp, "").empty());
}

TEST(BlockKeyTest, EveryInputChangesTheKey) {
  const ModelFingerprint fp = GoldenFingerprint();
  const std::vector<TokenId> tokens = Tokens(64 * 2, 11);
  const std::vector<BlockKey> base = ChainKeys(tokens, fp, "");

  // One token of the second block: only the second key changes.
  std::vector<TokenId> t2 = tokens;
  t2[64 + 63] += 1;
  std::vector<BlockKey> k = ChainKeys(t2, fp, "");
  EXPECT_EQ(k[0], base[0]);
  EXPECT_NE(k[1], base[1]);
  // One token of the first block: every later key changes (the chain).
  t2 = tokens;
  t2[0] ^= 1;
  k = ChainKeys(t2, fp, "");
  EXPECT_NE(k[0], base[0]);
  EXPECT_NE(k[1], base[1]);
  // The salt, the fingerprint, the parent.
  EXPECT_NE(ChainKeys(tokens, fp, "tenant")[0], base[0]);
  EXPECT_NE(ChainKeys(tokens, testing::TestFingerprint("other"), "")[0], base[0]);
  const auto first = std::span(tokens).first<kBlockTokens>();
  EXPECT_NE(ComputeBlockKey(testing::KeyFor(1), first, fp, ""), base[0]);
}

TEST(BlockKeyTest, FingerprintCoversEveryIdentityField) {
  const ModelIdentity base{"cfg", "w", "tok", 3};
  const ModelFingerprint fp = ComputeModelFingerprint(base);
  EXPECT_EQ(fp, ComputeModelFingerprint(base));
  ModelIdentity m = base;
  m.config_text += " ";
  EXPECT_NE(ComputeModelFingerprint(m).digest, fp.digest);
  m = base;
  m.weights_identity = "w2";
  EXPECT_NE(ComputeModelFingerprint(m).digest, fp.digest);
  m = base;
  m.tokenizer_identity = "tok2";
  EXPECT_NE(ComputeModelFingerprint(m).digest, fp.digest);
  m = base;
  m.layout_version = 4;
  EXPECT_NE(ComputeModelFingerprint(m).digest, fp.digest);
  EXPECT_EQ(ComputeModelFingerprint(m).layout_version, 4u);
  // Length prefixes: moving a byte from one field to the next changes the digest.
  EXPECT_NE(ComputeModelFingerprint({"ab", "c", "tok", 3}).digest,
            ComputeModelFingerprint({"a", "bc", "tok", 3}).digest);
  EXPECT_NE(ComputeModelFingerprint({"", "", "", 0}).digest, Sha256Digest{});
}

// A tenant who knows another tenant's tokens but not its salt cannot reproduce its keys, and no
// choice of its own salt reproduces them: the salt is a length-prefixed field of its own.
TEST(BlockKeyTest, TenantsWithDifferentSaltsNeverShareKeys) {
  const ModelFingerprint fp = GoldenFingerprint();
  const std::vector<TokenId> victim_tokens = Tokens(64 * 4, 99);
  const std::vector<BlockKey> victim = ChainKeys(victim_tokens, fp, "tenant-victim");
  for (const std::string& salt :
       {std::string(), std::string("tenant-attacker"), std::string("tenant-victi"),
        std::string("tenant-victim\0", 14)}) {
    const std::vector<BlockKey> attacker = ChainKeys(victim_tokens, fp, salt);
    for (size_t i = 0; i < victim.size(); ++i) EXPECT_NE(attacker[i], victim[i]) << salt;
  }
  // Salt bytes cannot be traded against token bytes either (the token field has a fixed length
  // but is still length-prefixed): different splits give different keys.
  EXPECT_NE(ChainKeys(victim_tokens, fp, std::string("ab", 2))[0],
            ChainKeys(victim_tokens, fp, std::string("a", 1))[0]);
  // The unsalted chain differs from every salted one.
  EXPECT_NE(ChainKeys(victim_tokens, fp, "")[0], victim[0]);
}

}  // namespace
}  // namespace flashserve::cache
