#include "kernels/indexer/indexer_test_util.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <numeric>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "common/formats/bf16.h"

namespace flashserve::kernels::indexer_test {

using formats::Bf16BitsToFloat;
using formats::FloatToBf16Bits;

namespace {

uint16_t RandomBf16(std::mt19937& rng, double stddev, double zero_prob) {
  std::uniform_real_distribution<double> u(0.0, 1.0);
  if (u(rng) < zero_prob) return 0;
  std::normal_distribution<double> n(0.0, stddev);
  return FloatToBf16Bits(static_cast<float>(n(rng)));
}

float Bf16Round(float x) { return Bf16BitsToFloat(FloatToBf16Bits(x)); }

}  // namespace

int64_t ReachOf(int64_t start_pos, int64_t ratio, int64_t row) {
  return (start_pos + row + 1) / ratio;
}

ScoreCase RandomScoreCase(std::mt19937& rng, int64_t tokens, int64_t heads, int64_t head_dim,
                          int64_t start_pos, int64_t ratio, double cand_density) {
  ScoreCase c;
  c.tokens = tokens;
  c.heads = heads;
  c.head_dim = head_dim;
  c.start_pos = start_pos;
  c.ratio = ratio;
  c.width = (start_pos + tokens) / ratio;
  c.q.resize(tokens * heads * head_dim);
  c.k.resize(c.width * head_dim);
  c.w.resize(tokens * heads);
  for (auto& v : c.q) v = RandomBf16(rng, 1.0, 0.01);
  for (auto& v : c.k) v = RandomBf16(rng, 1.0, 0.01);
  for (auto& v : c.w) v = RandomBf16(rng, 0.05, 0.0);
  if (cand_density >= 0) {
    std::bernoulli_distribution keep(cand_density);
    c.candidates.resize(tokens * c.width);
    for (auto& m : c.candidates) m = keep(rng) ? 1 : 0;
  }
  return c;
}

IndexerScoreParams ScoreParamsFor(const ScoreCase& c, std::vector<uint16_t>& scores) {
  scores.assign(c.tokens * c.width, 0x7FC0);  // NaN: any entry left unwritten shows up
  IndexerScoreParams p;
  p.tokens = c.tokens;
  p.heads = c.heads;
  p.head_dim = c.head_dim;
  p.width = c.width;
  p.start_pos = c.start_pos;
  p.ratio = c.ratio;
  p.q = c.q.data();
  p.q_stride = c.heads * c.head_dim;
  p.k = c.k.data();
  p.k_stride = c.head_dim;
  p.w = c.w.data();
  p.w_stride = c.heads;
  if (!c.candidates.empty()) {
    p.candidates = c.candidates.data();
    p.candidates_stride = c.width;
  }
  p.scores = scores.data();
  p.scores_stride = c.width;
  return p;
}

std::vector<uint16_t> RecipeScores(const ScoreCase& c) {
  std::vector<uint16_t> out(c.tokens * c.width, kNegInf);
  for (int64_t i = 0; i < c.tokens; ++i) {
    const int64_t reach = ReachOf(c.start_pos, c.ratio, i);
    for (int64_t t = 0; t < c.width; ++t) {
      if (t >= reach) continue;
      if (!c.candidates.empty() && c.candidates[i * c.width + t] == 0) continue;
      float head_sum = 0.0f;
      for (int64_t h = 0; h < c.heads; ++h) {
        float dot = 0.0f;
        for (int64_t d = 0; d < c.head_dim; ++d) {
          dot += Bf16BitsToFloat(c.q[(i * c.heads + h) * c.head_dim + d]) *
                 Bf16BitsToFloat(c.k[t * c.head_dim + d]);
        }
        const float relu = std::max(Bf16Round(dot), 0.0f);
        head_sum += Bf16Round(Bf16BitsToFloat(c.w[i * c.heads + h]) * relu);
      }
      out[i * c.width + t] = FloatToBf16Bits(head_sum);
    }
  }
  return out;
}

void DoubleScores(const ScoreCase& c, std::vector<double>& value, std::vector<double>& magnitude) {
  value.assign(c.tokens * c.width, -std::numeric_limits<double>::infinity());
  magnitude.assign(c.tokens * c.width, 0.0);
  for (int64_t i = 0; i < c.tokens; ++i) {
    for (int64_t t = 0; t < ReachOf(c.start_pos, c.ratio, i); ++t) {
      if (!c.candidates.empty() && c.candidates[i * c.width + t] == 0) continue;
      double sum = 0, mag = 0;
      for (int64_t h = 0; h < c.heads; ++h) {
        double dot = 0;
        for (int64_t d = 0; d < c.head_dim; ++d) {
          dot += double{Bf16BitsToFloat(c.q[(i * c.heads + h) * c.head_dim + d])} *
                 double{Bf16BitsToFloat(c.k[t * c.head_dim + d])};
        }
        const double term = double{Bf16BitsToFloat(c.w[i * c.heads + h])} * std::max(dot, 0.0);
        sum += term;
        mag += std::fabs(term);
      }
      value[i * c.width + t] = sum;
      magnitude[i * c.width + t] = mag;
    }
  }
}

std::vector<int32_t> ReferenceTopkRow(const uint16_t* scores, int64_t width, int64_t index_topk,
                                      int64_t reach, int64_t offset, bool low_pos_wins) {
  std::vector<int64_t> order(width);
  std::iota(order.begin(), order.end(), 0);
  std::sort(order.begin(), order.end(), [&](int64_t a, int64_t b) {
    const float va = Bf16BitsToFloat(scores[a]), vb = Bf16BitsToFloat(scores[b]);
    if (va != vb) return va > vb;
    return low_pos_wins ? a < b : a > b;
  });
  const int64_t k = std::min(index_topk, width);
  std::vector<int32_t> out(order.begin(), order.begin() + k);
  std::sort(out.begin(), out.end());
  for (auto& v : out) v = v >= reach ? -1 : static_cast<int32_t>(v + offset);
  return out;
}

std::vector<uint8_t> ReferenceCandidateRow(const uint16_t* scores, int64_t width, int64_t reach,
                                           int64_t block_size, int64_t topk_blocks,
                                           std::vector<float>* block_scores) {
  const float inf = std::numeric_limits<float>::infinity();
  const int64_t n_blocks = (width + block_size - 1) / block_size;
  std::vector<float> padded(n_blocks * block_size, -inf);
  for (int64_t t = 0; t < width; ++t) padded[t] = Bf16BitsToFloat(scores[t]);
  std::vector<float> blocks(n_blocks);
  for (int64_t b = 0; b < n_blocks; ++b) {
    blocks[b] =
        *std::max_element(padded.begin() + b * block_size, padded.begin() + (b + 1) * block_size);
  }
  blocks[(reach - 1) / block_size] = inf;
  std::vector<int64_t> order(n_blocks);
  std::iota(order.begin(), order.end(), 0);
  std::stable_sort(order.begin(), order.end(),
                   [&](int64_t a, int64_t b) { return blocks[a] > blocks[b]; });
  std::vector<uint8_t> padded_mask(n_blocks * block_size, 0);
  for (int64_t i = 0; i < std::min(topk_blocks, n_blocks); ++i) {
    const int64_t b = order[i];
    if (!(blocks[b] > -inf)) continue;
    std::fill(padded_mask.begin() + b * block_size, padded_mask.begin() + (b + 1) * block_size, 1);
  }
  if (block_scores != nullptr) *block_scores = blocks;
  return std::vector<uint8_t>(padded_mask.begin(), padded_mask.begin() + width);
}

bool HasBoundaryTie(const std::vector<float>& v, int64_t k) {
  if (k <= 0 || k >= static_cast<int64_t>(v.size())) return false;
  std::vector<float> s = v;
  std::sort(s.begin(), s.end(), std::greater<float>());
  return s[k - 1] == s[k] && std::isfinite(s[k - 1]);
}

std::string CompareModuloTies(const std::vector<int32_t>& a, const std::vector<int32_t>& b,
                              const std::vector<float>& scores, int64_t offset) {
  auto values = [&](const std::vector<int32_t>& idx) {
    std::vector<float> v;
    for (int32_t e : idx) {
      v.push_back(e < 0 ? -std::numeric_limits<float>::infinity()
                        : scores[static_cast<size_t>(e - offset)]);
    }
    std::sort(v.begin(), v.end());
    return v;
  };
  if (a.size() != b.size()) return absl::StrCat("sizes ", a.size(), " vs ", b.size());
  if (values(a) == values(b)) return "";
  return absl::StrCat("[", absl::StrJoin(a, ","), "] vs [", absl::StrJoin(b, ","), "]");
}

std::vector<float> ToFloats(const uint16_t* bits, int64_t n) {
  std::vector<float> out(n);
  for (int64_t i = 0; i < n; ++i) out[i] = Bf16BitsToFloat(bits[i]);
  return out;
}

}  // namespace flashserve::kernels::indexer_test
