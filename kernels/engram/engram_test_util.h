// Test helpers for kernels/engram: random FP8 tables in both layouts, random ids, and the plain
// gather loop of model/runtime/engram_forward.cc (step 1), written as it is there.
#pragma once

#include <cstdint>
#include <vector>

#include "kernels/engram/engram.h"

namespace flashserve::kernels::engram_test {

// A table in the checkpoint layout: codes [rows, dim], scales [rows, dim / 32], dense.
struct Table {
  int64_t rows = 0;
  int64_t dim = 0;
  std::vector<uint8_t> codes;
  std::vector<uint8_t> scales;
};

// Random codes and scales. finite: no NaN code (0x7F / 0xFF) and no NaN scale (255); scale bytes
// then lie in [110, 140] (2^-17 .. 2^13), as trained tables do; otherwise every byte is possible.
Table RandomTable(int64_t rows, int64_t dim, uint64_t seed, bool finite = true);

// The serving layout: rows of dim codes followed by dim / 32 scales (264 B at dim 256).
std::vector<uint8_t> PackedRows(const Table& t);

// ids [tokens, cols] uniform in [lo, hi); the first token's first ids are lo and hi − 1 (the
// table's first and last rows) when tokens · cols >= 2.
std::vector<int64_t> RandomIds(int64_t tokens, int64_t cols, int64_t lo, int64_t hi, uint64_t seed);

// engram_forward.cc's loop: out[t, col·dim + e] = bf16(E4m3ToFloat(code) · Ue8m0ToFloat(scale)),
// ids relative to row 0 of `t` (all in range). Dense output [tokens, cols · dim].
std::vector<uint16_t> ForwardGather(const Table& t, const std::vector<int64_t>& ids, int64_t tokens,
                                    int64_t cols);

// Params over `t` in the checkpoint layout with dense ids and output (pointers as given).
EngramGatherParams DenseParams(const Table& t, int64_t tokens, int64_t cols, const int64_t* ids,
                               const uint8_t* codes, const uint8_t* scales, uint16_t* out);

}  // namespace flashserve::kernels::engram_test
