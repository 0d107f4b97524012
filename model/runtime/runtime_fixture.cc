#include "model/runtime/runtime_fixture.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <fstream>
#include <iterator>
#include <sstream>

#include "common/base/check.h"
#include "common/formats/bf16.h"
#include "model/vit/vl_inputs.h"
#include "nlohmann/json.hpp"

namespace flashserve::model::testing {
namespace {

const nlohmann::json& GoldenJson() {
  static const nlohmann::json* json = [] {
    std::ifstream in(std::string(kTinyDir) + "/golden.json");
    CHECK(in.good()) << "missing golden.json";
    std::stringstream ss;
    ss << in.rdbuf();
    return new nlohmann::json(nlohmann::json::parse(ss.str()));
  }();
  return *json;
}

const safetensors::SafetensorsFile& Open(const std::string& file) {
  auto f = safetensors::SafetensorsFile::Open(std::string(kTinyDir) + "/" + file);
  CHECK(f.ok()) << f.status().ToString();
  return *f->release();
}

}  // namespace

const TinyModel& Tiny() {
  static const TinyModel* tiny = [] {
    auto* t = new TinyModel;
    auto ckpt = LoadedCheckpoint::Open(kTinyDir);
    CHECK(ckpt.ok()) << ckpt.status().ToString();
    t->checkpoint = *std::move(ckpt);
    auto prepared = PrepareModel(*t->checkpoint);
    CHECK(prepared.ok()) << prepared.status().ToString();
    t->prepared = *std::move(prepared);
    t->pool = std::make_unique<ThreadPool>(2);
    return t;
  }();
  return *tiny;
}

std::unique_ptr<CpuModel> MakeTinyModel(kernels::LinearMode mode, int64_t max_tokens,
                                        bool reference_stale_index_keys) {
  const TinyModel& t = Tiny();
  CpuModelOptions options{.max_tokens_per_call = max_tokens,
                          .linear_mode = mode,
                          .reference_stale_index_keys = reference_stale_index_keys,
                          .tokenizer_path = std::string(kTinyDir) + "/tokenizer.json"};
  auto model = CpuModel::Create(*t.checkpoint, *t.prepared, options, t.pool.get());
  CHECK(model.ok()) << model.status().ToString();
  return *std::move(model);
}

GoldenPrompt LoadPrompt(const std::string& name) {
  const nlohmann::json& p = GoldenJson()["prompts"][name];
  GoldenPrompt g;
  g.ids = p["ids"].get<std::vector<int32_t>>();
  g.greedy_tokens = p["greedy_tokens"].get<std::vector<int32_t>>();
  g.spec_out_ids = p["spec_out_ids"].get<std::vector<std::vector<int32_t>>>();
  if (p.contains("image")) {
    g.token_types = p["image"]["token_types"].get<std::vector<int8_t>>();
    g.image_start = p["image"]["start"].get<int64_t>();
  }
  return g;
}

std::vector<int32_t> CpuRunGreedyTokens(const std::string& name) {
  return GoldenJson()["agreement"]["cpu_free_running_vs_golden"]["own_greedy_tokens"][name]
      .get<std::vector<int32_t>>();
}

std::vector<int32_t> VariantOwnKeysGreedyTokens() {
  return GoldenJson()["agreement"]["variant_ownkeys_vs_golden"]["own_greedy_tokens"]
      .get<std::vector<int32_t>>();
}

const safetensors::SafetensorsFile& Golden() {
  static const safetensors::SafetensorsFile& f = Open("golden.safetensors");
  return f;
}
const safetensors::SafetensorsFile& CpuRun() {
  static const safetensors::SafetensorsFile& f = Open("cpu_run.safetensors");
  return f;
}
const safetensors::SafetensorsFile& VariantOwnKeys() {
  static const safetensors::SafetensorsFile& f = Open("variant_ownkeys.safetensors");
  return f;
}

std::vector<float> Floats(const safetensors::SafetensorsFile& f, const std::string& name) {
  auto v = f.Get(name);
  CHECK(v.ok()) << v.status().ToString();
  std::vector<float> out(static_cast<size_t>(v->numel()));
  if (v->dtype == safetensors::DType::kF32) {
    std::memcpy(out.data(), v->data, out.size() * 4);
  } else {
    CHECK(v->dtype == safetensors::DType::kBF16) << name << " is neither F32 nor BF16";
    for (size_t i = 0; i < out.size(); ++i) {
      uint16_t b;
      std::memcpy(&b, v->data + 2 * i, 2);
      out[i] = formats::Bf16BitsToFloat(b);
    }
  }
  return out;
}

std::vector<int64_t> Ints(const safetensors::SafetensorsFile& f, const std::string& name) {
  auto v = f.Get(name);
  CHECK(v.ok()) << v.status().ToString();
  std::vector<int64_t> out(static_cast<size_t>(v->numel()));
  for (size_t i = 0; i < out.size(); ++i) {
    if (v->dtype == safetensors::DType::kI64) {
      std::memcpy(&out[i], v->data + 8 * i, 8);
    } else {
      CHECK(v->dtype == safetensors::DType::kI32) << name << " is neither I64 nor I32";
      int32_t x;
      std::memcpy(&x, v->data + 4 * i, 4);
      out[i] = x;
    }
  }
  return out;
}

void ImageSpanRows(const GoldenPrompt& p, std::vector<uint16_t>* rows,
                   std::vector<uint8_t>* image) {
  const TinyModel& t = Tiny();
  const ModelConfig& c = t.checkpoint->config();
  auto encoder = vit::VisionEncoder::Create(c, *t.checkpoint->weights().vision,
                                            *t.prepared->vision, {}, t.pool.get());
  CHECK(encoder.ok()) << encoder.status().ToString();
  // The prompt as written: the span collapsed back to one placeholder.
  std::vector<int32_t> prompt;
  for (size_t i = 0; i < p.ids.size(); ++i) {
    if (p.token_types.empty() || p.token_types[i] < 0 || p.token_types[i] == 0) {
      prompt.push_back(p.ids[i]);
    }
  }
  std::ifstream in(std::string(kTinyDir) + "/image.png", std::ios::binary);
  CHECK(in.good()) << "missing image.png";
  std::vector<std::vector<uint8_t>> images(1);
  images[0].assign(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
  auto vl = vit::BuildVlInputs(c, *t.checkpoint->weights().vision, **encoder, prompt, images);
  CHECK(vl.ok()) << vl.status().ToString();
  CHECK(vl->token_ids == p.ids) << "expanded prompt differs from the golden ids";
  *rows = std::move(vl->embeddings);
  *image = std::move(vl->image);
}

Compare CompareRows(const float* got, const float* ref, int64_t n) {
  Compare c;
  double num = 0, den = 0;
  for (int64_t i = 0; i < n; ++i) {
    const double d = double{got[i]} - ref[i];
    num += d * d;
    den += double{ref[i]} * ref[i];
    c.max_abs = std::max(c.max_abs, std::fabs(d));
  }
  c.rel_rms = den > 0 ? std::sqrt(num / den) : std::sqrt(num);
  c.argmax_ref = static_cast<int>(std::max_element(ref, ref + n) - ref);
  c.argmax_got = static_cast<int>(std::max_element(got, got + n) - got);
  return c;
}

}  // namespace flashserve::model::testing
