// Shared helpers of the indexer GPU tests (indexer_gpu_test.cc: the scorers and validation;
// indexer_select_gpu_test.cc: top-k and candidate blocks): device copies, poison values, and the
// top-k check both use. Test-only.
#pragma once

#include <algorithm>
#include <cstdint>
#include <vector>

#include "common/base/thread_pool.h"
#include "kernels/common/gpu_test_util.h"

namespace flashserve::kernels::indexer_gpu_test {

inline constexpr uint16_t kPoison16 = 0x7FC1;  // a NaN no kernel produces
inline constexpr int32_t kPoison32 = -12345;
inline constexpr uint8_t kPoison8 = 0xA5;

inline ThreadPool& Pool() {
  static ThreadPool* pool = new ThreadPool(4);
  return *pool;
}

// A launch of `p` with cuda_i8_lean (the int8 scorer's lean kernel and its patch) into a fresh
// buffer of n poisoned scores, through `launch` (LaunchIndexerScore or LaunchIndexerScoreBatch):
// its scores, fallback count (cuda_rechecks) and deferred warp tiles (cuda_i8_deferred).
struct LeanRun {
  std::vector<uint16_t> scores;
  int64_t fallbacks = 0, deferred = 0;
};
template <typename Params, typename Launch>
LeanRun RunLean(Params p, size_t n, Launch launch) {
  DeviceBuffer ds = ToDevice(std::vector<uint16_t>(n, kPoison16));
  DeviceBuffer dc = ToDevice(std::vector<unsigned long long>{0, 0});
  p.scores = ds.get<uint16_t>();
  p.cuda_i8_lean = true;
  p.cuda_rechecks = dc.get<unsigned long long>();
  p.cuda_i8_deferred = dc.get<unsigned long long>() + 1;
  EXPECT_TRUE(launch(p, nullptr).ok());
  const std::vector<unsigned long long> counts = ToHost<unsigned long long>(dc, 2);
  return {ToHost<uint16_t>(ds, n), static_cast<int64_t>(counts[0]),
          static_cast<int64_t>(counts[1])};
}

// Dense rows [tokens, width] copied into rows of `stride` >= width (padding: −inf bits).
std::vector<uint16_t> Strided(const std::vector<uint16_t>& dense, int64_t tokens, int64_t width,
                              int64_t stride);
// The GPU workspace of a call, filled with garbage (the kernels must not rely on its contents).
DeviceBuffer GarbageWorkspace(size_t bytes);

// Top-k of dense scores [tokens, width] on both sides (indices rows padded by 2, scores rows by
// score_pad: a pad that is not a multiple of 8 takes the kernels' scalar-load path); identical.
// These three are defined in indexer_select_gpu_test.cc.
void CheckTopk(const std::vector<uint16_t>& scores, int64_t tokens, int64_t width,
               int64_t start_pos, int64_t ratio, int64_t index_topk, int64_t offset,
               int64_t score_pad = 0);

}  // namespace flashserve::kernels::indexer_gpu_test
