#include "cache_service/global_store/block_value.h"

#include <cstring>
#include <string>

#include "cache_service/global_store/test_util.h"
#include "common/base/hash.h"
#include "gtest/gtest.h"

namespace flashserve::cache {
namespace {

using testing::KeyFor;
using testing::PayloadFor;
using testing::TestFingerprint;

// Recomputes the trailing checksum after a deliberate edit, so that the field checks behind the
// checksum are exercised on their own.
void Reseal(std::string* v) {
  const size_t covered = v->size() - kBlockChecksumBytes;
  const Hash128 h = Xxh3_128(v->data(), covered);
  for (int i = 0; i < 8; ++i) {
    (*v)[covered + i] = static_cast<char>(h.low >> (8 * i));
    (*v)[covered + 8 + i] = static_cast<char>(h.high >> (8 * i));
  }
}

uint64_t ReadLe(const std::string& v, size_t off, int bytes) {
  uint64_t x = 0;
  for (int i = 0; i < bytes; ++i) x |= uint64_t{static_cast<uint8_t>(v[off + i])} << (8 * i);
  return x;
}

class BlockValueTest : public ::testing::Test {
 protected:
  const ModelFingerprint fp_ = TestFingerprint("m", 7);
  const BlockKey key_ = KeyFor(42);
  const std::string payload_ = PayloadFor(1, 2, 1000);
  std::string Encoded() const {
    std::string v;
    EncodeBlockValue(fp_, key_, 1'700'000'000'123'456, payload_, &v);
    return v;
  }
};

TEST_F(BlockValueTest, RoundTrip) {
  const std::string v = Encoded();
  ASSERT_EQ(v.size(), EncodedBlockValueBytes(payload_.size()));
  absl::StatusOr<DecodedBlockValue> d = DecodeBlockValue(v, key_, fp_);
  ASSERT_TRUE(d.ok()) << d.status();
  EXPECT_EQ(d->payload, payload_);
  EXPECT_EQ(d->header.key, key_);
  EXPECT_EQ(d->header.fingerprint, fp_);
  EXPECT_EQ(d->header.token_count, 64u);
  EXPECT_EQ(d->header.payload_length, payload_.size());
  EXPECT_EQ(d->header.created_unix_micros, 1'700'000'000'123'456);
  std::string empty;
  EncodeBlockValue(fp_, key_, 0, "", &empty);
  d = DecodeBlockValue(empty, key_, fp_);
  ASSERT_TRUE(d.ok()) << d.status();
  EXPECT_TRUE(d->payload.empty());
}

// The documented byte layout (README.md, "Block value format").
TEST_F(BlockValueTest, HeaderLayoutIsAsDocumented) {
  const std::string v = Encoded();
  EXPECT_EQ(v.substr(0, 8), "FSKVBLK\n");
  EXPECT_EQ(ReadLe(v, 8, 2), 1u);     // format version
  EXPECT_EQ(ReadLe(v, 10, 2), 104u);  // header bytes
  EXPECT_EQ(ReadLe(v, 12, 4), 7u);    // layout version
  EXPECT_EQ(std::memcmp(v.data() + 16, fp_.digest.data(), 32), 0);
  EXPECT_EQ(std::memcmp(v.data() + 48, key_.bytes.data(), 32), 0);
  EXPECT_EQ(ReadLe(v, 80, 4), 64u);  // token count
  EXPECT_EQ(ReadLe(v, 84, 4), 0u);   // ttl seconds (0: the store's default)
  EXPECT_EQ(ReadLe(v, 88, 8), payload_.size());
  EXPECT_EQ(ReadLe(v, 96, 8), 1'700'000'000'123'456u);
  EXPECT_EQ(v.substr(104, payload_.size()), payload_);
  const Hash128 h = Xxh3_128(v.data(), 104 + payload_.size());
  EXPECT_EQ(ReadLe(v, 104 + payload_.size(), 8), h.low);
  EXPECT_EQ(ReadLe(v, 112 + payload_.size(), 8), h.high);
}

// Any single flipped byte, header, payload or checksum, is DataLoss.
TEST_F(BlockValueTest, EveryFlippedByteIsDetected) {
  const std::string good = Encoded();
  for (size_t i = 0; i < good.size(); ++i) {
    std::string v = good;
    v[i] = static_cast<char>(v[i] ^ 0x10);
    absl::StatusOr<DecodedBlockValue> d = DecodeBlockValue(v, key_, fp_);
    ASSERT_FALSE(d.ok()) << "byte " << i;
    EXPECT_EQ(d.status().code(), absl::StatusCode::kDataLoss) << "byte " << i;
  }
  for (size_t cut : {size_t{0}, size_t{50}, good.size() - 1}) {
    EXPECT_EQ(DecodeBlockValue(std::string_view(good).substr(0, cut), key_, fp_).status().code(),
              absl::StatusCode::kDataLoss);
  }
  EXPECT_EQ(DecodeBlockValue(good + "x", key_, fp_).status().code(), absl::StatusCode::kDataLoss);
}

// Each field check on its own, behind a valid checksum (a bug writing a wrong header, or a value
// stored under the wrong key, is caught even though its checksum is right).
TEST_F(BlockValueTest, EachHeaderFieldIsCheckedBehindAValidChecksum) {
  struct Edit {
    size_t offset;
    const char* field;
  };
  for (const Edit& e : {Edit{0, "magic"}, Edit{8, "format version"}, Edit{10, "header size"},
                        Edit{16, "fingerprint"}, Edit{47, "fingerprint"}, Edit{48, "key echo"},
                        Edit{79, "key echo"}, Edit{80, "token count"},
                        Edit{88, "payload length"}}) {
    std::string v = Encoded();
    v[e.offset] = static_cast<char>(v[e.offset] ^ 0x01);
    Reseal(&v);
    absl::StatusOr<DecodedBlockValue> d = DecodeBlockValue(v, key_, fp_);
    ASSERT_FALSE(d.ok()) << e.field;
    EXPECT_EQ(d.status().code(), absl::StatusCode::kDataLoss) << e.field << ": " << d.status();
  }
  // The creation time and the TTL are informational: a resealed change decodes, with the new
  // values.
  std::string v = Encoded();
  v[96] = static_cast<char>(v[96] ^ 0x01);
  v[85] = 0x0e;  // ttl 0x0e00 s
  Reseal(&v);
  absl::StatusOr<DecodedBlockValue> d = DecodeBlockValue(v, key_, fp_);
  ASSERT_TRUE(d.ok()) << d.status();
  EXPECT_EQ(d->header.created_unix_micros, 1'700'000'000'123'456 ^ 1);
  EXPECT_EQ(d->header.ttl_s, 0x0e00u);
}

TEST_F(BlockValueTest, ReaderExpectationsMustMatch) {
  const std::string v = Encoded();
  EXPECT_EQ(DecodeBlockValue(v, KeyFor(43), fp_).status().code(), absl::StatusCode::kDataLoss);
  EXPECT_EQ(DecodeBlockValue(v, key_, TestFingerprint("other", 7)).status().code(),
            absl::StatusCode::kDataLoss);
  // An intact value read with another layout version: the reader is wrong, not the data.
  ModelFingerprint other_layout = fp_;
  other_layout.layout_version = 8;
  EXPECT_EQ(DecodeBlockValue(v, key_, other_layout).status().code(),
            absl::StatusCode::kFailedPrecondition);
  // A changed layout version behind a valid checksum is seen the same way.
  std::string edited = v;
  edited[12] = 8;
  Reseal(&edited);
  EXPECT_EQ(DecodeBlockValue(edited, key_, fp_).status().code(),
            absl::StatusCode::kFailedPrecondition);
  EXPECT_TRUE(DecodeBlockValue(edited, key_, other_layout).ok());
}

}  // namespace
}  // namespace flashserve::cache
