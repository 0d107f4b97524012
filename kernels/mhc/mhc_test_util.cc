#include "kernels/mhc/mhc_test_util.h"

#include <cmath>
#include <cstdint>
#include <random>
#include <vector>

#include "common/formats/bf16.h"

namespace flashserve::kernels::mhc_test {

void MixesRef(const uint16_t* x, int64_t dim, const float* fn, float norm_eps, double* mixes,
              double* magnitude) {
  const int64_t width = kMhcStreams * dim;
  double sq = 0;
  for (int64_t k = 0; k < width; ++k) {
    const double v = formats::Bf16BitsToFloat(x[k]);
    sq += v * v;
  }
  const double r = 1.0 / std::sqrt(sq / static_cast<double>(width) + norm_eps);
  for (int m = 0; m < kMhcMixes; ++m) {
    double dot = 0;
    double mag = 0;
    for (int64_t k = 0; k < width; ++k) {
      const double term = formats::Bf16BitsToFloat(x[k]) * static_cast<double>(fn[m * width + k]);
      dot += term;
      mag += std::fabs(term);
    }
    mixes[m] = dot * r;
    if (magnitude != nullptr) magnitude[m] = mag * r;
  }
}

SiteParams RandomSite(int64_t dim, double logit_gain, std::mt19937_64& rng) {
  const int64_t width = kMhcStreams * dim;
  std::normal_distribution<double> normal(0.0, 1.0);
  std::uniform_real_distribution<double> uniform(0.5, 1.4);
  SiteParams s;
  s.fn.resize(static_cast<size_t>(kMhcMixes * width));
  const double fn_sigma = logit_gain / std::sqrt(static_cast<double>(width));
  for (float& v : s.fn) v = static_cast<float>(normal(rng) * fn_sigma);
  for (int m = 0; m < kMhcMixes; ++m)
    s.base.push_back(static_cast<float>(normal(rng) * logit_gain));
  for (int k = 0; k < 3; ++k) s.scale.push_back(static_cast<float>(uniform(rng)));
  return s;
}

std::vector<uint16_t> RandomBf16(int64_t count, double sigma, std::mt19937_64& rng) {
  std::normal_distribution<double> normal(0.0, sigma);
  std::vector<uint16_t> out(static_cast<size_t>(count));
  for (uint16_t& v : out) v = formats::FloatToBf16Bits(static_cast<float>(normal(rng)));
  return out;
}

}  // namespace flashserve::kernels::mhc_test
