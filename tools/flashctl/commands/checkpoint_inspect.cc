// flashctl checkpoint inspect PATH [--json]
#include <filesystem>
#include <iostream>
#include <memory>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "model/config/config_parser.h"
#include "model/config/kv_sizes.h"
#include "model/config/layer_schedule.h"
#include "model/weights/loader.h"
#include "nlohmann/json.hpp"
#include "tools/flashctl/commands/commands.h"
#include "tools/flashctl/table.h"

namespace flashserve::flashctl {
namespace {

using model::LayerInfo;
using model::LayerKind;
using model::ModelConfig;
using nlohmann::ordered_json;

std::string LayerRef(int layer) { return layer < 0 ? "-" : std::to_string(layer); }

std::string Extras(const LayerInfo& l) {
  std::vector<std::string> extras;
  if (l.is_candidate_source) extras.push_back("candidate source");
  if (l.candidate_masked) extras.push_back("candidate-masked");
  if (l.has_engram) extras.push_back("engram");
  if (l.is_dspark_tap) extras.push_back("dspark tap");
  if (l.dspark_stage >= 0) extras.push_back(absl::StrCat("mtp.", l.dspark_stage));
  return absl::StrJoin(extras, ", ");
}

ordered_json ConfigSummary(const ModelConfig& c, const model::LayerSchedule& s) {
  return ordered_json{
      {"vocab_size", c.vocab_size},
      {"dim", c.dim},
      {"layers", c.n_layers},
      {"dspark_stages", s.n_dspark_stages},
      {"encoder_layers", s.decoder_start_layer},
      {"decoder_layers", s.n_backbone_layers - s.decoder_start_layer},
      {"heads", c.n_heads},
      {"head_dim", c.head_dim},
      {"rope_head_dim", c.rope_head_dim},
      {"q_lora_rank", c.q_lora_rank},
      {"o_groups", c.o_groups},
      {"o_lora_rank", c.o_lora_rank},
      {"window_size", c.window_size},
      {"routed_experts", c.n_routed_experts},
      {"shared_experts", c.n_shared_experts},
      {"activated_experts", c.n_activated_experts},
      {"moe_inter_dim", c.moe_inter_dim},
      {"score_func", std::string(model::ScoreFuncName(c.score_func))},
      {"kv_source_layers", c.kv_source_layers},
      {"index_source_layers", c.index_source_layers},
      {"index",
       absl::StrCat(c.index_n_heads, " heads x ", c.index_head_dim, ", top-", c.index_topk)},
      {"candidate_source_layer", c.candidate_source_layer},
      {"candidate_blocks", absl::StrCat(c.candidate_topk_blocks, " x ", c.candidate_block_size)},
      {"hc_mult", c.hc_mult},
      {"engram_layers", c.engram_layer_ids},
      {"vision_layers", c.vision_n_layers},
      {"weights", std::string(model::WeightDtypeName(c.dtype))},
      {"experts", std::string(model::ExpertDtypeName(c.expert_dtype))},
  };
}

ordered_json Schedule(const model::LayerSchedule& s) {
  ordered_json rows = ordered_json::array();
  for (const LayerInfo& l : s.layers) {
    rows.push_back(ordered_json{
        {"layer", l.layer_id},
        {"role", std::string(model::CedRoleName(l.ced_role))},
        {"ratio", l.compress_ratio},
        {"mode", std::string(model::LayerKindName(l.kind))},
        {"kv_from", l.kv_source_layer},
        {"topk_from", l.index_source_layer},
        {"rope", std::string(model::RopeKindName(l.rope))},
        {"experts", absl::StrCat(l.n_routed_experts, " top-", l.n_activated_experts)},
        {"extras", Extras(l)},
    });
  }
  return rows;
}

ordered_json Params(const ModelConfig& c, const std::vector<model::TensorSpec>& specs) {
  model::ParamSummary s = model::SummarizeParams(specs);
  ordered_json kinds = ordered_json::array();
  for (int k = 0; k < model::kNumParamKinds; ++k) {
    if (s.params[k] == 0 && s.bytes[k] == 0) continue;
    kinds.push_back(
        ordered_json{{"kind", std::string(model::ParamKindName(static_cast<model::ParamKind>(k)))},
                     {"params", s.params[k]},
                     {"bytes", s.bytes[k]}});
  }
  // Parameters one backbone token touches: routed experts scale by top-k / n, Engram tables by
  // the rows a token gathers, and the drafter and vision are not part of a text token's path.
  const auto at = [&](model::ParamKind k) { return s.params[static_cast<int>(k)]; };
  double active =
      static_cast<double>(s.total_params - at(model::ParamKind::kEngramTable) -
                          at(model::ParamKind::kDSpark) - at(model::ParamKind::kVision) -
                          at(model::ParamKind::kAligner) - at(model::ParamKind::kRoutedExperts));
  if (c.n_routed_experts > 0) {
    active += static_cast<double>(at(model::ParamKind::kRoutedExperts)) * c.n_activated_experts /
              c.n_routed_experts;
  }
  return ordered_json{{"tensors", s.num_tensors},
                      {"total_params", s.total_params},
                      {"total_bytes", s.total_bytes},
                      {"active_params_per_token", static_cast<int64_t>(active)},
                      {"by_kind", kinds}};
}

ordered_json KvSizes(const ModelConfig& c) {
  const int64_t block = model::GlobalKvBytesPerBlock(c);
  return ordered_json{
      {"cache_block_tokens", model::kCacheBlockTokens},
      {"global_kv_bytes_per_token", model::GlobalKvBytesPerToken(c)},
      {"global_kv_bytes_per_block", block},
      {"main_kv_row_bytes", formats::MainKvRowBytes(c.head_dim)},
      {"index_k_row_bytes", formats::IndexKRowBytes(c.index_head_dim)},
      {"swa_bytes_per_token_per_layer", model::SwaBytesPerTokenPerLayer(c)},
      {"swa_bytes_per_session", model::SwaBytesPerSession(c)},
      {"dspark_window_bytes_per_session", model::DSparkWindowBytesPerSession(c)},
  };
}

void PrintText(const ordered_json& doc) {
  std::cout << "source: " << doc["source"].get<std::string>() << "\n";
  if (doc.contains("tensors_checked")) {
    std::cout << "checkpoint: " << doc["tensors_checked"].get<int64_t>()
              << " tensors present with the dtypes and shapes the config implies\n";
  }
  std::cout << "\nConfig\n";
  Table summary({"key", "value"});
  for (const auto& [key, value] : doc["config"].items()) {
    summary.AddRow({key, value.is_string() ? value.get<std::string>() : value.dump()});
  }
  std::cout << summary.Render();

  std::cout << "\nLayer schedule\n";
  Table sched(
      {"layer", "role", "ratio", "mode", "kv from", "top-k from", "rope", "experts", "extras"},
      {true, false, true, false, true, true, false, false, false});
  for (const auto& r : doc["schedule"]) {
    sched.AddRow({std::to_string(r["layer"].get<int>()), r["role"].get<std::string>(),
                  std::to_string(r["ratio"].get<int>()), r["mode"].get<std::string>(),
                  LayerRef(r["kv_from"].get<int>()), LayerRef(r["topk_from"].get<int>()),
                  r["rope"].get<std::string>(), r["experts"].get<std::string>(),
                  r["extras"].get<std::string>()});
  }
  std::cout << sched.Render();

  const auto& p = doc["params"];
  std::cout << "\nParameters (" << WithThousands(p["tensors"].get<int64_t>()) << " tensors)\n";
  Table params({"kind", "params", "", "stored bytes", ""}, {false, true, true, true, true});
  for (const auto& k : p["by_kind"]) {
    const auto n = k["params"].get<int64_t>(), b = k["bytes"].get<int64_t>();
    params.AddRow({k["kind"].get<std::string>(), WithThousands(n), HumanCount(n), WithThousands(b),
                   HumanBytes(b)});
  }
  const auto tn = p["total_params"].get<int64_t>(), tb = p["total_bytes"].get<int64_t>();
  params.AddRow({"total", WithThousands(tn), HumanCount(tn), WithThousands(tb), HumanBytes(tb)});
  const auto act = p["active_params_per_token"].get<int64_t>();
  params.AddRow({"active per token", WithThousands(act), HumanCount(act), "", ""});
  std::cout << params.Render();

  const auto& kv = doc["kv"];
  std::cout << "\nKV bytes by tier\n";
  Table kvt({"state", "tier", "bytes", "unit"}, {false, false, true, false});
  kvt.AddRow({"global KV (main + index K)", "HBM while active; SSD cache (days)",
              absl::StrCat(kv["global_kv_bytes_per_token"].get<double>()), "per token"});
  kvt.AddRow({"global KV block", "SSD cache",
              WithThousands(kv["global_kv_bytes_per_block"].get<int64_t>()),
              absl::StrCat("per ", kv["cache_block_tokens"].get<int>(), "-token block")});
  kvt.AddRow({"main KV row", "", std::to_string(kv["main_kv_row_bytes"].get<int64_t>()),
              "per compressed row"});
  kvt.AddRow({"index K row", "", std::to_string(kv["index_k_row_bytes"].get<int64_t>()),
              "per compressed row"});
  kvt.AddRow({"SWA window", "HBM while active; host-DRAM pool (minutes)",
              std::to_string(kv["swa_bytes_per_token_per_layer"].get<int64_t>()),
              "per token per layer"});
  kvt.AddRow({"SWA rings", "SWA snapshot",
              WithThousands(kv["swa_bytes_per_session"].get<int64_t>()), "per session"});
  kvt.AddRow({"DSpark windows", "SWA snapshot",
              WithThousands(kv["dspark_window_bytes_per_session"].get<int64_t>()), "per session"});
  std::cout << kvt.Render();
}

}  // namespace

int RunCheckpointInspect(const CheckpointInspectOptions& options) {
  namespace fs = std::filesystem;
  std::error_code ec;
  const bool is_dir = fs::is_directory(options.path, ec);
  const bool has_weights =
      is_dir && (fs::exists(fs::path(options.path) / "model.safetensors", ec) ||
                 fs::exists(fs::path(options.path) / "model.safetensors.index.json", ec));

  absl::StatusOr<ModelConfig> config = model::LoadModelConfig(options.path);
  if (!config.ok()) {
    std::cerr << "flashctl: " << config.status().message() << "\n";
    return 1;
  }
  ordered_json doc;
  std::vector<model::TensorSpec> specs;
  if (has_weights) {
    auto loaded = model::LoadedCheckpoint::Open(options.path, *config);
    if (!loaded.ok()) {
      std::cerr << "flashctl: " << loaded.status().message() << "\n";
      return 1;
    }
    specs = (*loaded)->specs();
    doc["source"] = absl::StrCat("checkpoint ", options.path);
    doc["tensors_checked"] = specs.size();
  } else {
    specs = model::ExpectedTensors(*config);
    doc["source"] = absl::StrCat("config ", options.path, " (no weights: counts from the config)");
  }
  const model::LayerSchedule schedule = model::BuildSchedule(*config);
  doc["config"] = ConfigSummary(*config, schedule);
  doc["schedule"] = Schedule(schedule);
  doc["params"] = Params(*config, specs);
  doc["kv"] = KvSizes(*config);
  if (options.json) {
    std::cout << doc.dump(2) << "\n";
  } else {
    PrintText(doc);
  }
  return 0;
}

}  // namespace flashserve::flashctl
