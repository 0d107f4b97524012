#include "model/vit/vit_test_util.h"

#include <cmath>
#include <memory>

#include "absl/strings/str_format.h"
#include "common/base/check.h"
#include "common/formats/bf16.h"
#include "common/safetensors/safetensors.h"

namespace flashserve::model::vit::testing {

const LoadedCheckpoint& TinyCheckpoint() {
  static const LoadedCheckpoint* checkpoint = [] {
    auto loaded = LoadedCheckpoint::Open(kFixtureDir);
    CHECK(loaded.ok()) << loaded.status();
    return loaded->release();
  }();
  return *checkpoint;
}

const PreparedModel& TinyPrepared() {
  static const PreparedModel* prepared = [] {
    auto model = PrepareModel(TinyCheckpoint());
    CHECK(model.ok()) << model.status();
    return model->release();
  }();
  return *prepared;
}

std::vector<uint16_t> ReadBf16ValuedTensor(const std::string& file, const std::string& name,
                                           std::vector<int64_t> shape) {
  auto f = safetensors::SafetensorsFile::Open(std::string(kFixtureDir) + "/" + file);
  CHECK(f.ok()) << f.status();
  auto view = (*f)->GetChecked(name, safetensors::DType::kF32, shape);
  CHECK(view.ok()) << view.status();
  std::vector<uint16_t> bits;
  for (float v : view->as<float>()) {
    bits.push_back(formats::FloatToBf16Bits(v));
    CHECK(formats::Bf16BitsToFloat(bits.back()) == v) << name << " holds a non-bf16 value " << v;
  }
  return bits;
}

Agreement Compare(std::span<const uint16_t> got, std::span<const uint16_t> want) {
  CHECK(got.size() == want.size());
  Agreement a;
  double err2 = 0, ref2 = 0;
  for (size_t i = 0; i < got.size(); ++i) {
    const double g = formats::Bf16BitsToFloat(got[i]);
    const double w = formats::Bf16BitsToFloat(want[i]);
    err2 += (g - w) * (g - w);
    ref2 += w * w;
    a.max_abs = std::max(a.max_abs, std::abs(g - w));
    a.mismatches += got[i] != want[i];
  }
  a.rel_rms = ref2 > 0 ? std::sqrt(err2 / ref2) : std::sqrt(err2);
  a.count = static_cast<int64_t>(got.size());
  return a;
}

std::string ToString(const Agreement& a) {
  return absl::StrFormat("rel-RMS %.3e, max abs %.4g, %d/%d elements differ", a.rel_rms, a.max_abs,
                         a.mismatches, a.count);
}

}  // namespace flashserve::model::vit::testing
