// A synthetic checkpoint (model/weights/synthetic_checkpoint.h) of the released layer schedule at
// small widths loads, prepares and runs: the loader accepts every tensor, the same seed gives the
// same bytes, the forward is finite and CED / exact agree on short prompts bit for bit.
#include "model/weights/synthetic_checkpoint.h"

#include <cmath>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <string>

#include "common/base/thread_pool.h"
#include "gtest/gtest.h"
#include "model/config/config_parser.h"
#include "model/runtime/cpu_model.h"
#include "model/runtime/prepared_model.h"
#include "model/weights/loader.h"

namespace flashserve::model {
namespace {

ModelConfig Mini() {
  auto c = LoadModelConfig("configs/deepseek-v41-flash/inference_config.json");
  EXPECT_TRUE(c.ok()) << c.status();
  ModelConfig m = *c;
  m.max_seq_len = 512;
  m.vocab_size = 512;
  m.image_token_id = 511;
  m.dspark_noise_token_id = 510;
  m.dim = 64;
  m.moe_inter_dim = 64;
  m.n_heads = 1;
  m.head_dim = 64;
  m.rope_head_dim = 32;
  m.q_lora_rank = 32;
  m.o_groups = 1;
  m.o_lora_rank = 32;
  m.n_routed_experts = 2;
  m.n_activated_experts = 1;
  m.index_n_heads = 1;
  m.index_head_dim = 32;
  m.window_size = 16;
  m.index_topk = 32;
  m.candidate_topk_blocks = 4;
  m.engram_layer_ids.clear();
  m.engram_num_embeddings.clear();
  m.vision_n_layers = 0;
  m.dspark_block_size = 0;
  m.n_mtp_layers = 0;
  m.dspark_target_layer_ids.clear();
  m.compress_ratios.resize(static_cast<size_t>(m.n_layers));
  return m;
}

std::string Slurp(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
}

TEST(SyntheticModelTest, ReleasedScheduleAtSmallWidthRuns) {
  const std::string dir = ::testing::TempDir() + "/synthetic_a";
  const std::string dir2 = ::testing::TempDir() + "/synthetic_b";
  const ModelConfig config = Mini();
  ASSERT_TRUE(WriteSyntheticCheckpoint(config, dir, 5).ok());
  ASSERT_TRUE(WriteSyntheticCheckpoint(config, dir2, 5).ok());
  EXPECT_EQ(Slurp(dir + "/model.safetensors"), Slurp(dir2 + "/model.safetensors"));
  auto ckpt = LoadedCheckpoint::Open(dir);
  ASSERT_TRUE(ckpt.ok()) << ckpt.status();
  EXPECT_EQ((*ckpt)->config(), config);
  auto prepared = PrepareModel(**ckpt);
  ASSERT_TRUE(prepared.ok());
  ThreadPool pool(1);
  auto cpu = CpuModel::Create(**ckpt, **prepared, {.max_tokens_per_call = 64}, &pool);
  ASSERT_TRUE(cpu.ok()) << cpu.status();
  EXPECT_EQ((*cpu)->schedule().decoder_start_layer, 20);
  std::vector<int32_t> prompt(40);
  for (size_t i = 0; i < prompt.size(); ++i) prompt[i] = static_cast<int32_t>(7 * i % 500);
  auto s = (*cpu)->NewSession(64);
  ForwardOutput out;
  ASSERT_TRUE((*cpu)->Forward(*s, {.tokens = prompt}, &out).ok());
  for (float v : out.logits) ASSERT_TRUE(std::isfinite(v));
  // CED of a prompt no longer than the window is the exact prefill.
  const std::span<const int32_t> head = std::span(prompt).first(16);
  auto a = (*cpu)->NewSession(64), b = (*cpu)->NewSession(64);
  ForwardOutput oa, ob;
  ASSERT_TRUE((*cpu)->Forward(*a, {.tokens = head}, &oa).ok());
  ASSERT_TRUE((*cpu)->Forward(*b, {.tokens = head, .ced = true}, &ob).ok());
  EXPECT_EQ(oa.logits, ob.logits);
  // An Engram config is refused (its tables need the tokenizer's compressed vocabulary).
  auto tiny = LoadModelConfig("tests/conformance/data/v41-tiny/config.json");
  ASSERT_TRUE(tiny.ok());
  EXPECT_EQ(WriteSyntheticCheckpoint(*tiny, dir + "_engram", 1).code(),
            absl::StatusCode::kInvalidArgument);
  std::filesystem::remove_all(dir);
  std::filesystem::remove_all(dir2);
}

}  // namespace
}  // namespace flashserve::model
