#include "common/safetensors/checkpoint.h"

#include <filesystem>
#include <string>
#include <vector>

#include "common/safetensors/test_util.h"
#include "common/safetensors/writer.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace flashserve::safetensors {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;
using testing::ReadRaw;
using testing::ScratchDir;

std::string Fill(size_t n, char c) { return std::string(n, c); }

// Two shards: a, b in shard 1; c in shard 2.
std::vector<CheckpointShard> TwoShards() {
  std::vector<CheckpointShard> shards(2);
  shards[0].file_name = "model-00001-of-00002.safetensors";
  shards[1].file_name = "model-00002-of-00002.safetensors";
  EXPECT_TRUE(shards[0].writer.Add("a", DType::kBF16, {2, 2}, Fill(8, 'a')).ok());
  EXPECT_TRUE(shards[0].writer.Add("b", DType::kF32, {3}, Fill(12, 'b')).ok());
  EXPECT_TRUE(shards[1].writer.Add("c", DType::kI8, {5}, Fill(5, 'c')).ok());
  return shards;
}

std::string ViewBytes(const TensorView& v) {
  return std::string(reinterpret_cast<const char*>(v.data), v.nbytes);
}

TEST(CheckpointTest, ReadsShardsThroughIndex) {
  ScratchDir dir;
  ASSERT_TRUE(WriteShardedCheckpoint(dir.path(), TwoShards()).ok());
  EXPECT_THAT(ReadRaw(dir.File(kIndexFileName)), HasSubstr("\"total_size\": 25"));

  auto ckpt = Checkpoint::Open(dir.path());
  ASSERT_TRUE(ckpt.ok()) << ckpt.status();
  EXPECT_EQ((*ckpt)->files().size(), 2u);
  EXPECT_THAT((*ckpt)->TensorNames(), ElementsAre("a", "b", "c"));
  EXPECT_TRUE((*ckpt)->Contains("c"));
  EXPECT_FALSE((*ckpt)->Contains("d"));

  auto c = (*ckpt)->GetChecked("c", DType::kI8, {5});
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_EQ(ViewBytes(*c), "ccccc");
  auto shard = (*ckpt)->FileOf("c");
  ASSERT_TRUE(shard.ok());
  EXPECT_EQ((*shard)->path(), dir.File("model-00002-of-00002.safetensors"));
  const auto section = (*shard)->data_section();
  EXPECT_TRUE(c->data >= section.data() && c->data + c->nbytes <= section.data() + section.size());
  EXPECT_EQ(ViewBytes(*(*ckpt)->Get("a")), "aaaaaaaa");

  auto missing = (*ckpt)->Get("d");
  EXPECT_EQ(missing.status().code(), absl::StatusCode::kNotFound);
  EXPECT_THAT(missing.status().message(), HasSubstr(dir.path()));
  auto wrong = (*ckpt)->GetChecked("b", DType::kF32, {4});
  EXPECT_EQ(wrong.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(wrong.status().message(), HasSubstr("model-00001-of-00002.safetensors"));
  EXPECT_THAT(wrong.status().message(), HasSubstr("expected F32[4], found F32[3]"));
}

TEST(CheckpointTest, OpensSingleFileAndDirectoryWithModelFile) {
  ScratchDir dir;
  SafetensorsWriter writer;
  ASSERT_TRUE(writer.Add("x", DType::kU8, {3}, std::string("xyz")).ok());
  ASSERT_TRUE(writer.Write(dir.File(kSingleFileName)).ok());
  for (const std::string& path : {dir.path(), dir.File(kSingleFileName)}) {
    auto ckpt = Checkpoint::Open(path);
    ASSERT_TRUE(ckpt.ok()) << ckpt.status();
    EXPECT_EQ((*ckpt)->path(), path);
    EXPECT_THAT((*ckpt)->TensorNames(), ElementsAre("x"));
    EXPECT_EQ(ViewBytes(*(*ckpt)->Get("x")), "xyz");
  }
}

TEST(CheckpointTest, OpensConformanceDirectory) {
  auto ckpt = Checkpoint::Open("tests/conformance/data/v41-tiny");
  ASSERT_TRUE(ckpt.ok()) << ckpt.status();
  EXPECT_EQ((*ckpt)->num_tensors(), 841u);
  EXPECT_TRUE((*ckpt)->GetChecked("head.weight", DType::kBF16, {2048, 256}).ok());
}

TEST(CheckpointTest, MissingPathsAreNotFound) {
  ScratchDir dir;
  auto empty = Checkpoint::Open(dir.path());
  EXPECT_EQ(empty.status().code(), absl::StatusCode::kNotFound);
  EXPECT_THAT(empty.status().message(), HasSubstr(dir.path()));
  EXPECT_EQ(Checkpoint::Open(dir.File("nope")).status().code(), absl::StatusCode::kNotFound);

  ASSERT_TRUE(WriteCheckpointIndex(dir.path(), {{"a", "gone.safetensors"}}, 0).ok());
  auto shard_missing = Checkpoint::Open(dir.path());
  EXPECT_EQ(shard_missing.status().code(), absl::StatusCode::kNotFound);
  EXPECT_THAT(shard_missing.status().message(), HasSubstr("gone.safetensors"));
}

// Writes the two shards, then replaces the index with `weight_map`.
absl::Status OpenWithIndex(const ScratchDir& dir,
                           const std::map<std::string, std::string>& weight_map) {
  EXPECT_TRUE(WriteShardedCheckpoint(dir.path(), TwoShards()).ok());
  EXPECT_TRUE(WriteCheckpointIndex(dir.path(), weight_map, 25).ok());
  auto ckpt = Checkpoint::Open(dir.path());
  return ckpt.ok() ? absl::OkStatus() : ckpt.status();
}

constexpr char kShard1[] = "model-00001-of-00002.safetensors";
constexpr char kShard2[] = "model-00002-of-00002.safetensors";

TEST(CheckpointTest, ReportsTensorListedButMissingFromShard) {
  ScratchDir dir;
  auto status =
      OpenWithIndex(dir, {{"a", kShard1}, {"b", kShard1}, {"c", kShard2}, {"ghost", kShard2}});
  EXPECT_EQ(status.code(), absl::StatusCode::kDataLoss);
  EXPECT_THAT(status.message(), HasSubstr("\"ghost\" is listed for " + dir.File(kShard2)));
}

TEST(CheckpointTest, ReportsTensorInShardButNotInIndex) {
  ScratchDir dir;
  auto status = OpenWithIndex(dir, {{"a", kShard1}, {"c", kShard2}});
  EXPECT_EQ(status.code(), absl::StatusCode::kDataLoss);
  EXPECT_THAT(status.message(),
              HasSubstr("\"b\" in " + dir.File(kShard1) + " is not in the index"));
}

TEST(CheckpointTest, ReportsDuplicateAcrossShards) {
  ScratchDir dir;
  std::vector<CheckpointShard> shards = TwoShards();
  ASSERT_TRUE(shards[1].writer.Add("a", DType::kBF16, {2, 2}, Fill(8, 'A')).ok());
  for (const CheckpointShard& s : shards) ASSERT_TRUE(s.writer.Write(dir.File(s.file_name)).ok());
  ASSERT_TRUE(
      WriteCheckpointIndex(dir.path(), {{"a", kShard1}, {"b", kShard1}, {"c", kShard2}}, 33).ok());
  auto ckpt = Checkpoint::Open(dir.path());
  EXPECT_EQ(ckpt.status().code(), absl::StatusCode::kDataLoss);
  EXPECT_THAT(ckpt.status().message(), HasSubstr("\"a\" is in " + dir.File(kShard2)));
  EXPECT_THAT(ckpt.status().message(), HasSubstr("duplicate across shards"));
  // The writer refuses to build such a checkpoint in the first place.
  EXPECT_EQ(WriteShardedCheckpoint(dir.path(), shards).code(), absl::StatusCode::kInvalidArgument);
}

TEST(CheckpointTest, RejectsMalformedIndex) {
  ScratchDir dir;
  ASSERT_TRUE(WriteShardedCheckpoint(dir.path(), TwoShards()).ok());
  const std::string index = dir.File(kIndexFileName);
  const std::vector<std::pair<std::string, std::string>> cases = {
      {"{not json", "not valid JSON"},
      {R"({"metadata":{}})", "missing \"weight_map\""},
      {R"({"weight_map":{"a":1}})", "shard is not a string"},
      {R"({"weight_map":{"a":"../x.safetensors"}})", "bad shard file name"},
      {R"({"weight_map":{"a":"f","a":"g"}})", "duplicate key \"a\""},
  };
  for (const auto& [text, why] : cases) {
    ASSERT_TRUE(WriteFileAtomically(index, text).ok());
    auto ckpt = Checkpoint::Open(dir.path());
    EXPECT_EQ(ckpt.status().code(), absl::StatusCode::kDataLoss) << text;
    EXPECT_THAT(ckpt.status().message(), HasSubstr(why)) << text;
    EXPECT_THAT(ckpt.status().message(), HasSubstr(index)) << text;
  }
}

}  // namespace
}  // namespace flashserve::safetensors
