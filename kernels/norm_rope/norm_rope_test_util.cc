#include "kernels/norm_rope/norm_rope_test_util.h"

#include <bit>
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <fstream>
#include <random>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "common/formats/bf16.h"
#include "nlohmann/json.hpp"

namespace flashserve::kernels::testing {

std::vector<uint16_t> RandomBf16(int64_t n, float scale, uint32_t seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> dist(0.0f, scale);
  std::vector<uint16_t> out(static_cast<size_t>(n));
  for (auto& v : out) {
    v = formats::FloatToBf16Bits(dist(rng));
    if ((v & 0x7FFFu) == 0) v = static_cast<uint16_t>(v | 0x0080u);  // ±smallest normal
  }
  return out;
}

std::vector<float> RandomFloats(int64_t n, float lo, float hi, uint32_t seed) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> dist(lo, hi);
  std::vector<float> out(static_cast<size_t>(n));
  for (auto& v : out) v = dist(rng);
  return out;
}

uint32_t FloatBits(float f) { return std::bit_cast<uint32_t>(f); }
float BitsToFloat(uint32_t bits) { return std::bit_cast<float>(bits); }

int64_t UlpDistance(float a, float b) {
  const int64_t ia = std::bit_cast<int32_t>(a);
  const int64_t ib = std::bit_cast<int32_t>(b);
  return ia > ib ? ia - ib : ib - ia;
}

double Bf16Ulp(double v) {
  const double a = std::fabs(v);
  if (a < 0x1p-126) return 0x1p-133;
  return std::ldexp(1.0, std::ilogb(a) - 7);
}

absl::StatusOr<nlohmann::json> LoadGoldenJson() {
  const char* root = std::getenv("FS_SOURCE_DIR");
  const std::string path =
      std::string(root != nullptr ? root : ".") + "/tests/conformance/data/v41-tiny/golden.json";
  std::ifstream in(path);
  if (!in) return absl::NotFoundError("cannot open " + path);
  nlohmann::json j = nlohmann::json::parse(in, nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded()) return absl::DataLossError("cannot parse " + path);
  return j;
}

}  // namespace flashserve::kernels::testing
