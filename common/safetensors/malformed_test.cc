// One test per way a safetensors file can be malformed: each must yield DataLoss naming the
// file (and the tensor where there is one), never a crash.
#include <string>
#include <vector>

#include "common/safetensors/safetensors.h"
#include "common/safetensors/test_util.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace flashserve::safetensors {
namespace {

using ::testing::HasSubstr;
using testing::RawImage;
using testing::ScratchDir;
using testing::WriteRaw;

class MalformedTest : public ::testing::Test {
 protected:
  // Writes `bytes` to a new file and opens it; returns the status and remembers the path.
  absl::Status OpenBytes(const std::string& bytes) {
    path_ = dir_.File("bad" + std::to_string(count_++) + ".safetensors");
    WriteRaw(path_, bytes);
    auto file = SafetensorsFile::Open(path_);
    return file.ok() ? absl::OkStatus() : file.status();
  }
  absl::Status OpenHeader(const std::string& header, size_t data_size = 0) {
    return OpenBytes(RawImage(header, std::string(data_size, 'x')));
  }
  // DataLoss, naming the file and each of `parts`.
  void ExpectCorrupt(const absl::Status& status, const std::vector<std::string>& parts) {
    EXPECT_EQ(status.code(), absl::StatusCode::kDataLoss) << status;
    EXPECT_THAT(status.message(), HasSubstr(path_));
    for (const std::string& part : parts) EXPECT_THAT(status.message(), HasSubstr(part));
  }

  ScratchDir dir_;
  std::string path_;
  int count_ = 0;
};

constexpr char kGood[] = R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]}})";

TEST_F(MalformedTest, WellFormedControlOpens) { EXPECT_TRUE(OpenHeader(kGood, 8).ok()); }

TEST_F(MalformedTest, ShorterThanEightBytes) {
  ExpectCorrupt(OpenBytes("abcde"), {"5 bytes", "shorter than the 8-byte"});
  ExpectCorrupt(OpenBytes(""), {"0 bytes"});
}

TEST_F(MalformedTest, HeaderLengthBeyondFile) {
  std::string image = RawImage(kGood, std::string(8, 'x'));
  image[0] = static_cast<char>(image[0] + 100);  // claim 100 more header bytes than exist
  ExpectCorrupt(OpenBytes(image), {"header length", "exceeds the"});
}

TEST_F(MalformedTest, HeaderLengthAbsurd) {
  std::string image = RawImage(kGood, std::string(8, 'x'));
  image[4] = 1;  // 2^32 + small: over the 100 MiB cap
  ExpectCorrupt(OpenBytes(image), {"-byte limit"});
}

TEST_F(MalformedTest, HeaderNotJson) {
  ExpectCorrupt(OpenHeader(R"({"a":{"dtype":"F32",)"), {"not valid JSON"});
  ExpectCorrupt(OpenHeader(""), {"not valid JSON"});
  ExpectCorrupt(OpenHeader(std::string(kGood) + " trailing", 8), {"not valid JSON"});
  ExpectCorrupt(OpenHeader("{\"a\xff\":1}"), {"not valid JSON"});
}

TEST_F(MalformedTest, HeaderNotAnObject) {
  ExpectCorrupt(OpenHeader("[1, 2]"), {"not a JSON object"});
  ExpectCorrupt(OpenHeader("\"text\""), {"not a JSON object"});
}

TEST_F(MalformedTest, EntryNotAnObject) {
  ExpectCorrupt(OpenHeader(R"({"t0":[1,2]})"), {"\"t0\"", "entry is an array"});
  ExpectCorrupt(OpenHeader(R"({"t1":7})"), {"\"t1\"", "not an object"});
}

TEST_F(MalformedTest, MissingFields) {
  ExpectCorrupt(OpenHeader(R"({"w":{"shape":[2],"data_offsets":[0,8]}})", 8),
                {"\"w\"", "missing \"dtype\""});
  ExpectCorrupt(OpenHeader(R"({"w":{"dtype":"F32","data_offsets":[0,8]}})", 8),
                {"\"w\"", "missing \"shape\""});
  ExpectCorrupt(OpenHeader(R"({"w":{"dtype":"F32","shape":[2]}})", 8),
                {"\"w\"", "missing \"data_offsets\""});
}

TEST_F(MalformedTest, WrongFieldTypes) {
  ExpectCorrupt(OpenHeader(R"({"w":{"dtype":3,"shape":[2],"data_offsets":[0,8]}})", 8),
                {"\"w\"", "\"dtype\"", "not a string"});
  ExpectCorrupt(OpenHeader(R"({"w":{"dtype":"F32","shape":"2","data_offsets":[0,8]}})", 8),
                {"\"w\"", "\"shape\"", "not an array"});
  ExpectCorrupt(OpenHeader(R"({"w":{"dtype":"F32","shape":[2.0],"data_offsets":[0,8]}})", 8),
                {"\"w\"", "\"shape\"", "not an integer"});
  ExpectCorrupt(OpenHeader(R"({"w":{"dtype":"F32","shape":[[2]],"data_offsets":[0,8]}})", 8),
                {"\"w\"", "\"shape\""});
  ExpectCorrupt(OpenHeader(R"({"w":{"dtype":"F32","shape":[2],"data_offsets":{"a":0}}})", 8),
                {"\"w\"", "\"data_offsets\"", "not an array"});
  ExpectCorrupt(OpenHeader(R"({"w":{"dtype":"F32","shape":[2],"data_offsets":["0",8]}})", 8),
                {"\"w\"", "\"data_offsets\"", "not an unsigned integer"});
}

TEST_F(MalformedTest, UnknownDType) {
  ExpectCorrupt(OpenHeader(R"({"w":{"dtype":"F4","shape":[2],"data_offsets":[0,1]}})", 1),
                {"\"w\"", "unknown dtype \"F4\""});
}

TEST_F(MalformedTest, NegativeDim) {
  ExpectCorrupt(OpenHeader(R"({"w":{"dtype":"U8","shape":[2,-1],"data_offsets":[0,0]}})"),
                {"\"w\"", "negative dim -1"});
}

TEST_F(MalformedTest, NumelOverflow) {
  ExpectCorrupt(
      OpenHeader(R"({"w":{"dtype":"U8","shape":[4294967296,4294967296],"data_offsets":[0,0]}})"),
      {"\"w\"", "element count overflows"});
  // numel fits in int64 but its byte size does not fit in uint64.
  ExpectCorrupt(
      OpenHeader(R"({"w":{"dtype":"F64","shape":[9223372036854775807],"data_offsets":[0,0]}})"),
      {"\"w\"", "byte size overflows"});
  ExpectCorrupt(
      OpenHeader(R"({"w":{"dtype":"U8","shape":[18446744073709551615],"data_offsets":[0,0]}})"),
      {"\"w\"", "exceeds int64"});
}

TEST_F(MalformedTest, DataOffsetsNotAPair) {
  ExpectCorrupt(OpenHeader(R"({"w":{"dtype":"U8","shape":[1],"data_offsets":[0,1,2]}})", 2),
                {"\"w\"", "must be [begin, end]"});
  ExpectCorrupt(OpenHeader(R"({"w":{"dtype":"U8","shape":[1],"data_offsets":[1]}})", 2),
                {"\"w\"", "has 1 elements"});
  ExpectCorrupt(OpenHeader(R"({"w":{"dtype":"U8","shape":[1],"data_offsets":[0,-1]}})", 2),
                {"\"w\"", "negative offset"});
}

TEST_F(MalformedTest, BeginAfterEnd) {
  ExpectCorrupt(OpenHeader(R"({"w":{"dtype":"U8","shape":[1],"data_offsets":[2,1]}})", 4),
                {"\"w\"", "begin > end"});
}

TEST_F(MalformedTest, EndBeyondData) {
  ExpectCorrupt(OpenHeader(R"({"w":{"dtype":"F32","shape":[2],"data_offsets":[0,8]}})", 7),
                {"\"w\"", "beyond the data section (7 bytes)"});
  ExpectCorrupt(OpenHeader(R"({"w":{"dtype":"U8","shape":[0],"data_offsets":[9,9]}})", 7),
                {"\"w\"", "beyond the data section"});
}

TEST_F(MalformedTest, ByteSizeMismatch) {
  ExpectCorrupt(OpenHeader(R"({"w":{"dtype":"BF16","shape":[2,2],"data_offsets":[0,6]}})", 8),
                {"\"w\"", "span 6 bytes but BF16[2, 2] needs 8"});
}

TEST_F(MalformedTest, OverlappingRanges) {
  ExpectCorrupt(OpenHeader(R"({"a":{"dtype":"U8","shape":[4],"data_offsets":[0,4]},)"
                           R"("b":{"dtype":"U8","shape":[4],"data_offsets":[3,7]}})",
                           8),
                {"\"a\"", "\"b\"", "overlaps"});
  // Identical ranges overlap too.
  ExpectCorrupt(OpenHeader(R"({"a":{"dtype":"U8","shape":[4],"data_offsets":[0,4]},)"
                           R"("b":{"dtype":"U8","shape":[4],"data_offsets":[0,4]}})",
                           8),
                {"overlaps"});
}

TEST_F(MalformedTest, GapsAndEmptyTensorsAreAllowed) {
  auto status = OpenHeader(R"({"a":{"dtype":"U8","shape":[2],"data_offsets":[0,2]},)"
                           R"("e":{"dtype":"U8","shape":[0],"data_offsets":[1,1]},)"
                           R"("b":{"dtype":"U8","shape":[2],"data_offsets":[6,8]}})",
                           10);
  EXPECT_TRUE(status.ok()) << status;
}

TEST_F(MalformedTest, DuplicateKeys) {
  ExpectCorrupt(OpenHeader(R"({"a":{"dtype":"U8","shape":[1],"data_offsets":[0,1]},)"
                           R"("a":{"dtype":"U8","shape":[1],"data_offsets":[1,2]}})",
                           2),
                {"duplicate key \"a\""});
  ExpectCorrupt(
      OpenHeader(R"({"a":{"dtype":"U8","dtype":"I8","shape":[1],"data_offsets":[0,1]}})", 1),
      {"\"a\"", "duplicate field \"dtype\""});
  ExpectCorrupt(OpenHeader(R"({"__metadata__":{"k":"1","k":"2"}})"),
                {"duplicate key \"k\" in \"__metadata__\""});
  ExpectCorrupt(OpenHeader(R"({"__metadata__":{},"__metadata__":{}})"),
                {"duplicate key \"__metadata__\""});
}

TEST_F(MalformedTest, MetadataMustMapStringsToStrings) {
  ExpectCorrupt(OpenHeader(R"({"__metadata__":{"n":1}})"), {"\"n\"", "not a string"});
  ExpectCorrupt(OpenHeader(R"({"__metadata__":[]})"), {"\"__metadata__\"", "not an object"});
}

TEST_F(MalformedTest, UnknownEntryFieldsAreIgnored) {
  auto status =
      OpenHeader(R"({"a":{"extra":{"x":[1,{"y":null}],"z":true},"dtype":"U8","note":"hi",)"
                 R"("shape":[1],"data_offsets":[0,1]}})",
                 1);
  EXPECT_TRUE(status.ok()) << status;
}

TEST_F(MalformedTest, DeepNestingIsHandledWithoutRecursion) {
  const std::string deep = std::string(100000, '[') + std::string(100000, ']');
  ExpectCorrupt(OpenHeader(R"({"a":{"x":)" + deep + "}}"), {"\"a\"", "missing \"dtype\""});
  ExpectCorrupt(OpenHeader(deep), {"not a JSON object"});
}

TEST(OpenErrorsTest, MissingFileAndDirectory) {
  auto missing = SafetensorsFile::Open("/nonexistent/dir/x.safetensors");
  EXPECT_EQ(missing.status().code(), absl::StatusCode::kNotFound);
  EXPECT_THAT(missing.status().message(), HasSubstr("/nonexistent/dir/x.safetensors"));
  ScratchDir dir;
  auto is_dir = SafetensorsFile::Open(dir.path());
  EXPECT_EQ(is_dir.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(is_dir.status().message(), HasSubstr(dir.path()));
}

}  // namespace
}  // namespace flashserve::safetensors
