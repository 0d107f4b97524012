// LaunchCompressProjectedBatch against B single LaunchCompressProjected calls and against
// CompressProjectedBatchCpu, bit for bit: latents (whole poisoned output buffer), group indices,
// groups_emitted, the host counters and the device state rows afterwards. Each sequence starts
// from its own state (a random group-aligned start, then a random warm-up prefix: some pending,
// some not), so one step mixes sequences that complete a group with sequences that do not; a few
// steps run back to back so the open groups cross batched calls. B = 1, 3, 8, 64, 256 and 500
// (two launches of 384 + 116); ratios 1 (fp32 and bf16 input), 2, 4; s_b = 1 and mixed s_b
// (0, 1, 2, 3, 5, 8); C = 2000 (the block-per-row path). Validation: a bad sequence is named and
// nothing is enqueued or advanced.
#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <random>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/match.h"
#include "absl/strings/str_format.h"
#include "gtest/gtest.h"
#include "kernels/common/gpu_test_util.h"
#include "kernels/compressor/compressor.h"
#include "kernels/compressor/compressor_test_util.h"

namespace flashserve::kernels {
namespace {

using compressor_test::Projections;
using compressor_test::RandomBf16;
using compressor_test::RandomProjections;

constexpr uint16_t kPoison = 0x7FC1;  // a NaN no kernel produces
constexpr int64_t kLatentPad = 3;     // latent rows padded by this many elements

// B device states over one allocation.
struct DeviceStates {
  DeviceStates(int64_t ratio, int64_t c, int64_t batch)
      : bytes(std::max<int64_t>(CompressorDeviceStateBytes(ratio, c), 16)),
        memory(static_cast<size_t>(bytes * batch)) {
    for (int64_t b = 0; b < batch; ++b) {
      states.push_back(MakeCompressorDeviceState(ratio, c, memory.get<uint8_t>() + b * bytes,
                                                 static_cast<size_t>(bytes))
                           .value());
    }
    for (auto& s : states) ptrs.push_back(&s);
  }
  int64_t bytes;
  DeviceBuffer memory;
  std::vector<CompressorDeviceState> states;
  std::vector<CompressorDeviceState*> ptrs;
};

struct Case {
  int64_t ratio = 2;
  int64_t c = 512;
  int64_t batch = 1;
  std::vector<int64_t> tokens = {1};  // s_b of sequence b at step k: tokens[(b + k) % size]
  int steps = 3;
  bool bf16 = false;  // ratio 1: kv_bf16 input
  // Latent row padding: 3 leaves the rows 2-byte aligned (the scalar path), 4 makes them 8-byte
  // aligned, which with C = 512 and the aligned kv / score / state rows takes the vector path.
  int64_t latent_pad = kLatentPad;
};

void CheckBatch(const Case& k) {
  SCOPED_TRACE(absl::StrFormat("ratio %d C %d B %d bf16 %d", k.ratio, k.c, k.batch, k.bf16));
  const int64_t c = k.c;
  const int64_t r = k.ratio;
  std::mt19937 rng(static_cast<uint32_t>(7 * k.batch + 131 * r + c));
  const std::vector<uint16_t> norm = RandomBf16(c, 0.5f, 1.5f, rng);
  const DeviceBuffer dnorm = ToDevice(norm);

  // Start states: a group-aligned start, then a warm-up prefix of 0 .. 2r − 1 tokens on the CPU.
  std::vector<CompressorState> cpu;
  std::vector<int64_t> pos(static_cast<size_t>(k.batch));
  for (int64_t b = 0; b < k.batch; ++b) {
    cpu.push_back(MakeCompressorState(r, c).value());
    const int64_t start = r * static_cast<int64_t>(rng() % 1000);
    const int64_t warm = static_cast<int64_t>(rng() % static_cast<uint32_t>(2 * r));
    const Projections pr = RandomProjections(r, c, std::max<int64_t>(warm, 1), rng());
    std::vector<uint16_t> lat(static_cast<size_t>(2 * c));
    std::vector<int64_t> idx(2);
    int64_t emitted = 0;
    CompressProjectedParams p;
    p.ratio = r;
    p.channels = c;
    p.start_pos = start;
    p.tokens = warm;
    p.kv = pr.kv.data();
    p.kv_stride = c;
    p.score = r > 1 ? pr.score.data() : nullptr;
    p.score_stride = c;
    p.norm_weight = norm.data();
    p.latent = lat.data();
    p.latent_stride = c;
    p.latent_capacity = 2;
    p.group_index = idx.data();
    p.groups_emitted = &emitted;
    ASSERT_TRUE(CompressProjectedCpu(p, &cpu.back(), nullptr).ok());
    pos[static_cast<size_t>(b)] = start + warm;
  }
  DeviceStates batched(r, c, k.batch), single(r, c, k.batch);
  for (int64_t b = 0; b < k.batch; ++b) {
    ASSERT_TRUE(UploadCompressorState(cpu[b], &batched.states[b], nullptr).ok());
    ASSERT_TRUE(UploadCompressorState(cpu[b], &single.states[b], nullptr).ok());
  }

  for (int step = 0; step < k.steps; ++step) {
    SCOPED_TRACE(absl::StrFormat("step %d", step));
    std::vector<int64_t> s(static_cast<size_t>(k.batch)), in_off(s.size()), out_off(s.size());
    int64_t rows_in = 0, rows_out = 0, pending_before = 0;
    for (int64_t b = 0; b < k.batch; ++b) {
      s[b] = k.tokens[static_cast<size_t>(b + step) % k.tokens.size()];
      in_off[b] = rows_in;
      out_off[b] = rows_out;
      rows_in += s[b];
      rows_out += CompressMaxGroups(r, s[b]);
      pending_before += cpu[b].pending > 0 ? 1 : 0;
    }
    const Projections pr = RandomProjections(r, c, std::max<int64_t>(rows_in, 1), rng());
    const DeviceBuffer dkv = ToDevice(pr.kv), dscore = ToDevice(pr.score);
    const DeviceBuffer dkv16 = ToDevice(pr.kv_bf16);
    const int64_t ls = c + k.latent_pad;
    const size_t lat_n = static_cast<size_t>(std::max<int64_t>(rows_out, 1) * ls);
    const std::vector<uint16_t> poison(lat_n, kPoison);
    const std::vector<int64_t> idx_poison(static_cast<size_t>(std::max<int64_t>(rows_out, 1)), -7);
    DeviceBuffer lat_b = ToDevice(poison), lat_s = ToDevice(poison);
    DeviceBuffer idx_b = ToDevice(idx_poison), idx_s = ToDevice(idx_poison);
    std::vector<uint16_t> lat_cpu(lat_n, kPoison);
    std::vector<int64_t> idx_cpu(idx_poison);
    std::vector<int64_t> em_b(s.size(), -1), em_s(s.size(), -1), em_cpu(s.size(), -1);
    std::vector<CompressProjectedParams> pb(s.size()), ps(s.size()), pc(s.size());
    for (int64_t b = 0; b < k.batch; ++b) {
      CompressProjectedParams p;
      p.ratio = r;
      p.channels = c;
      p.start_pos = pos[b];
      p.tokens = s[b];
      p.kv_stride = c;
      p.score_stride = c;
      p.norm_weight = dnorm.get<uint16_t>();
      p.latent_stride = ls;
      p.latent_capacity = CompressMaxGroups(r, s[b]);
      if (k.bf16) {
        p.kv_bf16 = dkv16.get<uint16_t>() + in_off[b] * c;
      } else {
        p.kv = dkv.get<float>() + in_off[b] * c;
      }
      if (r > 1) p.score = dscore.get<float>() + in_off[b] * c;
      p.latent = lat_b.get<uint16_t>() + out_off[b] * ls;
      p.group_index = idx_b.get<int64_t>() + out_off[b];
      p.groups_emitted = &em_b[b];
      pb[b] = p;
      p.latent = lat_s.get<uint16_t>() + out_off[b] * ls;
      p.group_index = idx_s.get<int64_t>() + out_off[b];
      p.groups_emitted = &em_s[b];
      ps[b] = p;
      p.norm_weight = norm.data();
      p.kv = k.bf16 ? nullptr : pr.kv.data() + in_off[b] * c;
      p.kv_bf16 = k.bf16 ? pr.kv_bf16.data() + in_off[b] * c : nullptr;
      p.score = r > 1 ? pr.score.data() + in_off[b] * c : nullptr;
      p.latent = lat_cpu.data() + out_off[b] * ls;
      p.group_index = idx_cpu.data() + out_off[b];
      p.groups_emitted = &em_cpu[b];
      pc[b] = p;
    }
    ASSERT_TRUE(
        LaunchCompressProjectedBatch({pb.data(), k.batch}, batched.ptrs.data(), nullptr).ok());
    for (int64_t b = 0; b < k.batch; ++b) {
      ASSERT_TRUE(LaunchCompressProjected(ps[b], single.ptrs[b], nullptr).ok()) << "sequence " << b;
    }
    std::vector<CompressorState*> cpu_ptrs;
    for (auto& st : cpu) cpu_ptrs.push_back(&st);
    ASSERT_TRUE(CompressProjectedBatchCpu({pc.data(), k.batch}, cpu_ptrs.data(), nullptr).ok());

    EXPECT_EQ(em_b, em_s);
    EXPECT_EQ(em_b, em_cpu);
    const std::vector<uint16_t> got_b = ToHost<uint16_t>(lat_b, lat_n);
    const std::vector<uint16_t> got_s = ToHost<uint16_t>(lat_s, lat_n);
    const std::vector<int64_t> gi_b = ToHost<int64_t>(idx_b, idx_poison.size());
    const std::vector<int64_t> gi_s = ToHost<int64_t>(idx_s, idx_poison.size());
    EXPECT_EQ(gi_b, gi_s);
    EXPECT_EQ(gi_b, idx_cpu);
    int64_t bad_s = 0, bad_cpu = 0, emitted = 0;
    for (size_t i = 0; i < lat_n; ++i) {
      const int64_t row = static_cast<int64_t>(i) / ls;
      const int64_t seq = static_cast<int64_t>(
          std::upper_bound(out_off.begin(), out_off.end(), row) - out_off.begin() - 1);
      if (got_b[i] != got_s[i] && bad_s++ < 5) {
        ADD_FAILURE() << "batched != single at sequence " << seq << " row " << row - out_off[seq]
                      << " element " << static_cast<int64_t>(i) % ls << ": " << got_b[i] << " vs "
                      << got_s[i];
      }
      if (got_b[i] != lat_cpu[i] && bad_cpu++ < 5) {
        ADD_FAILURE() << "batched != CPU at sequence " << seq << " row " << row - out_off[seq]
                      << " element " << static_cast<int64_t>(i) % ls << ": " << got_b[i] << " vs "
                      << lat_cpu[i];
      }
    }
    EXPECT_EQ(bad_s, 0);
    EXPECT_EQ(bad_cpu, 0);
    for (int64_t b = 0; b < k.batch; ++b) {
      emitted += em_b[b];
      ASSERT_EQ(batched.states[b].pending, cpu[b].pending) << "sequence " << b;
      ASSERT_EQ(batched.states[b].pending, single.states[b].pending) << "sequence " << b;
      if (s[b] > 0) {
        ASSERT_EQ(batched.states[b].next_pos, cpu[b].next_pos) << "sequence " << b;
      }
      ASSERT_EQ(batched.states[b].next_pos, single.states[b].next_pos) << "sequence " << b;
      CompressorState back_b = MakeCompressorState(r, c).value();
      CompressorState back_s = MakeCompressorState(r, c).value();
      ASSERT_TRUE(DownloadCompressorState(batched.states[b], &back_b, nullptr).ok());
      ASSERT_TRUE(DownloadCompressorState(single.states[b], &back_s, nullptr).ok());
      ASSERT_EQ(back_b.kv, back_s.kv) << "state rows, sequence " << b;
      ASSERT_EQ(back_b.score, back_s.score) << "state rows, sequence " << b;
      for (int64_t i = 0; i < cpu[b].pending * c; ++i) {
        ASSERT_EQ(back_b.kv[i], cpu[b].kv[i]) << "sequence " << b << " element " << i;
        ASSERT_EQ(back_b.score[i], cpu[b].score[i]) << "sequence " << b << " element " << i;
      }
      pos[b] += s[b];
    }
    if (step == 0) {
      std::printf(
          "  batch r %ld C %ld B %ld%s: %ld tokens, %ld pending before, %ld groups, "
          "%ld + %ld mismatches\n",
          static_cast<long>(r), static_cast<long>(c), static_cast<long>(k.batch),
          k.bf16 ? " (bf16 kv)" : "", static_cast<long>(rows_in), static_cast<long>(pending_before),
          static_cast<long>(emitted), static_cast<long>(bad_s), static_cast<long>(bad_cpu));
    }
  }
}

TEST(CompressorBatchGpu, DecodeOneTokenPerSequence) {
  FS_SKIP_WITHOUT_GPU();
  for (int64_t batch : {1, 3, 8, 64, 256, 500}) {
    for (int64_t ratio : {2, 4, 1}) {
      CheckBatch({.ratio = ratio, .c = 512, .batch = batch, .tokens = {1}, .steps = 4});
    }
  }
  CheckBatch({.ratio = 1, .c = 512, .batch = 64, .tokens = {1}, .steps = 2, .bf16 = true});
}

// The same on the vector path (8-byte latent rows): the batched launch takes it when every
// sequence's rows allow it, as the single calls do.
TEST(CompressorBatchGpu, DecodeOnTheVectorPath) {
  FS_SKIP_WITHOUT_GPU();
  for (int64_t batch : {1, 8, 64, 500}) {
    for (int64_t ratio : {2, 1}) {
      CheckBatch(
          {.ratio = ratio, .c = 512, .batch = batch, .tokens = {1}, .steps = 4, .latent_pad = 4});
    }
  }
  CheckBatch({.ratio = 1,
              .c = 512,
              .batch = 64,
              .tokens = {1},
              .steps = 2,
              .bf16 = true,
              .latent_pad = 4});
  CheckBatch({.ratio = 2,
              .c = 512,
              .batch = 64,
              .tokens = {1, 0, 3, 2, 5, 1, 8},
              .steps = 3,
              .latent_pad = 4});
}

TEST(CompressorBatchGpu, SeveralTokensAndEmptySequences) {
  FS_SKIP_WITHOUT_GPU();
  const std::vector<int64_t> mixed = {1, 0, 3, 2, 5, 1, 8};
  for (int64_t batch : {3, 8, 64, 256}) {
    for (int64_t ratio : {2, 4, 1}) {
      CheckBatch({.ratio = ratio, .c = 512, .batch = batch, .tokens = mixed, .steps = 3});
    }
  }
  CheckBatch({.ratio = 3, .c = 48, .batch = 40, .tokens = mixed, .steps = 3});
  CheckBatch({.ratio = 16, .c = 64, .batch = 9, .tokens = {17, 1, 0, 40}, .steps = 3});
  // Every sequence empty (nothing launched) and a batch of 500 with mixed sizes (two launches).
  CheckBatch({.ratio = 2, .c = 512, .batch = 5, .tokens = {0}, .steps = 1});
  CheckBatch({.ratio = 2, .c = 128, .batch = 500, .tokens = mixed, .steps = 2});
}

TEST(CompressorBatchGpu, BlockPerRowWidth) {
  FS_SKIP_WITHOUT_GPU();
  for (int64_t ratio : {2, 1}) {
    CheckBatch({.ratio = ratio, .c = 2000, .batch = 6, .tokens = {1, 3}, .steps = 3});
  }
}

TEST(CompressorBatchGpu, ValidationNamesTheSequenceAndEnqueuesNothing) {
  FS_SKIP_WITHOUT_GPU();
  constexpr int64_t kC = 64, kB = 8;
  DeviceStates ds(2, kC, kB);
  for (auto& st : ds.states) {
    st.pending = 1;
    st.next_pos = 11;
  }
  const Projections pr = RandomProjections(2, kC, kB, 3);
  const DeviceBuffer dkv = ToDevice(pr.kv), dscore = ToDevice(pr.score);
  const DeviceBuffer dnorm = ToDevice(std::vector<uint16_t>(kC, 0x3F80));
  const std::vector<uint16_t> poison(static_cast<size_t>(kB * kC), kPoison);
  DeviceBuffer dlat = ToDevice(poison), didx(kB * 8);
  std::vector<int64_t> emitted(kB, -1);
  std::vector<CompressProjectedParams> ps(kB);
  for (int64_t b = 0; b < kB; ++b) {
    CompressProjectedParams& p = ps[b];
    p.ratio = 2;
    p.channels = kC;
    p.start_pos = 11;
    p.tokens = 1;
    p.kv = dkv.get<float>() + b * kC;
    p.kv_stride = kC;
    p.score = dscore.get<float>() + b * kC;
    p.score_stride = kC;
    p.norm_weight = dnorm.get<uint16_t>();
    p.latent = dlat.get<uint16_t>() + b * kC;
    p.latent_stride = kC;
    p.latent_capacity = 1;
    p.group_index = didx.get<int64_t>() + b;
    p.groups_emitted = &emitted[b];
  }
  ps[5].start_pos = 13;
  absl::Status st = LaunchCompressProjectedBatch({ps.data(), kB}, ds.ptrs.data(), nullptr);
  EXPECT_EQ(st.code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_TRUE(absl::StrContains(st.message(), "sequence 5")) << st;
  ps[5].start_pos = 11;
  ps[6].latent_capacity = 0;
  st = LaunchCompressProjectedBatch({ps.data(), kB}, ds.ptrs.data(), nullptr);
  EXPECT_EQ(st.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_TRUE(absl::StrContains(st.message(), "sequence 6: compressor: latent_capacity")) << st;
  for (int64_t b = 0; b < kB; ++b) {
    EXPECT_EQ(ds.states[b].pending, 1) << b;
    EXPECT_EQ(ds.states[b].next_pos, 11) << b;
    EXPECT_EQ(emitted[b], -1) << b;
  }
  EXPECT_EQ(ToHost<uint16_t>(dlat, poison.size()), poison);
  ps[6].latent_capacity = 1;
  ASSERT_TRUE(LaunchCompressProjectedBatch({ps.data(), kB}, ds.ptrs.data(), nullptr).ok());
  EXPECT_EQ(emitted, std::vector<int64_t>(kB, 1));
  EXPECT_NE(ToHost<uint16_t>(dlat, poison.size()), poison);
}

}  // namespace
}  // namespace flashserve::kernels
