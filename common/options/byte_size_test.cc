#include "common/options/byte_size.h"

#include <cstdint>
#include <limits>
#include <string>

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace flashserve::options {
namespace {

using ::testing::HasSubstr;

uint64_t Parsed(const std::string& text) {
  absl::StatusOr<ByteSize> size = ParseByteSize(text);
  EXPECT_TRUE(size.ok()) << text << ": " << size.status();
  return size.ok() ? size->bytes : 0;
}

TEST(ByteSizeTest, ParsesUnits) {
  EXPECT_EQ(Parsed("4096"), 4096u);
  EXPECT_EQ(Parsed("0"), 0u);
  EXPECT_EQ(Parsed("17B"), 17u);
  EXPECT_EQ(Parsed("1KiB"), 1024u);
  EXPECT_EQ(Parsed("512MiB"), 512ull << 20);
  EXPECT_EQ(Parsed("10GiB"), 10ull << 30);
  EXPECT_EQ(Parsed("2TiB"), 2ull << 40);
  EXPECT_EQ(Parsed("1PiB"), 1ull << 50);
  EXPECT_EQ(Parsed("1KB"), 1000u);
  EXPECT_EQ(Parsed("3MB"), 3000000u);
  EXPECT_EQ(Parsed("1.5GB"), 1500000000u);
  EXPECT_EQ(Parsed("1.5GiB"), 3ull << 29);
  EXPECT_EQ(Parsed("0.25KiB"), 256u);
  EXPECT_EQ(Parsed("4Gi"), 4ull << 30);
  EXPECT_EQ(Parsed("4G"), 4000000000u);
  EXPECT_EQ(Parsed("10 gib"), 10ull << 30);
  EXPECT_EQ(Parsed("  8MiB "), 8ull << 20);
  EXPECT_EQ(Parsed("18446744073709551615"), std::numeric_limits<uint64_t>::max());
  EXPECT_EQ(Parsed("16383PiB"), 16383ull << 50);
}

TEST(ByteSizeTest, RejectsBadInput) {
  for (const char* bad :
       {"", "  ", "GiB", "-1", "+1", "1.", ".5", "1.5", "0.5B", "1.0000001KB", "10XB", "10 GiBs",
        "1e3", "18446744073709551616", "16384PiB", "1,5GB", "0x10", "nan"}) {
    absl::StatusOr<ByteSize> size = ParseByteSize(bad);
    EXPECT_FALSE(size.ok()) << "'" << bad << "' parsed as " << size->bytes;
    if (!size.ok()) {
      EXPECT_EQ(size.status().code(), absl::StatusCode::kInvalidArgument);
      EXPECT_THAT(size.status().message(), HasSubstr("invalid byte size"));
    }
  }
}

TEST(ByteSizeTest, FormatsInLargestExactUnit) {
  EXPECT_EQ(FormatByteSize(ByteSize{0}), "0B");
  EXPECT_EQ(FormatByteSize(ByteSize{1}), "1B");
  EXPECT_EQ(FormatByteSize(ByteSize::KiB(1)), "1KiB");
  EXPECT_EQ(FormatByteSize(ByteSize::GiB(10)), "10GiB");
  EXPECT_EQ(FormatByteSize(ByteSize{3ull << 29}), "1536MiB");
  EXPECT_EQ(FormatByteSize(ByteSize{1500000000}), "1500MB");
  EXPECT_EQ(FormatByteSize(ByteSize{1000}), "1KB");
  EXPECT_EQ(FormatByteSize(ByteSize{1000001}), "1000001B");
}

TEST(ByteSizeTest, FormatParseRoundTrip) {
  for (uint64_t v : {uint64_t{0}, uint64_t{1}, uint64_t{999}, uint64_t{1024}, uint64_t{1000},
                     uint64_t{123456789}, uint64_t{5} << 40, uint64_t{7} * 1000000000000000,
                     std::numeric_limits<uint64_t>::max()}) {
    EXPECT_EQ(Parsed(FormatByteSize(ByteSize{v})), v);
  }
}

}  // namespace
}  // namespace flashserve::options
