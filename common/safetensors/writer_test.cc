#include "common/safetensors/writer.h"

#include <dirent.h>

#include <cstdint>
#include <string>
#include <vector>

#include "common/safetensors/safetensors.h"
#include "common/safetensors/test_util.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace flashserve::safetensors {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;
using testing::ReadRaw;
using testing::ScratchDir;

std::vector<std::string> ListDir(const std::string& path) {
  std::vector<std::string> names;
  DIR* dir = opendir(path.c_str());
  if (dir == nullptr) return names;
  while (dirent* e = readdir(dir)) {
    const std::string name = e->d_name;
    if (name != "." && name != "..") names.push_back(name);
  }
  closedir(dir);
  std::sort(names.begin(), names.end());
  return names;
}

TEST(WriterTest, HeaderIsPaddedWithSpacesAndDataIsAligned) {
  SafetensorsWriter writer;
  ASSERT_TRUE(writer.Add("odd", DType::kU8, {3}, std::string("abc")).ok());
  ASSERT_TRUE(writer.Add("wide", DType::kF64, {1}, std::string(8, 'w')).ok());
  ASSERT_TRUE(writer.Add("half", DType::kBF16, {1}, std::string(2, 'h')).ok());
  const std::string image = writer.Serialize();
  uint64_t n = 0;
  for (int i = 7; i >= 0; --i) n = (n << 8) | static_cast<uint8_t>(image[i]);
  EXPECT_EQ((8 + n) % 8, 0u);
  const std::string header = image.substr(8, n);
  EXPECT_EQ(header.find_last_not_of(' '), header.rfind('}'));
  // Widest first: F64 at 0, BF16 at 8, U8 at 10; no gaps.
  EXPECT_EQ(image.substr(8 + n), std::string(8, 'w') + "hh" + "abc");
  EXPECT_EQ(writer.data_bytes(), 13u);
  EXPECT_THAT(writer.TensorNames(), ElementsAre("half", "odd", "wide"));
  EXPECT_THAT(header, HasSubstr(R"("wide":{"data_offsets":[0,8],"dtype":"F64","shape":[1]})"));
}

TEST(WriterTest, WriteIsAtomicAndLeavesNoTempFiles) {
  ScratchDir dir;
  const std::string path = dir.File("m.safetensors");
  SafetensorsWriter first;
  ASSERT_TRUE(first.Add("v", DType::kU8, {1}, std::string("1")).ok());
  ASSERT_TRUE(first.Write(path).ok());
  SafetensorsWriter second;
  ASSERT_TRUE(second.Add("v", DType::kU8, {2}, std::string("22")).ok());
  ASSERT_TRUE(second.Write(path).ok());  // replaces the first file
  EXPECT_EQ(ReadRaw(path), second.Serialize());
  EXPECT_THAT(ListDir(dir.path()), ElementsAre("m.safetensors"));

  const absl::Status status = second.Write(dir.File("no/such/dir/x.safetensors"));
  EXPECT_EQ(status.code(), absl::StatusCode::kNotFound);
  EXPECT_THAT(status.message(), HasSubstr("no/such/dir/x.safetensors"));
}

TEST(WriterTest, AddRejectsBadInput) {
  SafetensorsWriter writer;
  EXPECT_EQ(writer.Add("", DType::kU8, {1}, std::string("x")).code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(writer.Add("__metadata__", DType::kU8, {1}, std::string("x")).code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(writer.Add("bad\xff", DType::kU8, {1}, std::string("x")).code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(writer.Add("neg", DType::kU8, {-1}, std::string()).code(),
            absl::StatusCode::kInvalidArgument);
  const absl::Status size = writer.Add("size", DType::kF32, {2}, std::string(7, 'x'));
  EXPECT_EQ(size.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(size.message(), HasSubstr("F32[2] needs 8 bytes, got 7"));
  ASSERT_TRUE(writer.Add("ok", DType::kU8, {1}, std::string("x")).ok());
  EXPECT_EQ(writer.Add("ok", DType::kU8, {1}, std::string("y")).code(),
            absl::StatusCode::kAlreadyExists);
  EXPECT_EQ(writer.SetMetadata("k", "\xc3").code(), absl::StatusCode::kInvalidArgument);
}

TEST(WriterTest, SpanOverloadAndMetadataRoundTrip) {
  SafetensorsWriter writer;
  const std::vector<uint8_t> bytes = {1, 2, 3, 4};
  ASSERT_TRUE(writer.Add("s", DType::kU16, {2}, std::span<const uint8_t>(bytes)).ok());
  ASSERT_TRUE(writer.SetMetadata("format", "pt").ok());
  ASSERT_TRUE(writer.SetMetadata("note", "λ unicode").ok());
  auto file = SafetensorsFile::FromBytes("mem", writer.Serialize());
  ASSERT_TRUE(file.ok()) << file.status();
  EXPECT_EQ((*file)->metadata().size(), 2u);
  EXPECT_EQ((*file)->metadata().at("note"), "λ unicode");
  auto s = (*file)->GetChecked("s", DType::kU16, {2});
  ASSERT_TRUE(s.ok());
  EXPECT_EQ(std::vector<uint8_t>(s->data, s->data + s->nbytes), bytes);
}

}  // namespace
}  // namespace flashserve::safetensors
