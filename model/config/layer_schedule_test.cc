#include "model/config/layer_schedule.h"

#include <string>
#include <vector>

#include "gtest/gtest.h"
#include "model/config/config_parser.h"
#include "model/config/config_test_util.h"

namespace flashserve::model {
namespace {

using testing::ReadJson;
using testing::RepoPath;
using K = LayerKind;

// One row of an expected schedule table; `layers` lists the layer ids the row covers.
struct Row {
  std::vector<int> layers;
  int ratio;
  LayerKind kind;
  int kv_from;    // -1: own window only
  int topk_from;  // -1: none
  bool candidate_source;
  bool masked;
  bool engram;
  bool tap;
};

void ExpectRows(const LayerSchedule& schedule, const std::vector<Row>& rows, int n_backbone,
                int decoder_start) {
  std::vector<bool> seen(schedule.layers.size(), false);
  for (const Row& row : rows) {
    for (int id : row.layers) {
      ASSERT_LT(id, static_cast<int>(schedule.layers.size()));
      const LayerInfo& l = schedule.layers[id];
      seen[id] = true;
      SCOPED_TRACE("layer " + std::to_string(id));
      EXPECT_EQ(l.layer_id, id);
      EXPECT_EQ(l.compress_ratio, row.ratio);
      EXPECT_EQ(LayerKindName(l.kind), LayerKindName(row.kind));
      EXPECT_EQ(l.kv_source_layer, row.kv_from);
      EXPECT_EQ(l.index_source_layer, row.topk_from);
      EXPECT_EQ(l.is_candidate_source, row.candidate_source);
      EXPECT_EQ(l.candidate_masked, row.masked);
      EXPECT_EQ(l.has_engram, row.engram);
      EXPECT_EQ(l.is_dspark_tap, row.tap);
      // Derived flags follow the kind.
      EXPECT_EQ(l.owns_compressor, row.kind == K::kFull);
      EXPECT_EQ(l.owns_indexer, row.kind == K::kFull || row.kind == K::kReindex);
      EXPECT_EQ(l.owns_index_keys, row.kind == K::kFull);
      const bool stage = id >= n_backbone;
      EXPECT_EQ(l.dspark_stage, stage ? id - n_backbone : -1);
      EXPECT_EQ(l.ced_role, stage                ? CedRole::kDrafter
                            : id < decoder_start ? CedRole::kEncoder
                                                 : CedRole::kDecoder);
      EXPECT_EQ(l.rope, row.ratio > 0 ? RopeKind::kYarn : RopeKind::kPlain);
    }
  }
  for (size_t i = 0; i < seen.size(); ++i) EXPECT_TRUE(seen[i]) << "layer " << i << " unchecked";
}

TEST(LayerScheduleTest, TinyFixtureMatchesReadme) {
  auto config = LoadModelConfig(RepoPath(testing::kTinyConfig));
  ASSERT_TRUE(config.ok()) << config.status();
  const LayerSchedule s = BuildSchedule(*config);
  EXPECT_EQ(s.n_backbone_layers, 8);
  EXPECT_EQ(s.n_dspark_stages, 3);
  EXPECT_EQ(s.decoder_start_layer, 4);
  EXPECT_EQ(s.candidate_source_layer, 4);
  ASSERT_EQ(s.layers.size(), 11u);
  // fixture README: "Layer 2: ratio-2 KV source and index source; layer 3 reuses it. Layer 4:
  // ratio-1 KV source, index source and candidate source. Layer 5 reuses 4. Layer 6 re-indexes
  // inside the candidate mask. Layer 7 reuses 6's top-k over layer 4's KV." Engram 1 and 3,
  // DSpark taps 5, 6, 7.
  // clang-format off
  //            layers      r  kind         kv  topk  cand   masked engram tap
  ExpectRows(s,
             {{{0},         0, K::kSwaOnly, -1, -1, false, false, false, false},
              {{1},         0, K::kSwaOnly, -1, -1, false, false, true,  false},
              {{2},         2, K::kFull,     2,  2, false, false, false, false},
              {{3},         2, K::kReuse,    2,  2, false, false, true,  false},
              {{4},         1, K::kFull,     4,  4, true,  false, false, false},
              {{5},         1, K::kReuse,    4,  4, false, false, false, true},
              {{6},         1, K::kReindex,  4,  6, false, true,  false, true},
              {{7},         1, K::kReuse,    4,  6, false, false, false, true},
              {{8, 9, 10},  0, K::kSwaOnly, -1, -1, false, false, false, false}},
             8, 4);
  // clang-format on
  for (int stage = 0; stage < 3; ++stage) {
    EXPECT_EQ(s.layers[8 + stage].n_routed_experts, 4);
    EXPECT_EQ(s.layers[8 + stage].n_activated_experts, 2);
  }
  EXPECT_EQ(s.layers[0].n_routed_experts, 8);
  EXPECT_EQ(s.layers[2].rope_theta, 160000.0);
  EXPECT_EQ(s.layers[0].rope_theta, 10000.0);
  EXPECT_EQ(s.layers[9].rope_theta, 10000.0);
  EXPECT_EQ(s.layers[1].engram_index, 0);
  EXPECT_EQ(s.layers[3].engram_index, 1);
  EXPECT_EQ(s.layers[7].dspark_tap_index, 2);
}

TEST(LayerScheduleTest, ReleasedMatchesSpecTable) {
  auto config = LoadModelConfig(RepoPath(testing::kReleasedFlat));
  ASSERT_TRUE(config.ok()) << config.status();
  const LayerSchedule s = BuildSchedule(*config);
  EXPECT_EQ(s.n_backbone_layers, 40);
  EXPECT_EQ(s.n_dspark_stages, 3);
  EXPECT_EQ(s.decoder_start_layer, 20);  // CED: 0-19 encoder, 20-39 decoder
  ASSERT_EQ(s.layers.size(), 43u);
  // Spec §3, row by row.
  // clang-format off
  //            layers                 r  kind         kv  topk cand   masked engram tap
  ExpectRows(s,
             {{{0},                    0, K::kSwaOnly, -1, -1, false, false, false, false},
              {{1},                    0, K::kSwaOnly, -1, -1, false, false, true,  false},
              {{2},                    2, K::kFull,     2,  2, false, false, false, false},
              {{3, 4, 5, 6, 7},        2, K::kReuse,    2,  2, false, false, false, false},
              {{8},                    2, K::kFull,     8,  8, false, false, false, false},
              {{9, 10, 11, 12, 13},    2, K::kReuse,    8,  8, false, false, false, false},
              {{14},                   2, K::kFull,    14, 14, false, false, true,  false},
              {{15, 16, 17, 18, 19},   2, K::kReuse,   14, 14, false, false, false, false},
              {{20},                   1, K::kFull,    20, 20, true,  false, false, false},
              {{21, 22, 23},           1, K::kReuse,   20, 20, false, false, false, false},
              {{24},                   1, K::kReindex, 20, 24, false, true,  false, false},
              {{25, 26, 27},           1, K::kReuse,   20, 24, false, false, false, false},
              {{28},                   1, K::kReindex, 20, 28, false, true,  false, false},
              {{32},                   1, K::kReindex, 20, 32, false, true,  false, false},
              {{36},                   1, K::kReindex, 20, 36, false, true,  false, false},
              {{29, 30, 31},           1, K::kReuse,   20, 28, false, false, false, false},
              {{33, 34, 35},           1, K::kReuse,   20, 32, false, false, false, false},
              {{37, 38, 39},           1, K::kReuse,   20, 36, false, false, false, true},
              {{40, 41, 42},           0, K::kSwaOnly, -1, -1, false, false, false, false}},
             40, 20);
  // clang-format on
  for (int stage = 0; stage < 3; ++stage) {
    EXPECT_EQ(s.layers[40 + stage].n_routed_experts, 128);  // "128 experts top-3"
    EXPECT_EQ(s.layers[40 + stage].n_activated_experts, 3);
  }
  EXPECT_EQ(s.layers[39].n_routed_experts, 384);
  EXPECT_EQ(s.layers[39].n_activated_experts, 6);
}

TEST(LayerScheduleTest, NamesAreStable) {
  EXPECT_EQ(LayerKindName(K::kSwaOnly), "SwaOnly");
  EXPECT_EQ(LayerKindName(K::kFull), "Full");
  EXPECT_EQ(LayerKindName(K::kReindex), "Reindex");
  EXPECT_EQ(LayerKindName(K::kReuse), "Reuse");
  EXPECT_EQ(RopeKindName(RopeKind::kYarn), "yarn");
  EXPECT_EQ(CedRoleName(CedRole::kDecoder), "decoder");
}

TEST(LayerScheduleTest, DSparkOffAndNoRatioOneSource) {
  nlohmann::json j = ReadJson(RepoPath(testing::kTinyConfig));
  j["dspark_block_size"] = 0;
  // All compressed layers at ratio 2: no ratio-1 KV source, hence no decoder; YaRN off.
  j["compress_ratios"] = {0, 0, 2, 2, 2, 2, 2, 2, 0, 0, 0};
  j["original_seq_len"] = 0;
  auto config = ParseFlatConfig(j.dump());
  ASSERT_TRUE(config.ok()) << config.status();
  const LayerSchedule s = BuildSchedule(*config);
  EXPECT_EQ(s.n_dspark_stages, 0);
  ASSERT_EQ(s.layers.size(), 8u);
  EXPECT_EQ(s.decoder_start_layer, 8);
  for (const LayerInfo& l : s.layers) EXPECT_EQ(l.ced_role, CedRole::kEncoder);
  EXPECT_EQ(s.layers[2].rope, RopeKind::kCompressedPlain);
  EXPECT_EQ(s.layers[2].rope_theta, 160000.0);
  EXPECT_EQ(s.layers[5].kv_source_layer, 4);
}

}  // namespace
}  // namespace flashserve::model
