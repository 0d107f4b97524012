// The GPU compressor against the CPU bodies, bit for bit:
// - LaunchCompressProjected vs CompressProjectedCpu at the released dims (C = 512, ratio 2 and 1,
//   fp32 and bf16 ratio-1 input), other ratios (3, 4, 16) and widths (48, 100: odd strides; 2000:
//   the block-per-row path), streamed over many call splits (decode-style single tokens, odd
//   chunks, n−1 / 1) so that the open group crosses calls in device memory; the final device
//   state equals the CPU state; a state uploaded mid-group resumes exactly; projections spanning
//   a huge dynamic range (the sequential norm-sum path); and end to end from real GEMMs against
//   CompressCpu itself.
// - LaunchFinalizeCompressedKv vs FinalizeCompressedKvCpu: YaRN table at rd = 64, group positions
//   up to 2^20 · ratio, serving rows, in place, padded strides, a single row.
// - Validation: the launchers reject bad params with the CPU's messages and leave the state as is.
// Outputs start poisoned, so a value a kernel fails to write is a mismatch.
#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <limits>
#include <memory>
#include <random>
#include <thread>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/match.h"
#include "absl/strings/str_format.h"
#include "common/base/thread_pool.h"
#include "common/formats/bf16.h"
#include "common/formats/kv_row.h"
#include "gtest/gtest.h"
#include "kernels/common/gpu_test_util.h"
#include "kernels/compressor/compressor.h"
#include "kernels/compressor/compressor_test_util.h"
#include "kernels/compressor/cuda/exp_rn_probe.h"
#include "kernels/compressor/exp_rn.h"
#include "kernels/norm_rope/rope_table.h"

namespace flashserve::kernels {
namespace {

using compressor_test::Layer;
using compressor_test::Projections;
using compressor_test::RandomBf16;
using compressor_test::RandomLayer;
using compressor_test::RandomProjections;
using compressor_test::Rows;
using compressor_test::RunChunks;
using compressor_test::RunProjectedChunks;

constexpr uint16_t kPoison = 0x7FC1;  // a NaN no kernel produces
constexpr int64_t kLatentPad = 3;     // latent rows padded by this many elements

ThreadPool& Pool() {
  static ThreadPool* pool = new ThreadPool(4);
  return *pool;
}

// A device state with its memory.
struct DeviceState {
  DeviceState(int64_t ratio, int64_t c)
      : memory(static_cast<size_t>(std::max<int64_t>(CompressorDeviceStateBytes(ratio, c), 16))) {
    state = MakeCompressorDeviceState(ratio, c, memory.get(), memory.bytes()).value();
  }
  DeviceBuffer memory;
  CompressorDeviceState state;
};

// The projections on the device: fp32 kv and score rows padded to `stride` elements (odd strides
// take the unaligned path), the bf16 kv dense.
struct DeviceProjections {
  DeviceProjections(const Projections& pr, int64_t stride) : stride(stride) {
    std::vector<float> kv(static_cast<size_t>(std::max<int64_t>(pr.n, 1) * stride), 1e30f);
    std::vector<float> score(kv.size(), -1e30f);
    for (int64_t t = 0; t < pr.n; ++t) {
      std::copy_n(pr.kv.begin() + t * pr.c, pr.c, kv.begin() + t * stride);
      if (!pr.score.empty())
        std::copy_n(pr.score.begin() + t * pr.c, pr.c, score.begin() + t * stride);
    }
    dkv = ToDevice(kv);
    dscore = ToDevice(score);
    dkv_bf16 = ToDevice(pr.kv_bf16);
  }
  int64_t stride;
  DeviceBuffer dkv, dscore, dkv_bf16;
};

// LaunchCompressProjected over pr split into `sizes`, from `start_pos` with `ds` (fresh when
// null). Each call writes into a poisoned, padded latent buffer; the whole buffer (padding and
// rows past the emitted count included) is checked to be untouched beyond the emitted rows.
Rows RunGpuChunks(const Projections& pr, const std::vector<uint16_t>& norm,
                  const std::vector<int64_t>& sizes, bool bf16 = false, int64_t start_pos = 0,
                  DeviceState* ds = nullptr, int64_t stride = 0, int64_t latent_pad = kLatentPad) {
  DeviceState fresh(pr.ratio, pr.c);
  DeviceState* st = ds != nullptr ? ds : &fresh;
  const DeviceProjections dp(pr, stride > 0 ? stride : pr.c);
  const DeviceBuffer dnorm = ToDevice(norm);
  const int64_t max_s = *std::max_element(sizes.begin(), sizes.end());
  const int64_t cap = std::max<int64_t>(CompressMaxGroups(pr.ratio, max_s), 1);
  const int64_t ls = pr.c + latent_pad;
  Rows out;
  int64_t done = 0;
  for (int64_t s : sizes) {
    const std::vector<uint16_t> poison(static_cast<size_t>(cap * ls), kPoison);
    DeviceBuffer dlat = ToDevice(poison);
    DeviceBuffer didx = ToDevice(std::vector<int64_t>(static_cast<size_t>(cap), -7));
    int64_t emitted = -1;
    CompressProjectedParams p;
    p.ratio = pr.ratio;
    p.channels = pr.c;
    p.start_pos = start_pos + done;
    p.tokens = s;
    if (bf16) {
      p.kv_bf16 = dp.dkv_bf16.get<uint16_t>() + done * pr.c;
      p.kv_stride = pr.c;
    } else {
      p.kv = dp.dkv.get<float>() + done * dp.stride;
      p.kv_stride = dp.stride;
    }
    if (pr.ratio > 1) {
      p.score = dp.dscore.get<float>() + done * dp.stride;
      p.score_stride = dp.stride;
    }
    p.norm_weight = dnorm.get<uint16_t>();
    p.latent = dlat.get<uint16_t>();
    p.latent_stride = ls;
    p.latent_capacity = cap;
    p.group_index = didx.get<int64_t>();
    p.groups_emitted = &emitted;
    const absl::Status status = LaunchCompressProjected(p, &st->state, nullptr);
    EXPECT_TRUE(status.ok()) << status;
    if (!status.ok()) return out;
    const std::vector<uint16_t> lat = ToHost<uint16_t>(dlat, poison.size());
    const std::vector<int64_t> idx = ToHost<int64_t>(didx, static_cast<size_t>(cap));
    for (int64_t g = 0; g < cap; ++g) {
      for (int64_t c = 0; c < ls; ++c) {
        const uint16_t v = lat[g * ls + c];
        if (g < emitted && c < pr.c) {
          out.latent.push_back(v);
        } else if (v != kPoison) {
          ADD_FAILURE() << "latent row " << g << " element " << c << " written past the output";
          return out;
        }
      }
      if (g < emitted) out.index.push_back(idx[g]);
    }
    done += s;
  }
  return out;
}

// Differing bf16 values (and the length difference); `nan_equal`: any two NaNs count as equal.
int64_t Mismatches(const std::vector<uint16_t>& got, const std::vector<uint16_t>& want,
                   bool nan_equal = false) {
  const auto is_nan = [](uint16_t v) { return (v & 0x7FFFu) > 0x7F80u; };
  int64_t bad = 0;
  for (size_t i = 0; i < std::min(got.size(), want.size()); ++i) {
    bad += got[i] != want[i] && !(nan_equal && is_nan(got[i]) && is_nan(want[i]));
  }
  return bad + static_cast<int64_t>(std::max(got.size(), want.size()) -
                                    std::min(got.size(), want.size()));
}

std::vector<std::vector<int64_t>> Splits(int64_t n) {
  std::vector<std::vector<int64_t>> out;
  auto fill = [&](std::vector<int64_t> pattern) {
    std::vector<int64_t> v;
    int64_t done = 0;
    for (size_t i = 0; done < n; ++i) {
      const int64_t s = std::min(pattern[i % pattern.size()], n - done);
      v.push_back(s);
      done += s;
    }
    out.push_back(v);
  };
  fill({n});
  fill({1});
  fill({3, 5, 7});
  fill({2, 1, 1});
  fill({n - 1, 1});
  fill({1, n - 1});
  return out;
}

// Streams pr over every split on the GPU and compares with the CPU's one-shot rows and the CPU
// state after each split. `latent_pad`: the latent rows' padding (3 leaves them 2-byte aligned;
// 4 makes them 8-byte aligned, which ratio 2's vector path needs along with 16-byte fp32 rows).
void CheckStreams(const Projections& pr, bool bf16, int64_t stride = 0,
                  int64_t latent_pad = kLatentPad, bool nan_equal = false) {
  std::mt19937 rng(static_cast<uint32_t>(pr.c + pr.ratio));
  const std::vector<uint16_t> norm = RandomBf16(pr.c, 0.5f, 1.5f, rng);
  CompressorState cpu_state = MakeCompressorState(pr.ratio, pr.c).value();
  const Rows want = RunProjectedChunks(pr, norm.data(), {pr.n}, bf16, 0, &cpu_state, &Pool());
  for (const auto& split : Splits(pr.n)) {
    SCOPED_TRACE(absl::StrFormat("ratio %d C %d n %d bf16 %d stride %d pad %d: %d calls, first %d",
                                 pr.ratio, pr.c, pr.n, bf16, stride, latent_pad, split.size(),
                                 split[0]));
    DeviceState ds(pr.ratio, pr.c);
    const Rows got = RunGpuChunks(pr, norm, split, bf16, 0, &ds, stride, latent_pad);
    EXPECT_EQ(got.index, want.index);
    const int64_t bad = Mismatches(got.latent, want.latent, nan_equal);
    EXPECT_EQ(bad, 0);
    if (split.size() == 1) {
      std::printf("  compress r %ld C %ld tokens %ld%s: %zu groups, %ld mismatches\n",
                  static_cast<long>(pr.ratio), static_cast<long>(pr.c), static_cast<long>(pr.n),
                  bf16 ? " (bf16 kv)" : "", got.index.size(), static_cast<long>(bad));
    }
    CompressorState back = MakeCompressorState(pr.ratio, pr.c).value();
    ASSERT_TRUE(DownloadCompressorState(ds.state, &back, nullptr).ok());
    EXPECT_EQ(back.pending, cpu_state.pending);
    EXPECT_EQ(back.next_pos, cpu_state.next_pos);
    for (int64_t i = 0; i < back.pending * pr.c; ++i) {
      ASSERT_EQ(back.kv[i], cpu_state.kv[i]) << i;
      ASSERT_EQ(back.score[i], cpu_state.score[i]) << i;
    }
  }
}

// The softmax's exp: the device's ExpRn (CUDA double exp + the hard-case table) equals the
// host's (glibc double exp + the same table) for every fp32 bit pattern, NaNs included.
TEST(CompressorGpu, ExpRnOnTheDeviceEqualsTheHostForAllFloats) {
  FS_SKIP_WITHOUT_GPU();
  constexpr int64_t kChunk = int64_t{1} << 26;
  std::vector<uint32_t> dev(static_cast<size_t>(kChunk));
  ThreadPool pool(std::max(1u, std::thread::hardware_concurrency()));
  int64_t bad = 0;
  uint32_t first_bad = 0;
  for (int64_t first = 0; first < (int64_t{1} << 32); first += kChunk) {
    compressor_testing::ExpRnOnDevice(static_cast<uint32_t>(first), kChunk, dev.data());
    std::atomic<int64_t> chunk_bad{0};
    pool.ParallelFor(static_cast<size_t>(kChunk), size_t{1} << 20, [&](size_t b, size_t e) {
      int64_t local = 0;
      for (size_t i = b; i < e; ++i) {
        const auto bits = static_cast<uint32_t>(first + static_cast<int64_t>(i));
        const uint32_t host =
            compressor_math::F32ToBits(compressor_math::ExpRn(compressor_math::BitsToF32(bits)));
        local += host != dev[i];
      }
      chunk_bad += local;
    });
    bad += chunk_bad.load();
    if (bad > 0 && first_bad == 0) {
      for (int64_t i = 0; i < kChunk; ++i) {
        const auto bits = static_cast<uint32_t>(first + i);
        if (compressor_math::F32ToBits(compressor_math::ExpRn(compressor_math::BitsToF32(bits))) !=
            dev[static_cast<size_t>(i)]) {
          first_bad = bits;
          break;
        }
      }
    }
  }
  std::printf("  ExpRn device vs host over 2^32 inputs: %ld mismatches (first x bits 0x%08x)\n",
              static_cast<long>(bad), first_bad);
  EXPECT_EQ(bad, 0);
}

// The pooling's fast route (ExpRnFast: a short double exp and an integer window around fp32
// rounding boundaries) gives ExpRn's value wherever it accepts an input, over every fp32 bit
// pattern, and accepts all but a sliver of |x| < 86 (about 2.2e9 patterns; the window around
// boundaries declines 120 of them).
TEST(CompressorGpu, ExpRnFastEqualsExpRnWhereverItAccepts) {
  FS_SKIP_WITHOUT_GPU();
  const compressor_testing::ExpRnFastReport r = compressor_testing::ExpRnFastOnDeviceAllFloats();
  std::printf("  ExpRnFast over 2^32 inputs: %ld accepted, %ld differ from ExpRn (first 0x%08x)\n",
              static_cast<long>(r.accepted), static_cast<long>(r.mismatches), r.first_mismatch);
  EXPECT_EQ(r.mismatches, 0);
  // |x| < 86: the positive and negative fp32 values below 86 (0x42AC0000), less the window.
  constexpr int64_t kBelow86 = 2 * int64_t{0x42AC0000};
  EXPECT_LE(r.accepted, kBelow86);
  EXPECT_GE(r.accepted, kBelow86 - kBelow86 / (int64_t{1} << 18));
}

// The pooling's branch-free division (DivRnPooled) equals div.rn.f32 on every pair the fast path
// can form: e in [2^-92, 1] (ExpRnFast's values for x in (-63.5, 0]), 1 / (1 + e) and e / (1 + e).
TEST(CompressorGpu, DivRnPooledEqualsDivRnOnThePoolingsPairs) {
  FS_SKIP_WITHOUT_GPU();
  const compressor_testing::DivRnPooledReport r = compressor_testing::DivRnPooledOnDevice();
  std::printf("  DivRnPooled: %ld numerators tried, %ld differ from div.rn (first 0x%08x)\n",
              static_cast<long>(r.tried), static_cast<long>(r.mismatches), r.first_mismatch);
  EXPECT_EQ(r.tried, int64_t{0x3F800000} - 0x11800000 + 1);
  EXPECT_EQ(r.mismatches, 0);
}

TEST(CompressorGpu, ReleasedDimsRatio2Streamed) {
  FS_SKIP_WITHOUT_GPU();
  const Projections pr = RandomProjections(2, 512, 1001, 1);
  CheckStreams(pr, false);
  CheckStreams(pr, false, 0, /*latent_pad=*/4);    // the vector path
  CheckStreams(pr, false, 516, /*latent_pad=*/8);  // the vector path, padded fp32 rows
}

// Ratio 2's vector path needs C = 512 (and 16-byte fp32 rows, 8-byte latent rows); its fallbacks:
// other widths (128, 1,024, 640, 200) and fp32 rows 8-byte aligned take the scalar path.
TEST(CompressorGpu, Ratio2VectorPathWidths) {
  FS_SKIP_WITHOUT_GPU();
  CheckStreams(RandomProjections(2, 128, 65, 12), false, 0, 4);
  CheckStreams(RandomProjections(2, 1024, 33, 13), false, 0, 4);
  CheckStreams(RandomProjections(2, 640, 17, 14), false, 0, 4);
  CheckStreams(RandomProjections(2, 200, 17, 15), false, 0, 4);    // not whole chunks
  CheckStreams(RandomProjections(2, 512, 17, 16), false, 514, 4);  // 8-byte fp32 rows
}

TEST(CompressorGpu, ReleasedDimsRatio1Streamed) {
  FS_SKIP_WITHOUT_GPU();
  const Projections pr = RandomProjections(1, 512, 257, 2);
  CheckStreams(pr, false);
  CheckStreams(pr, true);
}

// Ratio 1's vector path (fp32 rows 16-byte or bf16 rows 8-byte aligned, 8-byte latent rows): the
// released width, values over ~80 binades with zeros and −0 (rows whose sum of squares the packed
// check cannot vouch for: the per-term check, and the sequential sum where that fails too), and
// the fallbacks (fp32 rows 8-byte aligned, C = 200); 4,000 rows (several waves of blocks).
TEST(CompressorGpu, Ratio1VectorPath) {
  FS_SKIP_WITHOUT_GPU();
  const Projections pr = RandomProjections(1, 512, 257, 22);
  CheckStreams(pr, false, 0, /*latent_pad=*/4);
  CheckStreams(pr, true, 0, /*latent_pad=*/4);
  CheckStreams(pr, false, 516, /*latent_pad=*/8);  // padded fp32 rows, still 16-byte aligned
  Projections wide = RandomProjections(1, 512, 300, 23);
  std::mt19937 rng(24);
  std::uniform_int_distribution<int> e(-60, 20);
  for (size_t i = 0; i < wide.kv.size(); ++i) {
    wide.kv[i] = std::ldexp(wide.kv[i], e(rng));
    if (i % 97 == 0) wide.kv[i] = 0.0f;
    if (i % 89 == 0) wide.kv[i] = -0.0f;
  }
  CheckStreams(wide, false, 0, /*latent_pad=*/4);
  CheckStreams(wide, true, 0, /*latent_pad=*/4);
  const Projections many = RandomProjections(1, 512, 4000, 26);
  CheckStreams(many, false, 0, /*latent_pad=*/4);
  CheckStreams(many, true, 0, /*latent_pad=*/4);
  CheckStreams(pr, false, 514, /*latent_pad=*/4);                               // 8-byte fp32 rows
  CheckStreams(RandomProjections(1, 200, 33, 25), false, 0, /*latent_pad=*/4);  // not whole chunks
  // Rows whose sum of squares is not exact in every order (values 30 binades apart) and lands on
  // an fp32 tie (1 + 2^-24 + 2^-60 rounds to 1 + 2^-24 in double): the rounding-window test
  // (SumRoundsAsAnyOrder) must decline them, and the sequential fallback give the CPU's bits;
  // next to them rows of the same span far from a tie, which it takes.
  Projections tie = RandomProjections(1, 512, 64, 27);
  for (int64_t t = 0; t < tie.n; ++t) {
    float* row = tie.kv.data() + t * tie.c;
    if (t % 2 == 0) {
      std::fill(row, row + tie.c, 0.0f);
      row[(5 * t) % tie.c] = 1.0f;
      row[(5 * t + 7) % tie.c] = t % 4 == 0 ? 0x1p-12f : -0x1p-12f;
      row[(5 * t + 300) % tie.c] = 0x1p-30f;
    } else {
      row[t] = 0x1p-30f;  // the random row plus one value 30 binades below the rest
    }
    for (int64_t c = 0; c < tie.c; ++c) {
      tie.kv_bf16[t * tie.c + c] = formats::FloatToBf16Bits(row[c]);
    }
  }
  CheckStreams(tie, false, 0, /*latent_pad=*/4);
  CheckStreams(tie, true, 0, /*latent_pad=*/4);
}

TEST(CompressorGpu, OtherRatiosWidthsAndStrides) {
  FS_SKIP_WITHOUT_GPU();
  CheckStreams(RandomProjections(3, 48, 61, 3), false);
  CheckStreams(RandomProjections(4, 100, 61, 4), false, 103);  // odd width and stride
  CheckStreams(RandomProjections(16, 64, 70, 5), false);
  CheckStreams(RandomProjections(2, 2000, 9, 6), false);  // block per row
  CheckStreams(RandomProjections(1, 2000, 5, 7), true);
  CheckStreams(RandomProjections(2, 512, 1, 8), false);  // one token: no group
}

// Values over a huge dynamic range (|kv| from 2^-60 to 2^20, gate logits up to ±80) so that many
// rows' sums of squares are not exact in double and take the sequential path; plus exact zeros,
// −0 and ties in the gate logits.
TEST(CompressorGpu, HugeDynamicRangeAndSpecialValues) {
  FS_SKIP_WITHOUT_GPU();
  Projections pr = RandomProjections(2, 512, 600, 9);
  std::mt19937 rng(10);
  std::uniform_int_distribution<int> e(-60, 20);
  for (size_t i = 0; i < pr.kv.size(); ++i) {
    pr.kv[i] = std::ldexp(pr.kv[i], e(rng));
    pr.score[i] *= 20.0f;
    if (i % 97 == 0) pr.kv[i] = 0.0f;
    if (i % 89 == 0) pr.kv[i] = -0.0f;
    if (i % 83 == 0) pr.score[i] = pr.score[i % 512];
  }
  CheckStreams(pr, false);
  CheckStreams(pr, false, 0, /*latent_pad=*/4);  // ratio 2's vector path
}

// Non-finite gate logits in one channel of each group: one token's −Inf (the other's weight is
// then exactly 1: a finite row, compared bit for bit), both −Inf, one +Inf, one NaN, both +Inf (a
// NaN channel, so the norm makes the whole row NaN). The pooling's one-exp shortcut must give the
// CPU's values; NaN rows are compared as NaN (the GPU's arithmetic returns the canonical NaN where
// x86 propagates an operand's payload).
TEST(CompressorGpu, NonFiniteGateLogits) {
  FS_SKIP_WITHOUT_GPU();
  Projections pr = RandomProjections(2, 512, 240, 17);
  const float inf = std::numeric_limits<float>::infinity();
  const float nan = std::numeric_limits<float>::quiet_NaN();
  for (int64_t g = 0; g < pr.n / 2; ++g) {
    const int64_t c = (g * 37) % pr.c;
    float& z0 = pr.score[(2 * g) * pr.c + c];
    float& z1 = pr.score[(2 * g + 1) * pr.c + c];
    switch (g % 6) {
      case 0:
        z0 = -inf;
        break;
      case 1:
        z1 = -inf;
        break;
      case 2:
        z0 = z1 = -inf;
        break;
      case 3:
        z0 = inf;
        break;
      case 4:
        z1 = nan;
        break;
      default:
        z0 = z1 = inf;
        break;
    }
  }
  CheckStreams(pr, false, 0, kLatentPad, /*nan_equal=*/true);
  CheckStreams(pr, false, 0, /*latent_pad=*/4, /*nan_equal=*/true);
}

TEST(CompressorGpu, UploadedStateResumesMidGroup) {
  FS_SKIP_WITHOUT_GPU();
  const Projections pr = RandomProjections(4, 512, 23, 11);
  std::mt19937 rng(12);
  const std::vector<uint16_t> norm = RandomBf16(512, 0.5f, 1.5f, rng);
  const Rows want = RunProjectedChunks(pr, norm.data(), {23});
  // The CPU takes the first 10 tokens (2 groups, 2 pending); the GPU continues from its state.
  CompressorState cpu = MakeCompressorState(4, 512).value();
  Projections head = pr, tail = pr;
  head.n = 10;
  tail.n = 13;
  head.kv.resize(10 * 512);
  head.score.resize(10 * 512);
  tail.kv.erase(tail.kv.begin(), tail.kv.begin() + 10 * 512);
  tail.score.erase(tail.score.begin(), tail.score.begin() + 10 * 512);
  const Rows first = RunProjectedChunks(head, norm.data(), {10}, false, 0, &cpu);
  ASSERT_EQ(cpu.pending, 2);
  DeviceState ds(4, 512);
  ASSERT_TRUE(UploadCompressorState(cpu, &ds.state, nullptr).ok());
  const Rows rest = RunGpuChunks(tail, norm, {13}, false, 10, &ds);
  std::vector<uint16_t> all = first.latent;
  all.insert(all.end(), rest.latent.begin(), rest.latent.end());
  std::vector<int64_t> idx = first.index;
  idx.insert(idx.end(), rest.index.begin(), rest.index.end());
  EXPECT_EQ(idx, want.index);
  EXPECT_EQ(Mismatches(all, want.latent), 0);
  EXPECT_EQ(ds.state.pending, 3);
  EXPECT_EQ(ds.state.next_pos, 23);
}

// End to end: the layer's own GEMMs (LinearCpu, as CompressCpu runs them) then the GPU, against
// CompressCpu.
TEST(CompressorGpu, FromRealGemmsEqualsCompressCpu) {
  FS_SKIP_WITHOUT_GPU();
  for (int64_t ratio : {2, 1}) {
    std::unique_ptr<Layer> l = RandomLayer(ratio, 512, 1024, 13);
    std::mt19937 rng(14);
    const int64_t n = 41;
    const std::vector<uint16_t> x = RandomBf16(n * 1024, -2.0f, 2.0f, rng);
    const Rows want = RunChunks(*l, x.data(), 1024, n, {n});
    const Projections pr = compressor_test::Project(*l, x.data(), 1024, n);
    const Rows got = RunGpuChunks(pr, l->norm, {7, 1, 33}, ratio == 1);
    EXPECT_EQ(got.index, want.index);
    EXPECT_EQ(Mismatches(got.latent, want.latent), 0) << "ratio " << ratio;
  }
}

TEST(CompressorGpu, LauncherValidatesAndKeepsTheState) {
  FS_SKIP_WITHOUT_GPU();
  const Projections pr = RandomProjections(2, 64, 4, 15);
  DeviceState ds(2, 64);
  const DeviceProjections dp(pr, 64);
  DeviceBuffer dnorm = ToDevice(std::vector<uint16_t>(64, 0x3F80)), dlat(2 * 64 * 2), didx(16);
  int64_t emitted = -1;
  CompressProjectedParams p;
  p.ratio = 2;
  p.channels = 64;
  p.tokens = 4;
  p.kv = dp.dkv.get<float>();
  p.kv_stride = 64;
  p.score = dp.dscore.get<float>();
  p.score_stride = 64;
  p.norm_weight = dnorm.get<uint16_t>();
  p.latent = dlat.get<uint16_t>();
  p.latent_stride = 64;
  p.latent_capacity = 1;
  p.group_index = didx.get<int64_t>();
  p.groups_emitted = &emitted;
  absl::Status s = LaunchCompressProjected(p, &ds.state, nullptr);
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_TRUE(absl::StrContains(s.message(), "latent_capacity")) << s;
  p.latent_capacity = 2;
  p.start_pos = 1;
  s = LaunchCompressProjected(p, &ds.state, nullptr);
  EXPECT_EQ(s.code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_EQ(ds.state.pending, 0);
  EXPECT_EQ(emitted, -1);
  p.start_pos = 0;
  p.tokens = 0;
  EXPECT_TRUE(LaunchCompressProjected(p, &ds.state, nullptr).ok());
  EXPECT_EQ(emitted, 0);
  CUDA_CHECK(cudaDeviceSynchronize());
}

// ---- cache tail ----

RopeTable FullYarnTable(int64_t rope_dims = 64) {
  const RopeSpec spec{rope_dims, 160000.0, 65536, 16.0, 32.0, 1.0};
  return RopeTable::Create(spec, 0).value();
}

// FinalizeCompressedKv of `rows` random latents (C channels) at random group indices, on both
// sides: kv and the serving rows (when `cache`), padded strides or in place. `aligned`: kv rows
// 16-byte and serving rows 8-byte aligned as well as the latent (the kernel's vector accesses);
// otherwise kv and the serving rows are misaligned (its value-by-value path).
void CheckFinalize(int64_t rows, int64_t c, int64_t ratio, bool cache, bool in_place, uint32_t seed,
                   bool aligned = false, int64_t rope_dims = 64) {
  SCOPED_TRACE(absl::StrFormat("rows %d C %d ratio %d cache %d in place %d aligned %d rd %d", rows,
                               c, ratio, cache, in_place, aligned, rope_dims));
  const RopeTable table = FullYarnTable(rope_dims);
  std::mt19937 rng(seed);
  const int64_t ls = c + 8, ks = in_place ? ls : (aligned ? c + 16 : c + 5);
  const int64_t rb = formats::MainKvRowBytes(c), rs = aligned ? rb + 8 : rb + 7;
  std::vector<uint16_t> latent(static_cast<size_t>(rows * ls), 0x4000);
  std::uniform_real_distribution<float> u(-3.0f, 3.0f);
  for (int64_t r = 0; r < rows; ++r) {
    for (int64_t ch = 0; ch < c; ++ch) {
      // Mixed magnitudes so that blocks pick many scales; some exact zeros.
      const float v = ch % 29 == 0 ? 0.0f : std::ldexp(u(rng), static_cast<int>(rng() % 12) - 8);
      latent[r * ls + ch] = formats::FloatToBf16Bits(v);
    }
  }
  std::vector<int64_t> index(static_cast<size_t>(rows));
  for (int64_t r = 0; r < rows; ++r) index[r] = static_cast<int64_t>(rng() % (1u << 20));
  if (rows > 1) index[1] = 0;

  FinalizeCompressedKvParams p;
  p.table = &table;
  p.ratio = ratio;
  p.rows = rows;
  p.channels = c;
  p.latent_stride = ls;
  p.kv_stride = ks;
  p.cache_row_stride = rs;
  std::vector<uint16_t> want_lat = latent;
  std::vector<uint16_t> want_kv(static_cast<size_t>(rows * ks), kPoison);
  std::vector<uint8_t> want_rows(static_cast<size_t>(rows * rs), 0xA5);
  FinalizeCompressedKvParams cpu = p;
  cpu.group_index = index.data();
  cpu.latent = want_lat.data();
  cpu.kv = in_place ? want_lat.data() : want_kv.data();
  cpu.cache_rows = cache ? want_rows.data() : nullptr;
  ASSERT_TRUE(FinalizeCompressedKvCpu(cpu, &Pool()).ok());

  DeviceBuffer didx = ToDevice(index), dlat = ToDevice(latent);
  DeviceBuffer dkv = ToDevice(std::vector<uint16_t>(static_cast<size_t>(rows * ks), kPoison));
  DeviceBuffer drows = ToDevice(std::vector<uint8_t>(static_cast<size_t>(rows * rs), 0xA5));
  FinalizeCompressedKvParams gpu = p;
  gpu.group_index = didx.get<int64_t>();
  gpu.latent = dlat.get<uint16_t>();
  gpu.kv = in_place ? dlat.get<uint16_t>() : dkv.get<uint16_t>();
  gpu.cache_rows = cache ? drows.get<uint8_t>() : nullptr;
  ASSERT_TRUE(LaunchFinalizeCompressedKv(gpu, nullptr).ok());
  const std::vector<uint16_t> got_kv =
      in_place ? ToHost<uint16_t>(dlat, latent.size()) : ToHost<uint16_t>(dkv, want_kv.size());
  const std::vector<uint8_t> got_rows = ToHost<uint8_t>(drows, want_rows.size());
  const int64_t bad_kv = Mismatches(got_kv, in_place ? want_lat : want_kv);
  int64_t bad_rows = 0;
  for (size_t i = 0; i < got_rows.size(); ++i) bad_rows += got_rows[i] != want_rows[i];
  std::printf("  finalize %ld rows C %ld r %ld%s%s: %ld kv / %ld row-byte mismatches\n",
              static_cast<long>(rows), static_cast<long>(c), static_cast<long>(ratio),
              cache ? " +rows" : "", in_place ? " in place" : "", static_cast<long>(bad_kv),
              static_cast<long>(bad_rows));
  EXPECT_EQ(bad_kv, 0);
  EXPECT_EQ(bad_rows, 0);
}

TEST(CompressorGpu, FinalizeMatchesTheCpuTail) {
  FS_SKIP_WITHOUT_GPU();
  CheckFinalize(4096, 512, 2, true, false, 1);
  CheckFinalize(777, 512, 1, true, true, 2);
  CheckFinalize(1, 512, 2, true, false, 3);
  CheckFinalize(33, 64, 4, false, false, 4);  // C == rd: every pair rotated
  CheckFinalize(65, 1056, 2, true, true, 5);  // more blocks than lanes
  // The vector accesses (every row 16-byte, every serving row 8-byte aligned).
  CheckFinalize(4096, 512, 2, true, false, 6, /*aligned=*/true);
  CheckFinalize(777, 512, 1, true, true, 7, /*aligned=*/true);
  CheckFinalize(33, 64, 4, false, false, 8, /*aligned=*/true);
  CheckFinalize(65, 1056, 2, true, false, 9, /*aligned=*/true);
  // Rotated pairs from the middle of a block (rd 24 / 40 / 2: 8 / 8 / 14 plain values first) and
  // more pairs than a row's lanes (rd 96 and 160: 48 / 80 pairs).
  for (const bool aligned : {false, true}) {
    CheckFinalize(300, 512, 2, true, false, 10, aligned, /*rope_dims=*/24);
    CheckFinalize(129, 512, 1, true, true, 11, aligned, /*rope_dims=*/40);
    CheckFinalize(64, 512, 2, true, false, 12, aligned, /*rope_dims=*/2);
    CheckFinalize(257, 512, 2, true, false, 13, aligned, /*rope_dims=*/96);
    CheckFinalize(100, 1056, 1, true, false, 14, aligned, /*rope_dims=*/160);
  }
}

// The whole chain on both sides over a stream of calls: compress, then the cache tail of each
// call's rows with their serving rows.
TEST(CompressorGpu, StreamedChainEqualsTheCpuChain) {
  FS_SKIP_WITHOUT_GPU();
  const RopeTable table = FullYarnTable();
  const Projections pr = RandomProjections(2, 512, 301, 21);
  std::mt19937 rng(22);
  const std::vector<uint16_t> norm = RandomBf16(512, 0.5f, 1.5f, rng);
  const Rows cpu_rows = RunProjectedChunks(pr, norm.data(), {301});
  const int64_t groups = static_cast<int64_t>(cpu_rows.index.size());
  std::vector<uint16_t> want_kv(cpu_rows.latent.size());
  std::vector<uint8_t> want_cache(static_cast<size_t>(groups * 288));
  FinalizeCompressedKvParams f;
  f.table = &table;
  f.ratio = 2;
  f.rows = groups;
  f.channels = 512;
  f.group_index = cpu_rows.index.data();
  f.latent = cpu_rows.latent.data();
  f.latent_stride = 512;
  f.kv = want_kv.data();
  f.kv_stride = 512;
  f.cache_rows = want_cache.data();
  f.cache_row_stride = 288;
  ASSERT_TRUE(FinalizeCompressedKvCpu(f, nullptr).ok());

  const Rows gpu_rows = RunGpuChunks(pr, norm, {1, 2, 1, 8, 33, 1, 255});
  ASSERT_EQ(gpu_rows.index, cpu_rows.index);
  DeviceBuffer didx = ToDevice(gpu_rows.index), dlat = ToDevice(gpu_rows.latent);
  DeviceBuffer dkv(want_kv.size() * 2), dcache(want_cache.size());
  FinalizeCompressedKvParams g = f;
  g.group_index = didx.get<int64_t>();
  g.latent = dlat.get<uint16_t>();
  g.kv = dkv.get<uint16_t>();
  g.cache_rows = dcache.get<uint8_t>();
  ASSERT_TRUE(LaunchFinalizeCompressedKv(g, nullptr).ok());
  EXPECT_EQ(Mismatches(ToHost<uint16_t>(dkv, want_kv.size()), want_kv), 0);
  EXPECT_EQ(ToHost<uint8_t>(dcache, want_cache.size()), want_cache);
}

}  // namespace
}  // namespace flashserve::kernels
