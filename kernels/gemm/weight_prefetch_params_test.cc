// Host-side pieces of the L2 weight prefetch (weight_prefetch.h): chunk counts and validation.
// No device needed.
#include <cstdint>
#include <string>

#include "gtest/gtest.h"
#include "kernels/gemm/weight_prefetch.h"

namespace flashserve::kernels {
namespace {

const unsigned char kByte = 0;

L2PrefetchParams One(L2PrefetchRange r) {
  L2PrefetchParams p;
  p.ranges[0] = r;
  p.count = 1;
  return p;
}

void ExpectInvalid(const L2PrefetchParams& p, const std::string& field) {
  const absl::Status s = ValidateL2PrefetchParams(p);
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << s;
  EXPECT_NE(std::string(s.message()).find(field), std::string::npos) << s;
}

TEST(L2PrefetchParamsTest, ChunksPerRowRoundUp) {
  EXPECT_EQ(L2PrefetchChunks(L2PrefetchContiguous(&kByte, 0)), 0);
  EXPECT_EQ(L2PrefetchChunks(L2PrefetchContiguous(&kByte, 1)), 1);
  EXPECT_EQ(L2PrefetchChunks(L2PrefetchContiguous(&kByte, kL2PrefetchChunkBytes)), 1);
  EXPECT_EQ(L2PrefetchChunks(L2PrefetchContiguous(&kByte, kL2PrefetchChunkBytes + 1)), 2);
  // wo_a's rows (8 groups × 1024 rows of 8 KB), a 3 KB prefix of each: one chunk a row.
  EXPECT_EQ(L2PrefetchChunks({&kByte, 8192, 3072, 8192}), 8192);
  // wq_b whole (32,768 × 1,280 codes): 2,560 chunks.
  EXPECT_EQ(L2PrefetchChunks(L2PrefetchContiguous(&kByte, 32768 * 1280)), 2560);
}

TEST(L2PrefetchParamsTest, AcceptsEmptyAndWellFormedRanges) {
  L2PrefetchParams none;
  EXPECT_TRUE(ValidateL2PrefetchParams(none).ok());
  // An empty range needs no pointer.
  EXPECT_TRUE(ValidateL2PrefetchParams(One({nullptr, 0, 4096, 4096})).ok());
  EXPECT_TRUE(ValidateL2PrefetchParams(One({nullptr, 16, 0, 4096})).ok());
  L2PrefetchParams full;
  full.count = kL2PrefetchMaxRanges;
  for (int i = 0; i < full.count; ++i) full.ranges[i] = {&kByte, 4 + i, 100 + i, 256};
  EXPECT_TRUE(ValidateL2PrefetchParams(full).ok());
  // One row: the pitch is not read.
  EXPECT_TRUE(ValidateL2PrefetchParams(One({&kByte, 1, 1 << 20, 0})).ok());
}

TEST(L2PrefetchParamsTest, RejectsBadFieldsNamingThem) {
  L2PrefetchParams p;
  p.count = kL2PrefetchMaxRanges + 1;
  ExpectInvalid(p, "count");
  p.count = -1;
  ExpectInvalid(p, "count");
  ExpectInvalid(One({&kByte, -1, 16, 16}), "ranges[0].rows");
  ExpectInvalid(One({&kByte, 2, -16, 16}), "ranges[0].row_bytes");
  ExpectInvalid(One({nullptr, 2, 16, 16}), "ranges[0].ptr");
  ExpectInvalid(One({&kByte, 2, 32, 16}), "ranges[0].pitch");
  ExpectInvalid(One({&kByte, int64_t{1} << 30, 4096, int64_t{1} << 20}), "2^40");
  ExpectInvalid(One(L2PrefetchContiguous(&kByte, (int64_t{1} << 40) + 1)), "2^40");
  // 2^36 chunks of 16 bytes (2^40 bytes spanned) and one more: more chunks than a launch has.
  L2PrefetchParams many;
  many.count = 2;
  many.ranges[0] = {&kByte, int64_t{1} << 36, 16, 16};
  EXPECT_TRUE(ValidateL2PrefetchParams(One(many.ranges[0])).ok());
  many.ranges[1] = L2PrefetchContiguous(&kByte, 16);
  ExpectInvalid(many, "ranges[1] brings the chunks past");
  L2PrefetchParams second;
  second.count = 2;
  second.ranges[0] = L2PrefetchContiguous(&kByte, 64);
  second.ranges[1] = {&kByte, 3, 64, 32};
  ExpectInvalid(second, "ranges[1].pitch");
}

}  // namespace
}  // namespace flashserve::kernels
