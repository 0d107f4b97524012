#include "model/runtime/prepared_model.h"

#include <cstring>
#include <string>

#include "absl/strings/str_cat.h"
#include "common/base/status_macros.h"
#include "common/base/strings.h"
#include "common/formats/bf16.h"

namespace flashserve::model {
namespace {

using kernels::LinearWeightView;
using kernels::WeightFormat;

// How the reference computes a Linear whose checkpoint weight is bf16.
enum class Bf16As { kBf16Gemm, kF32Gemm };

class Preparer {
 public:
  explicit Preparer(const PrepareModelOptions& options) : options_(options) {}

  absl::StatusOr<PreparedLinear> Prepare(const Linear& linear, Bf16As bf16_as = Bf16As::kBf16Gemm) {
    LinearWeightView view{.out_features = linear.out_features,
                          .in_features = linear.in_features,
                          .weight = linear.weight.bytes(),
                          .scale = linear.scale.bytes()};
    if (linear.bias) view.bias = linear.bias->bytes();
    std::vector<float> upcast;
    switch (linear.format) {
      case LinearFormat::kFp8Block32: view.format = WeightFormat::kFp8Block32; break;
      case LinearFormat::kFp4Block32: view.format = WeightFormat::kFp4Block32; break;
      case LinearFormat::kBf16:
        if (bf16_as == Bf16As::kBf16Gemm) {
          view.format = WeightFormat::kBf16;
        } else {
          // The reference holds an fp32 copy of the bf16 values (exact upcast).
          const auto bits = linear.weight.as<uint16_t>();
          upcast.resize(bits.size());
          for (size_t i = 0; i < bits.size(); ++i) upcast[i] = formats::Bf16BitsToFloat(bits[i]);
          view.format = WeightFormat::kF32;
          view.weight = {reinterpret_cast<const uint8_t*>(upcast.data()),
                         upcast.size() * sizeof(float)};
        }
        break;
    }
    absl::StatusOr<PreparedLinear> prepared = PreparedLinear::Create(
        view, kernels::PrepareLinearOptions{.expand_to_f32 = options_.expand_to_f32});
    if (!prepared.ok()) {
      return absl::Status(prepared.status().code(),
                          absl::StrCat(ToAbsl(linear.weight.name), ": ", prepared.status().message()));
    }
    resident_bytes_ += prepared->resident_bytes();
    return prepared;
  }

  // A bf16 Linear whose rows split into `groups` equal Linears (the grouped output projection).
  absl::StatusOr<std::vector<PreparedLinear>> PrepareGroups(const Linear& linear, int groups) {
    if (linear.format != LinearFormat::kBf16 || groups < 1 || linear.out_features % groups != 0) {
      return absl::InvalidArgumentError(
          absl::StrCat(ToAbsl(linear.weight.name), ": cannot split ", linear.out_features,
                       " bf16 rows into ", groups, " groups"));
    }
    const int64_t rows = linear.out_features / groups;
    const size_t group_bytes = static_cast<size_t>(rows * linear.in_features) * 2;
    std::vector<PreparedLinear> out;
    for (int g = 0; g < groups; ++g) {
      LinearWeightView view{.format = WeightFormat::kBf16,
                            .out_features = rows,
                            .in_features = linear.in_features,
                            .weight = linear.weight.bytes().subspan(g * group_bytes, group_bytes)};
      absl::StatusOr<PreparedLinear> prepared = PreparedLinear::Create(
          view, kernels::PrepareLinearOptions{.expand_to_f32 = options_.expand_to_f32});
      if (!prepared.ok()) {
        return absl::Status(prepared.status().code(),
                            absl::StrCat(ToAbsl(linear.weight.name), " group ", g, ": ",
                                         prepared.status().message()));
      }
      resident_bytes_ += prepared->resident_bytes();
      out.push_back(*std::move(prepared));
    }
    return out;
  }

  absl::StatusOr<PreparedExpert> Expert(const ExpertWeights& e) {
    ASSIGN_OR_RETURN(PreparedLinear w1, Prepare(e.w1));
    ASSIGN_OR_RETURN(PreparedLinear w2, Prepare(e.w2));
    ASSIGN_OR_RETURN(PreparedLinear w3, Prepare(e.w3));
    return PreparedExpert{std::move(w1), std::move(w2), std::move(w3)};
  }

  absl::StatusOr<PreparedBlock> Block(const BlockWeights& b, int compress_ratio, int o_groups) {
    const AttentionWeights& a = b.attn;
    ASSIGN_OR_RETURN(PreparedLinear wq_a, Prepare(a.wq_a));
    ASSIGN_OR_RETURN(PreparedLinear wq_b, Prepare(a.wq_b));
    ASSIGN_OR_RETURN(PreparedLinear wkv, Prepare(a.wkv));
    ASSIGN_OR_RETURN(PreparedLinear wo_b, Prepare(a.wo_b));
    ASSIGN_OR_RETURN(std::vector<PreparedLinear> wo_a, PrepareGroups(a.wo_a, o_groups));
    PreparedAttention attn{std::move(wq_a), std::move(wq_b), std::move(wkv), std::move(wo_b),
                           std::move(wo_a)};
    if (a.compressor) {
      // Ratio-2 compressors run true fp32 GEMMs on fp32 copies; ratio 1 is a plain bf16 Linear.
      const Bf16As as = compress_ratio > 1 ? Bf16As::kF32Gemm : Bf16As::kBf16Gemm;
      ASSIGN_OR_RETURN(attn.compressor_wkv, Prepare(a.compressor->wkv, as));
      if (a.compressor->wgate) {
        ASSIGN_OR_RETURN(attn.compressor_wgate, Prepare(*a.compressor->wgate, Bf16As::kF32Gemm));
      }
    }
    if (a.indexer) {
      if (a.indexer->wq_b) {
        ASSIGN_OR_RETURN(attn.indexer_wq_b, Prepare(*a.indexer->wq_b));
      }
      if (a.indexer->weights_proj) {
        ASSIGN_OR_RETURN(attn.indexer_weights_proj, Prepare(*a.indexer->weights_proj));
      }
      if (a.indexer->wk) {
        ASSIGN_OR_RETURN(attn.indexer_wk, Prepare(*a.indexer->wk));
      }
    }
    ASSIGN_OR_RETURN(PreparedLinear gate, Prepare(b.ffn.gate, Bf16As::kF32Gemm));
    PreparedMoe moe{.gate = std::move(gate)};
    moe.experts.reserve(b.ffn.experts.size());
    for (const ExpertWeights& e : b.ffn.experts) {
      ASSIGN_OR_RETURN(PreparedExpert expert, Expert(e));
      moe.experts.push_back(std::move(expert));
    }
    ASSIGN_OR_RETURN(moe.shared, Expert(b.ffn.shared));
    PreparedBlock block{std::move(attn), std::move(moe)};
    if (b.engram) {
      ASSIGN_OR_RETURN(block.engram_wkv, Prepare(b.engram->wkv));
    }
    return block;
  }

  size_t resident_bytes() const { return resident_bytes_; }

 private:
  PrepareModelOptions options_;
  size_t resident_bytes_ = 0;
};

}  // namespace

absl::StatusOr<std::unique_ptr<PreparedModel>> PrepareModel(const LoadedCheckpoint& checkpoint,
                                                            const PrepareModelOptions& options) {
  const ModelWeights& w = checkpoint.weights();
  const LayerSchedule& schedule = checkpoint.schedule();
  Preparer p(options);
  ASSIGN_OR_RETURN(PreparedLinear head, p.Prepare(w.head, Bf16As::kF32Gemm));
  auto model = std::make_unique<PreparedModel>(PreparedModel{.head = std::move(head)});
  model->layers.reserve(w.layers.size());
  for (size_t i = 0; i < w.layers.size(); ++i) {
    ASSIGN_OR_RETURN(PreparedBlock block, p.Block(w.layers[i], schedule.layers[i].compress_ratio,
                                                  checkpoint.config().o_groups));
    model->layers.push_back(std::move(block));
  }
  if (w.dspark) {
    ASSIGN_OR_RETURN(PreparedLinear main_proj, p.Prepare(w.dspark->main_proj));
    ASSIGN_OR_RETURN(PreparedLinear markov, p.Prepare(w.dspark->markov_head, Bf16As::kF32Gemm));
    ASSIGN_OR_RETURN(PreparedLinear conf, p.Prepare(w.dspark->confidence_proj, Bf16As::kF32Gemm));
    PreparedDSpark ds{.main_proj = std::move(main_proj),
                      .markov_head = std::move(markov),
                      .confidence_proj = std::move(conf)};
    for (const BlockWeights& stage : w.dspark->stages) {
      ASSIGN_OR_RETURN(PreparedBlock block, p.Block(stage, /*compress_ratio=*/0, checkpoint.config().o_groups));
      ds.stages.push_back(std::move(block));
    }
    model->dspark = std::move(ds);
  }
  if (w.vision) {
    const VisionWeights& v = *w.vision;
    ASSIGN_OR_RETURN(PreparedLinear patch_embed, p.Prepare(v.patch_embed));
    ASSIGN_OR_RETURN(PreparedLinear a1, p.Prepare(v.aligner_w1));
    ASSIGN_OR_RETURN(PreparedLinear a2, p.Prepare(v.aligner_w2));
    PreparedVision pv{.patch_embed = std::move(patch_embed),
                      .aligner_w1 = std::move(a1),
                      .aligner_w2 = std::move(a2)};
    for (const VisionBlockWeights& b : v.blocks) {
      ASSIGN_OR_RETURN(PreparedLinear wqkv, p.Prepare(b.wqkv));
      ASSIGN_OR_RETURN(PreparedLinear wo, p.Prepare(b.wo));
      ASSIGN_OR_RETURN(PreparedLinear w1, p.Prepare(b.w1));
      ASSIGN_OR_RETURN(PreparedLinear w2, p.Prepare(b.w2));
      pv.wqkv.push_back(std::move(wqkv));
      pv.wo.push_back(std::move(wo));
      pv.w1.push_back(std::move(w1));
      pv.w2.push_back(std::move(w2));
    }
    model->vision = std::move(pv);
  }
  model->resident_bytes = p.resident_bytes();
  return model;
}

}  // namespace flashserve::model
