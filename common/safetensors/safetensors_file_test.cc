#include <cstring>
#include <string>
#include <vector>

#include "common/safetensors/safetensors.h"
#include "common/safetensors/test_util.h"
#include "common/safetensors/writer.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace flashserve::safetensors {
namespace {

using ::testing::HasSubstr;
using testing::ReadRaw;
using testing::ScratchDir;

constexpr char kModel[] = "tests/conformance/data/v41-tiny/model.safetensors";
constexpr char kQuant[] = "tests/conformance/data/v41-tiny/quant_vectors.safetensors";

// The bytes of tensor data at [begin, end) of the data section, read independently of the reader.
std::string DataBytes(const std::string& raw, uint64_t begin, uint64_t end) {
  uint64_t n = 0;
  for (int i = 7; i >= 0; --i) n = (n << 8) | static_cast<uint8_t>(raw[i]);
  return raw.substr(8 + n + begin, end - begin);
}

std::string AsString(const TensorView& v) {
  return std::string(reinterpret_cast<const char*>(v.data), v.nbytes);
}

// The view must point inside the file's mapping (zero copy), at the data section.
void ExpectInsideFile(const SafetensorsFile& file, const TensorView& v) {
  const uint8_t* lo = file.data_section().data();
  const uint8_t* hi = lo + file.data_section().size();
  EXPECT_GE(v.data, lo) << v.name;
  EXPECT_LE(v.data + v.nbytes, hi) << v.name;
  EXPECT_EQ(file.file_bytes().data() + file.file_bytes().size(), hi);
}

TEST(DTypeTest, NamesSizesAndParseRoundTrip) {
  EXPECT_EQ(DTypeSize(DType::kBF16), 2u);
  EXPECT_EQ(DTypeSize(DType::kF64), 8u);
  EXPECT_EQ(DTypeSize(DType::kF8E8M0), 1u);
  EXPECT_EQ(DTypeName(DType::kF8E4M3), "F8_E4M3");
  for (DType d : kAllDTypes) {
    auto parsed = ParseDType(DTypeName(d));
    ASSERT_TRUE(parsed.ok()) << DTypeName(d);
    EXPECT_EQ(*parsed, d);
  }
  EXPECT_EQ(ParseDType("bf16").status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(ParseDType("F4").status().code(), absl::StatusCode::kInvalidArgument);
}

TEST(SafetensorsFileTest, ReadsConformanceModel) {
  auto file = SafetensorsFile::Open(kModel);
  ASSERT_TRUE(file.ok()) << file.status();
  const SafetensorsFile& f = **file;
  EXPECT_EQ(f.num_tensors(), 841u);
  EXPECT_EQ(f.TensorNames().size(), 841u);
  EXPECT_EQ(f.TensorNames().front(), "aligner.w1.bias");
  EXPECT_EQ(f.metadata().at("format"), "pt");
  EXPECT_FALSE(f.Contains("__metadata__"));

  auto embed = f.GetChecked("embed.weight", DType::kBF16, {2048, 256});
  ASSERT_TRUE(embed.ok()) << embed.status();
  EXPECT_EQ(embed->numel(), 2048 * 256);
  EXPECT_EQ(embed->nbytes, 2048u * 256 * 2);
  EXPECT_EQ(embed->as<uint16_t>().size(), 2048u * 256);

  const std::string raw = ReadRaw(kModel);
  struct Expected {
    const char* name;
    DType dtype;
    std::vector<int64_t> shape;
    uint64_t begin, end;
  };
  const Expected expected[] = {
      {"layers.0.attn.attn_sink", DType::kF32, {4}, 0, 16},
      {"layers.0.attn.wkv.scale", DType::kF8E8M0, {4, 8}, 6253976, 6254008},
      {"layers.0.attn.wkv.weight", DType::kF8E4M3, {128, 256}, 6516810, 6549578},
      {"layers.0.ffn.experts.0.w1.weight", DType::kI8, {128, 128}, 10916490, 10932874},
      {"aligner.w1.bias", DType::kBF16, {256}, 2167128, 2167640},
  };
  for (const Expected& e : expected) {
    auto v = f.GetChecked(e.name, e.dtype, e.shape);
    ASSERT_TRUE(v.ok()) << v.status();
    EXPECT_EQ(v->name, e.name);
    EXPECT_EQ(AsString(*v), DataBytes(raw, e.begin, e.end)) << e.name;
    EXPECT_EQ(v->data, f.data_section().data() + e.begin);
    ExpectInsideFile(f, *v);
  }
  // Every view lies in the mapping and is aligned to its element size (the file is aligned).
  for (const std::string& name : f.TensorNames()) {
    auto v = f.Get(name);
    ASSERT_TRUE(v.ok()) << v.status();
    ExpectInsideFile(f, *v);
    EXPECT_EQ(reinterpret_cast<uintptr_t>(v->data) % DTypeSize(v->dtype), 0u) << name;
  }
}

TEST(SafetensorsFileTest, ReadsQuantVectors) {
  auto file = SafetensorsFile::Open(kQuant);
  ASSERT_TRUE(file.ok()) << file.status();
  EXPECT_EQ((*file)->num_tensors(), 13u);
  EXPECT_THAT((*file)->metadata().at("producer"), HasSubstr("act_quant"));
  auto scale = (*file)->GetChecked("quant.fp4_e2m1_e4m3_b16.scale_f32", DType::kF32, {64, 16});
  ASSERT_TRUE(scale.ok()) << scale.status();
  const std::string raw = ReadRaw(kQuant);
  const std::string bytes = DataBytes(raw, 0, 4096);
  float first;
  std::memcpy(&first, bytes.data(), 4);
  EXPECT_EQ(scale->as<float>()[0], first);
  EXPECT_EQ(AsString(*scale), bytes);
  auto packed = (*file)->GetChecked("quant.fp4_e2m1_e4m3_b16.packed", DType::kU8, {64, -1});
  ASSERT_TRUE(packed.ok()) << packed.status();
  EXPECT_EQ(AsString(*packed), DataBytes(raw, 139264, 147456));
}

TEST(SafetensorsFileTest, GetReportsMissingTensorAndFile) {
  auto file = SafetensorsFile::Open(kQuant);
  ASSERT_TRUE(file.ok());
  auto missing = (*file)->Get("no.such.tensor");
  EXPECT_EQ(missing.status().code(), absl::StatusCode::kNotFound);
  EXPECT_THAT(missing.status().message(), HasSubstr("no.such.tensor"));
  EXPECT_THAT(missing.status().message(), HasSubstr(kQuant));
}

TEST(SafetensorsFileTest, GetCheckedNamesExpectedAndActual) {
  auto file = SafetensorsFile::Open(kModel);
  ASSERT_TRUE(file.ok());
  auto wrong_dtype = (*file)->GetChecked("embed.weight", DType::kF32, {2048, 256});
  EXPECT_EQ(wrong_dtype.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(wrong_dtype.status().message(), HasSubstr("\"embed.weight\""));
  EXPECT_THAT(wrong_dtype.status().message(), HasSubstr(kModel));
  EXPECT_THAT(wrong_dtype.status().message(), HasSubstr("expected F32[2048, 256]"));
  EXPECT_THAT(wrong_dtype.status().message(), HasSubstr("found BF16[2048, 256]"));
  auto wrong_shape = (*file)->GetChecked("embed.weight", DType::kBF16, {256, 2048});
  EXPECT_THAT(wrong_shape.status().message(), HasSubstr("expected BF16[256, 2048]"));
  auto wrong_rank = (*file)->GetChecked("embed.weight", DType::kBF16, {-1});
  EXPECT_EQ(wrong_rank.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_TRUE((*file)->GetChecked("embed.weight", DType::kBF16, {-1, 256}).ok());
  std::vector<int64_t> shape = {2048, 256};
  EXPECT_TRUE((*file)->GetChecked("embed.weight", DType::kBF16, shape).ok());
}

// Deterministic, dtype-distinct bytes for a tensor.
std::string Pattern(size_t n, int seed) {
  std::string s(n, '\0');
  for (size_t i = 0; i < n; ++i) s[i] = static_cast<char>((i * 131 + seed * 17 + 7) & 0xff);
  return s;
}

TEST(SafetensorsFileTest, RoundTripsEveryDType) {
  ScratchDir dir;
  SafetensorsWriter writer;
  int seed = 0;
  for (DType d : kAllDTypes) {
    const std::vector<int64_t> shape = {3, 5};
    ASSERT_TRUE(writer
                    .Add(std::string("t.") + std::string(DTypeName(d)), d, shape,
                         Pattern(15 * DTypeSize(d), seed++))
                    .ok());
  }
  ASSERT_TRUE(writer.Add("scalar", DType::kF32, {}, Pattern(4, 99)).ok());
  ASSERT_TRUE(writer.Add("empty", DType::kBF16, {0, 7}, std::string()).ok());
  ASSERT_TRUE(writer.SetMetadata("format", "pt").ok());
  const std::string path = dir.File("all.safetensors");
  ASSERT_TRUE(writer.Write(path).ok());

  auto file = SafetensorsFile::Open(path);
  ASSERT_TRUE(file.ok()) << file.status();
  EXPECT_EQ((*file)->TensorNames(), writer.TensorNames());
  EXPECT_EQ((*file)->metadata().at("format"), "pt");
  seed = 0;
  for (DType d : kAllDTypes) {
    auto v = (*file)->GetChecked(std::string("t.") + std::string(DTypeName(d)), d, {3, 5});
    ASSERT_TRUE(v.ok()) << v.status();
    EXPECT_EQ(AsString(*v), Pattern(15 * DTypeSize(d), seed++)) << DTypeName(d);
    ExpectInsideFile(**file, *v);
    EXPECT_EQ(reinterpret_cast<uintptr_t>(v->data) % DTypeSize(d), 0u) << DTypeName(d);
  }
  auto scalar = (*file)->GetChecked("scalar", DType::kF32, std::vector<int64_t>{});
  ASSERT_TRUE(scalar.ok()) << scalar.status();
  EXPECT_EQ(scalar->numel(), 1);
  EXPECT_EQ(AsString(*scalar), Pattern(4, 99));
  auto empty = (*file)->GetChecked("empty", DType::kBF16, {0, 7});
  ASSERT_TRUE(empty.ok());
  EXPECT_EQ(empty->numel(), 0);
  EXPECT_EQ(empty->nbytes, 0u);

  // FromBytes sees the same content as the mapped file.
  auto in_memory = SafetensorsFile::FromBytes("mem", writer.Serialize());
  ASSERT_TRUE(in_memory.ok()) << in_memory.status();
  EXPECT_EQ((*in_memory)->path(), "mem");
  EXPECT_EQ(AsString(*(*in_memory)->Get("t.I64")), AsString(*(*file)->Get("t.I64")));
  EXPECT_EQ(ReadRaw(path), writer.Serialize());
}

}  // namespace
}  // namespace flashserve::safetensors
