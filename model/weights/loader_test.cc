#include "model/weights/loader.h"

#include <stdlib.h>

#include <filesystem>
#include <fstream>
#include <set>
#include <string>

#include "common/safetensors/writer.h"
#include "gtest/gtest.h"
#include "model/config/config_parser.h"
#include "model/config/kv_sizes.h"

namespace flashserve::model {
namespace {

namespace fs = std::filesystem;
using safetensors::DType;

constexpr char kTinyDir[] = "tests/conformance/data/v41-tiny";
constexpr char kReleasedConfig[] = "configs/deepseek-v41-flash/inference_config.json";

std::string MakeTempDir() {
  std::string tmpl = (fs::temp_directory_path() / "fs_weights_XXXXXX").string();
  char* dir = mkdtemp(tmpl.data());
  EXPECT_NE(dir, nullptr);
  return tmpl;
}

// Copies every tensor of the tiny checkpoint into a writer, letting `edit` drop or change some.
// Returns the directory holding config.json + model.safetensors.
template <typename Edit>
std::string WriteEditedTiny(Edit edit) {
  auto ckpt = safetensors::Checkpoint::Open(kTinyDir);
  EXPECT_TRUE(ckpt.ok()) << ckpt.status();
  safetensors::SafetensorsWriter writer;
  for (const std::string& name : (*ckpt)->TensorNames()) {
    safetensors::TensorView v = *(*ckpt)->Get(name);
    std::vector<int64_t> shape = v.shape;
    DType dtype = v.dtype;
    std::string bytes(reinterpret_cast<const char*>(v.data), v.nbytes);
    if (!edit(name, &dtype, &shape, &bytes)) continue;
    EXPECT_TRUE(writer.Add(name, dtype, shape, bytes).ok()) << name;
  }
  std::string dir = MakeTempDir();
  fs::copy_file(fs::path(kTinyDir) / "config.json", fs::path(dir) / "config.json");
  EXPECT_TRUE(writer.Write(dir + "/model.safetensors").ok());
  return dir;
}

TEST(Loader, LoadsTheTinyFixture) {
  auto loaded = LoadedCheckpoint::Open(kTinyDir);
  ASSERT_TRUE(loaded.ok()) << loaded.status();
  const LoadedCheckpoint& c = **loaded;
  // Every stored tensor is explained by the config and every expected one is present.
  EXPECT_EQ(c.specs().size(), 841u);
  EXPECT_EQ(c.checkpoint().num_tensors(), 841u);

  const ModelWeights& w = c.weights();
  ASSERT_EQ(w.layers.size(), 8u);
  // Layer 2: ratio-2 KV source -> compressor with wgate, indexer with keys.
  ASSERT_TRUE(w.layers[2].attn.compressor.has_value());
  EXPECT_TRUE(w.layers[2].attn.compressor->wgate.has_value());
  ASSERT_TRUE(w.layers[2].attn.indexer.has_value());
  EXPECT_TRUE(w.layers[2].attn.indexer->wk.has_value());
  // Layer 3 reuses 2: no compressor, no indexer.
  EXPECT_FALSE(w.layers[3].attn.compressor.has_value());
  EXPECT_FALSE(w.layers[3].attn.indexer.has_value());
  // Layer 4: ratio-1 source, no wgate.
  ASSERT_TRUE(w.layers[4].attn.compressor.has_value());
  EXPECT_FALSE(w.layers[4].attn.compressor->wgate.has_value());
  // Layer 6 re-indexes: queries but no keys.
  ASSERT_TRUE(w.layers[6].attn.indexer.has_value());
  EXPECT_TRUE(w.layers[6].attn.indexer->wq_b.has_value());
  EXPECT_FALSE(w.layers[6].attn.indexer->wk.has_value());
  // Engram before layers 1 and 3.
  for (int i = 0; i < 8; ++i) EXPECT_EQ(w.layers[i].engram.has_value(), i == 1 || i == 3) << i;
  EXPECT_EQ(w.layers[1].engram->table_codes.shape, (std::vector<int64_t>{12458, 32}));
  EXPECT_EQ(w.layers[3].engram->table_codes.shape, (std::vector<int64_t>{13416, 32}));
  // DSpark: 3 stages of 4 experts; vision: 2 blocks.
  ASSERT_TRUE(w.dspark.has_value());
  EXPECT_EQ(w.dspark->stages.size(), 3u);
  EXPECT_EQ(w.dspark->stages[0].ffn.experts.size(), 4u);
  EXPECT_EQ(w.layers[0].ffn.experts.size(), 8u);
  ASSERT_TRUE(w.vision.has_value());
  EXPECT_EQ(w.vision->blocks.size(), 2u);
  EXPECT_EQ(w.layers[5].ffn.experts[7].w2.format, LinearFormat::kFp4Block32);
  EXPECT_EQ(w.layers[5].ffn.shared.w2.format, LinearFormat::kFp8Block32);

  // Views are zero-copy: they point into the mapped file.
  auto raw = c.checkpoint().Get("layers.5.ffn.experts.7.w2.weight");
  ASSERT_TRUE(raw.ok());
  EXPECT_EQ(w.layers[5].ffn.experts[7].w2.weight.data, raw->data);
  auto file = c.checkpoint().FileOf("embed.weight");
  ASSERT_TRUE(file.ok());
  auto bytes = (*file)->file_bytes();
  EXPECT_GE(w.embed.data, bytes.data());
  EXPECT_LE(w.embed.data + w.embed.nbytes, bytes.data() + bytes.size());
}

TEST(Loader, ExpectedTensorsMatchTheFixtureExactly) {
  auto config = LoadModelConfig(kTinyDir);
  ASSERT_TRUE(config.ok());
  auto ckpt = safetensors::Checkpoint::Open(kTinyDir);
  ASSERT_TRUE(ckpt.ok());
  std::set<std::string> names;
  for (const TensorSpec& spec : ExpectedTensors(*config)) {
    names.insert(spec.name);
    auto v = (*ckpt)->Get(spec.name);
    ASSERT_TRUE(v.ok()) << spec.name;
    EXPECT_EQ(v->dtype, spec.dtype) << spec.name;
    EXPECT_EQ(v->shape, spec.shape) << spec.name;
    EXPECT_EQ(static_cast<int64_t>(v->nbytes), spec.bytes) << spec.name;
  }
  EXPECT_EQ(names.size(), (*ckpt)->num_tensors());
}

TEST(Loader, NamesEveryMissingMistypedAndUnexpectedTensor) {
  std::string dir = WriteEditedTiny(
      [](const std::string& name, DType* dtype, std::vector<int64_t>* shape, std::string* bytes) {
        if (name == "layers.3.attn.wq_a.weight") return false;      // missing
        if (name == "mtp.1.ffn.experts.2.w3.scale") return false;   // missing
        if (name == "layers.6.attn.indexer.weights_proj.weight") {  // wrong shape
          *shape = {2, 512};
        }
        if (name == "layers.0.attn.attn_sink") {  // wrong dtype
          *dtype = DType::kI32;
        }
        return true;
      });
  // An unexpected tensor: a compressor on a Reuse layer.
  {
    auto ckpt = safetensors::Checkpoint::Open(dir);
    ASSERT_TRUE(ckpt.ok());
  }
  auto loaded = LoadedCheckpoint::Open(dir);
  ASSERT_FALSE(loaded.ok());
  EXPECT_EQ(loaded.status().code(), absl::StatusCode::kFailedPrecondition);
  std::string msg(loaded.status().message());
  EXPECT_NE(msg.find("layers.3.attn.wq_a.weight"), std::string::npos) << msg;
  EXPECT_NE(msg.find("mtp.1.ffn.experts.2.w3.scale"), std::string::npos) << msg;
  EXPECT_NE(msg.find("layers.6.attn.indexer.weights_proj.weight: expected BF16 [4, 256], found "
                     "BF16 [2, 512]"),
            std::string::npos)
      << msg;
  EXPECT_NE(msg.find("layers.0.attn.attn_sink: expected F32 [4], found I32 [4]"), std::string::npos)
      << msg;
  EXPECT_NE(msg.find("2 missing, 2 with the wrong dtype or shape, 0 unexpected"), std::string::npos)
      << msg;
  fs::remove_all(dir);
}

TEST(Loader, RejectsTensorsTheConfigDoesNotExplain) {
  std::string dir = WriteEditedTiny(
      [](const std::string&, DType*, std::vector<int64_t>*, std::string*) { return true; });
  {
    // Rewrite with two extra tensors: a compressor on Reuse layer 3 and a ninth expert.
    auto ckpt = safetensors::Checkpoint::Open(dir);
    ASSERT_TRUE(ckpt.ok());
    safetensors::SafetensorsWriter writer;
    for (const std::string& name : (*ckpt)->TensorNames()) {
      auto v = *(*ckpt)->Get(name);
      ASSERT_TRUE(writer.Add(name, v.dtype, v.shape, v.bytes()).ok());
    }
    std::string zeros(128 * 256 * 2, '\0');
    ASSERT_TRUE(
        writer.Add("layers.3.attn.compressor.wkv.weight", DType::kBF16, {128, 256}, zeros).ok());
    ASSERT_TRUE(writer
                    .Add("layers.0.ffn.experts.8.w1.scale", DType::kF8E8M0, {128, 8},
                         std::string(128 * 8, '\x7f'))
                    .ok());
    ckpt->reset();
    ASSERT_TRUE(writer.Write(dir + "/model.safetensors").ok());
  }
  auto loaded = LoadedCheckpoint::Open(dir);
  ASSERT_FALSE(loaded.ok());
  std::string msg(loaded.status().message());
  EXPECT_NE(msg.find("0 missing, 0 with the wrong dtype or shape, 2 unexpected"), std::string::npos)
      << msg;
  EXPECT_NE(msg.find("layers.3.attn.compressor.wkv.weight"), std::string::npos) << msg;
  EXPECT_NE(msg.find("layers.0.ffn.experts.8.w1.scale"), std::string::npos) << msg;
  fs::remove_all(dir);
}

TEST(Loader, LoadsAShardedCopy) {
  auto ckpt = safetensors::Checkpoint::Open(kTinyDir);
  ASSERT_TRUE(ckpt.ok());
  std::vector<safetensors::CheckpointShard> shards(3);
  for (int i = 0; i < 3; ++i) {
    shards[i].file_name = "model-0000" + std::to_string(i + 1) + "-of-00003.safetensors";
  }
  int i = 0;
  for (const std::string& name : (*ckpt)->TensorNames()) {
    auto v = *(*ckpt)->Get(name);
    ASSERT_TRUE(shards[i++ % 3].writer.Add(name, v.dtype, v.shape, v.bytes()).ok());
  }
  std::string dir = MakeTempDir();
  ASSERT_TRUE(safetensors::WriteShardedCheckpoint(dir, shards).ok());
  fs::copy_file(fs::path(kTinyDir) / "config.json", fs::path(dir) / "config.json");
  auto loaded = LoadedCheckpoint::Open(dir);
  ASSERT_TRUE(loaded.ok()) << loaded.status();
  EXPECT_EQ((*loaded)->checkpoint().files().size(), 3u);
  EXPECT_EQ((*loaded)->specs().size(), 841u);
  fs::remove_all(dir);
}

TEST(Loader, ConfigErrorsSurface) {
  std::string dir = MakeTempDir();
  std::ofstream(dir + "/config.json") << R"({"vocab_size": 10})";
  auto loaded = LoadedCheckpoint::Open(dir);
  ASSERT_FALSE(loaded.ok());
  EXPECT_NE(std::string(loaded.status().message()).find("missing required config key"),
            std::string::npos)
      << loaded.status();
  fs::remove_all(dir);
}

TEST(ExpectedTensors, ReleasedConfig) {
  auto config = LoadModelConfig(kReleasedConfig);
  ASSERT_TRUE(config.ok()) << config.status();
  std::vector<TensorSpec> specs = ExpectedTensors(*config);
  ParamSummary s = SummarizeParams(specs);
  // 40 layers x 384 experts x 3 matrices x 2 (weight, scale) dominate the tensor count.
  int64_t expert_tensors = 0;
  for (const TensorSpec& t : specs) expert_tensors += t.kind == ParamKind::kRoutedExperts;
  EXPECT_EQ(expert_tensors, 40 * 384 * 3 * 2);
  // Routed expert parameters: 40 x 384 x 3 x 2304 x 5120 (FP4 counted 2 per byte).
  EXPECT_EQ(s.params[static_cast<int>(ParamKind::kRoutedExperts)],
            int64_t{40} * 384 * 3 * 2304 * 5120);
  // Engram tables: (384006168 + 384016682) rows x 256.
  EXPECT_EQ(s.params[static_cast<int>(ParamKind::kEngramTable)],
            (int64_t{384006168} + 384016682) * 256);
  // Shapes of spec §6 for one layer of each kind.
  auto find = [&](const std::string& name) -> const TensorSpec* {
    for (const TensorSpec& t : specs)
      if (t.name == name) return &t;
    return nullptr;
  };
  ASSERT_NE(find("layers.2.attn.compressor.wgate.weight"), nullptr);
  EXPECT_EQ(find("layers.20.attn.compressor.wgate.weight"), nullptr);
  EXPECT_EQ(find("layers.0.attn.wq_b.scale")->shape, (std::vector<int64_t>{1024, 40}));
  EXPECT_EQ(find("layers.0.attn.wo_a.weight")->shape, (std::vector<int64_t>{8192, 4096}));
  EXPECT_EQ(find("layers.0.ffn.experts.383.w2.scale")->shape, (std::vector<int64_t>{5120, 72}));
  EXPECT_EQ(find("layers.14.engram.wkv.weight")->shape, (std::vector<int64_t>{25600, 6144}));
  EXPECT_EQ(find("layers.24.attn.indexer.wq_b.scale")->shape, (std::vector<int64_t>{128, 40}));
  EXPECT_EQ(find("layers.24.attn.indexer.wk.weight"), nullptr);
  EXPECT_EQ(find("mtp.0.main_proj.scale")->shape, (std::vector<int64_t>{160, 480}));
  EXPECT_EQ(find("mtp.2.confidence_head.proj.weight")->shape, (std::vector<int64_t>{1, 5376}));
  EXPECT_EQ(find("aligner.w1.weight")->shape, (std::vector<int64_t>{5120, 9216}));
  EXPECT_EQ(find("mtp.1.ffn.experts.127.w1.weight")->shape, (std::vector<int64_t>{2304, 2560}));
  EXPECT_EQ(find("mtp.1.ffn.experts.128.w1.weight"), nullptr);
}

}  // namespace
}  // namespace flashserve::model
