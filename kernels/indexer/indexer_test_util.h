// Test-side references for the indexer kernels, written from spec §4.5 independently of cpu/*.cc:
// straightforward loops (full sorts instead of partial selection, no tiles, no order keys), plus
// the modulo-ties comparison the fixture checks use.
#pragma once

#include <cstdint>
#include <random>
#include <string>
#include <vector>

#include "kernels/indexer/indexer.h"

namespace flashserve::kernels::indexer_test {

inline constexpr uint16_t kNegInf = 0xFF80;
inline constexpr uint16_t kPosInf = 0x7F80;

// Dense inputs of one scoring call (strides = row extents).
struct ScoreCase {
  int64_t tokens = 0, heads = 0, head_dim = 0, width = 0, start_pos = 0, ratio = 1;
  std::vector<uint16_t> q;          // [tokens, heads, head_dim]
  std::vector<uint16_t> k;          // [width, head_dim]
  std::vector<uint16_t> w;          // [tokens, heads]
  std::vector<uint8_t> candidates;  // [tokens, width] or empty
};

// Random bf16 inputs: q, k ~ N(0, 1) (a few exact zeros), w ~ N(0, 0.05) (a few negative), and
// an optional random candidate mask with ~`cand_density` ones.
ScoreCase RandomScoreCase(std::mt19937& rng, int64_t tokens, int64_t heads, int64_t head_dim,
                          int64_t start_pos, int64_t ratio, double cand_density = -1.0);

// Params over `c` writing `scores` (resized to [tokens, width]).
IndexerScoreParams ScoreParamsFor(const ScoreCase& c, std::vector<uint16_t>& scores);

// Scalar transcription of the dtype recipe (spec §4.5 step 4): the bits the kernel must produce.
std::vector<uint16_t> RecipeScores(const ScoreCase& c);
// The same quantity in double with no intermediate rounding (masked entries −inf), and the sum of
// the absolute head terms per entry (the scale of the rounding error).
void DoubleScores(const ScoreCase& c, std::vector<double>& value, std::vector<double>& magnitude);

// Reach of row i: (start_pos + i + 1) / ratio.
int64_t ReachOf(int64_t start_pos, int64_t ratio, int64_t row);

// Top-k by full sort: order positions by (value desc, position asc or desc per `low_pos_wins`),
// take k = min(index_topk, width), sort ascending, map >= reach to −1, others + offset.
std::vector<int32_t> ReferenceTopkRow(const uint16_t* scores, int64_t width, int64_t index_topk,
                                      int64_t reach, int64_t offset, bool low_pos_wins = true);

// Candidate mask of one row by the spec's steps (padding, max, pin, full sort with the lower
// block winning ties, keep > −inf, expand, crop). Also returns the block scores.
std::vector<uint8_t> ReferenceCandidateRow(const uint16_t* scores, int64_t width, int64_t reach,
                                           int64_t block_size, int64_t topk_blocks,
                                           std::vector<float>* block_scores = nullptr);

// True iff the k-th and (k+1)-th largest values of `v` are equal and finite (the golden.json
// definition of a "boundary tie row"; −inf ties only ever pick unreachable or masked entries).
bool HasBoundaryTie(const std::vector<float>& v, int64_t k);

// Compares two top-k rows modulo ties: maps each entry back to its score (an entry of −1 stands
// for a position past the reach, whose score is −inf) and compares the sorted score multisets.
// Returns an empty string when equal, else a description.
std::string CompareModuloTies(const std::vector<int32_t>& a, const std::vector<int32_t>& b,
                              const std::vector<float>& scores, int64_t offset);

// bf16 bits -> float values.
std::vector<float> ToFloats(const uint16_t* bits, int64_t n);

}  // namespace flashserve::kernels::indexer_test
