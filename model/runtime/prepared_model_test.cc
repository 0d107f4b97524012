#include "model/runtime/prepared_model.h"

#include <vector>

#include "common/formats/bf16.h"
#include "common/formats/weight_quant.h"
#include "gtest/gtest.h"

namespace flashserve::model {
namespace {

using kernels::WeightFormat;

class PreparedModelTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    auto loaded = LoadedCheckpoint::Open("tests/conformance/data/v41-tiny");
    ASSERT_TRUE(loaded.ok()) << loaded.status();
    checkpoint_ = loaded->release();
    auto prepared = PrepareModel(*checkpoint_);
    ASSERT_TRUE(prepared.ok()) << prepared.status();
    model_ = prepared->release();
  }
  static void TearDownTestSuite() {
    delete model_;
    delete checkpoint_;
  }
  static LoadedCheckpoint* checkpoint_;
  static PreparedModel* model_;
};
LoadedCheckpoint* PreparedModelTest::checkpoint_ = nullptr;
PreparedModel* PreparedModelTest::model_ = nullptr;

TEST_F(PreparedModelTest, FormatsFollowTheReference) {
  const PreparedModel& m = *model_;
  ASSERT_EQ(m.layers.size(), 8u);
  EXPECT_EQ(m.head.format(), WeightFormat::kF32);
  EXPECT_EQ(m.layers[0].attn.wq_a.format(), WeightFormat::kFp8Block32);
  ASSERT_EQ(m.layers[0].attn.wo_a.size(), 2u);  // o_groups
  EXPECT_EQ(m.layers[0].attn.wo_a[1].format(), WeightFormat::kBf16);
  EXPECT_EQ(m.layers[0].attn.wo_a[1].out_features(), 64);  // o_lora_rank
  EXPECT_EQ(m.layers[0].ffn.gate.format(), WeightFormat::kF32);
  EXPECT_EQ(m.layers[0].ffn.experts[3].w2.format(), WeightFormat::kFp4Block32);
  EXPECT_EQ(m.layers[0].ffn.shared.w1.format(), WeightFormat::kFp8Block32);
  // Ratio-2 compressor: fp32 GEMMs; ratio-1: bf16 Linear.
  ASSERT_TRUE(m.layers[2].attn.compressor_wkv && m.layers[2].attn.compressor_wgate);
  EXPECT_EQ(m.layers[2].attn.compressor_wkv->format(), WeightFormat::kF32);
  EXPECT_EQ(m.layers[2].attn.compressor_wgate->format(), WeightFormat::kF32);
  ASSERT_TRUE(m.layers[4].attn.compressor_wkv);
  EXPECT_FALSE(m.layers[4].attn.compressor_wgate);
  EXPECT_EQ(m.layers[4].attn.compressor_wkv->format(), WeightFormat::kBf16);
  // Indexer parts where the schedule says.
  EXPECT_TRUE(m.layers[2].attn.indexer_wk && m.layers[2].attn.indexer_wq_b);
  EXPECT_TRUE(m.layers[6].attn.indexer_wq_b && !m.layers[6].attn.indexer_wk);
  EXPECT_FALSE(m.layers[3].attn.indexer_wq_b);
  EXPECT_TRUE(m.layers[1].engram_wkv && m.layers[3].engram_wkv && !m.layers[2].engram_wkv);
  ASSERT_TRUE(m.dspark && m.vision);
  EXPECT_EQ(m.dspark->stages.size(), 3u);
  EXPECT_EQ(m.dspark->stages[0].ffn.experts.size(), 4u);
  EXPECT_EQ(m.dspark->markov_head.format(), WeightFormat::kF32);
  EXPECT_EQ(m.vision->wqkv.size(), 2u);
  EXPECT_TRUE(m.vision->patch_embed.has_bias());
  EXPECT_GT(m.resident_bytes, 0u);
}

TEST_F(PreparedModelTest, ValuesAreTheCheckpointValues) {
  const ModelWeights& w = checkpoint_->weights();
  // The head's fp32 copy is the exact upcast of the bf16 checkpoint values.
  auto head_bits = w.head.weight.as<uint16_t>();
  const float* head = model_->head.f32();
  ASSERT_NE(head, nullptr);
  for (size_t i = 0; i < head_bits.size(); i += 97) {
    ASSERT_EQ(head[i], formats::Bf16BitsToFloat(head_bits[i])) << i;
  }
  // The FP8 expansion equals the block dequantiser of common/formats.
  const Linear& wq_a = w.layers[5].attn.wq_a;
  std::vector<float> expected(wq_a.out_features * wq_a.in_features);
  ASSERT_TRUE(formats::DequantizeFp8Weight(wq_a.weight.bytes(), wq_a.scale.bytes(),
                                           wq_a.out_features, wq_a.in_features, expected)
                  .ok());
  const float* got = model_->layers[5].attn.wq_a.f32();
  ASSERT_NE(got, nullptr);
  for (size_t i = 0; i < expected.size(); ++i) ASSERT_EQ(got[i], expected[i]) << i;
  // And the FP4 expert expansion equals the FP4 dequantiser.
  const Linear& w2 = w.layers[7].ffn.experts[5].w2;
  std::vector<float> e2(w2.out_features * w2.in_features);
  ASSERT_TRUE(formats::DequantizeFp4Weight(w2.weight.bytes(), w2.scale.bytes(), w2.out_features,
                                           w2.in_features, e2)
                  .ok());
  const float* g2 = model_->layers[7].ffn.experts[5].w2.f32();
  for (size_t i = 0; i < e2.size(); ++i) ASSERT_EQ(g2[i], e2[i]) << i;
}

TEST(PrepareModel, CodesOnlyKeepsNoExpansion) {
  auto loaded = LoadedCheckpoint::Open("tests/conformance/data/v41-tiny");
  ASSERT_TRUE(loaded.ok());
  auto expanded = PrepareModel(**loaded);
  auto compact = PrepareModel(**loaded, {.expand_to_f32 = false});
  ASSERT_TRUE(expanded.ok() && compact.ok());
  EXPECT_FALSE((*compact)->layers[0].attn.wq_a.expanded());
  EXPECT_LT((*compact)->resident_bytes, (*expanded)->resident_bytes);
}

}  // namespace
}  // namespace flashserve::model
