// LaunchSparseAttn against SparseAttnCpu on the same inputs and against the double-precision
// softmax (README.md "CUDA" states the tolerance): the released dims (64 heads × 512, 128 window +
// 512 selected entries with -1 slots; 1, 4 and 64 tokens, i.e. split and unsplit launches), the
// tiny fixture's dims, odd head counts, head_dim 256, the scalar path (odd head_dim, unaligned
// strides: bit-exact with the CPU in practice), rows without a valid entry, large and small sinks,
// determinism, and the launcher's errors; the warp-specialised wgmma kernel (wgmma-ws) bit for bit
// against wgmma over the decode shape grid. Outputs start poisoned, so an element the kernel fails
// to write is a mismatch. Each comparison prints what it measured. The row form (serving rows,
// decode once) is in sparse_attn_rows_gpu_test.cc; the shared cases and checks in
// sparse_attn_gpu_checks.h.
#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "common/base/check.h"
#include "gtest/gtest.h"
#include "kernels/attention/attention.h"
#include "kernels/attention/attention_gpu_test_util.h"
#include "kernels/attention/attention_test_util.h"
#include "kernels/attention/cuda/sparse_attn_path.h"
#include "kernels/attention/sparse_attn_gpu_checks.h"
#include "kernels/common/gpu_test_util.h"

namespace flashserve::kernels {
namespace {

using attention_internal::SparseAttnCudaPath;
using attention_internal::SparseAttnCudaPathFor;
using attention_internal::SparseAttnCudaPathName;
using testing::AttnCase;
using testing::CombineFormOverride;
using testing::Compare;
using testing::DecodeCase;
using testing::ExpectClose;
using testing::Layout;
using testing::LayoutParams;
using testing::Outputs;
using testing::PathOverride;
using testing::RandomCase;
using testing::RunBoth;
using testing::Stats;
using testing::ToDevice;

TEST(SparseAttnGpuTest, ReleasedDimsDecode) {
  FS_SKIP_WITHOUT_GPU();
  for (int64_t tokens : {1, 4, 64}) {
    const AttnCase c = DecodeCase(tokens, 64, 512, 128, 512, 4096, 0.1, 100 + tokens);
    char label[64];
    std::snprintf(label, sizeof(label), "released 64x512 w640 tokens %ld", long(tokens));
    ExpectClose(c, RunBoth(c), label);
  }
}

TEST(SparseAttnGpuTest, ReleasedDimsPaddedStrides) {
  FS_SKIP_WITHOUT_GPU();
  const AttnCase c = DecodeCase(3, 64, 512, 128, 512, 1000, 0.05, 7);
  ExpectClose(c, RunBoth(c, {8, 16, 24}), "released, padded strides");
}

TEST(SparseAttnGpuTest, TinyDims) {
  FS_SKIP_WITHOUT_GPU();
  for (int64_t tokens : {1, 5, 17}) {
    const AttnCase c = RandomCase(tokens, 4, 128, 40, 32, 0.2, 200 + tokens);
    ExpectClose(c, RunBoth(c), "tiny 4x128 w32");
  }
}

TEST(SparseAttnGpuTest, OddHeadCountsAndPartialBlocks) {
  FS_SKIP_WITHOUT_GPU();
  for (int64_t heads : {1, 5, 16, 17, 33, 65, 100}) {
    const AttnCase c = RandomCase(3, heads, 128, 300, 200, 0.3, 300 + heads);
    char label[64];
    std::snprintf(label, sizeof(label), "heads %ld x128 w200", long(heads));
    ExpectClose(c, RunBoth(c), label);
  }
}

TEST(SparseAttnGpuTest, HeadDim256) {
  FS_SKIP_WITHOUT_GPU();
  const AttnCase c = RandomCase(9, 24, 256, 500, 130, 0.1, 11);
  ExpectClose(c, RunBoth(c), "24x256 w130");
}

// The scalar path does the CPU's operations in the CPU's order: equal bits but where the device
// exp and glibc expf round differently (not seen in practice; allowed up to 0.1 %).
TEST(SparseAttnGpuTest, ScalarPathOddShapes) {
  FS_SKIP_WITHOUT_GPU();
  struct Shape {
    int64_t heads, d, width;
    Layout layout;
  };
  for (const Shape& s :
       {Shape{3, 1, 70, {}}, Shape{5, 7, 64, {}}, Shape{8, 96, 130, {}}, Shape{2, 100, 33, {}},
        Shape{4, 600, 65, {}}, Shape{6, 128, 150, {2, 0, 0}}, Shape{6, 512, 150, {0, 3, 0}},
        Shape{6, 512, 150, {0, 0, 1}}}) {
    const AttnCase c = RandomCase(4, s.heads, s.d, 90, s.width, 0.25, 400 + s.d);
    char label[64];
    std::snprintf(label, sizeof(label), "scalar %ldx%ld w%ld", long(s.heads), long(s.d),
                  long(s.width));
    const Outputs o = RunBoth(c, s.layout);
    const Stats st = Compare(c, o, label);
    EXPECT_EQ(st.outside, 0) << label;
    EXPECT_EQ(st.outside_double, 0) << label;
    EXPECT_LE(st.bit_diffs, static_cast<int64_t>(o.gpu.size()) / 1000) << label;
  }
}

TEST(SparseAttnGpuTest, RowsWithoutValidEntriesAreZero) {
  FS_SKIP_WITHOUT_GPU();
  for (int64_t d : {128, 512, 100}) {
    AttnCase c = RandomCase(5, 64, d, 200, 192, 0.0, 500 + d);
    std::fill_n(c.indices.begin() + 1 * c.width, c.width, -1);  // token 1: all -1
    std::fill_n(c.indices.begin() + 3 * c.width, c.width, -1);  // token 3: all -1
    const Outputs o = RunBoth(c);
    ExpectClose(c, o, "all-invalid tokens 1 and 3");
    for (int64_t t : {1, 3}) {
      for (int64_t i = 0; i < c.heads * d; ++i) {
        ASSERT_EQ(o.gpu[t * c.heads * d + i], 0) << "token " << t << " element " << i;
      }
    }
    // Width 0 and an empty pool: every row is +0.
    AttnCase e = RandomCase(2, 64, d, 0, 0, 1.0, 7);
    const Outputs oe = RunBoth(e);
    EXPECT_EQ(oe.gpu, std::vector<uint16_t>(oe.gpu.size(), 0));
  }
}

TEST(SparseAttnGpuTest, LargeAndSmallSinks) {
  FS_SKIP_WITHOUT_GPU();
  for (float sink : {-60.0f, 0.0f, 8.0f, 30.0f}) {
    AttnCase c = DecodeCase(4, 64, 512, 128, 512, 2000, 0.1, 600);
    std::fill(c.sink.begin(), c.sink.end(), sink);
    c.sink[5] = -sink;  // a mix within one group
    char label[64];
    std::snprintf(label, sizeof(label), "sink %.0f", sink);
    ExpectClose(c, RunBoth(c), label);
  }
}

TEST(SparseAttnGpuTest, Deterministic) {
  FS_SKIP_WITHOUT_GPU();
  for (int64_t tokens : {1, 64}) {
    const AttnCase c = DecodeCase(tokens, 64, 512, 128, 512, 4096, 0.1, 700);
    const Outputs a = RunBoth(c);
    const Outputs b = RunBoth(c);
    EXPECT_EQ(a.gpu, b.gpu) << "tokens " << tokens;
  }
}

// Forces a path for the scope (the launcher's process-wide override), then restores the default.
// The path the launcher takes for case `c` in layout `l` under the current override.
SparseAttnCudaPath PathOf(const AttnCase& c, const Layout& l = {}) {
  SparseAttnParams p = LayoutParams(c, l);
  // Alignment is judged on the pointers: any 16-byte aligned address stands for the buffers.
  alignas(16) static const uint16_t kAligned[8] = {};
  p.q = p.kv = p.out = const_cast<uint16_t*>(kAligned);
  return SparseAttnCudaPathFor(p);
}

// PathOf for `c`'s params with tokens and width replaced (the selection reads only the dims, the
// strides and the pointers' alignment; nothing is launched).
SparseAttnCudaPath PathOfDims(const AttnCase& c, int64_t tokens, int64_t width) {
  SparseAttnParams p = LayoutParams(c, {});
  alignas(16) static const uint16_t kAligned[8] = {};
  p.q = p.kv = p.out = const_cast<uint16_t*>(kAligned);
  p.tokens = tokens;
  p.width = width;
  return SparseAttnCudaPathFor(p);
}

TEST(SparseAttnGpuTest, PathSelection) {
  const AttnCase released = RandomCase(1, 64, 512, 10, 8, 0.0, 1);
  EXPECT_EQ(PathOf(released), SparseAttnCudaPath::kWgmma);  // one block: nothing to pipeline
  EXPECT_EQ(PathOf(released, {8, 16, 24}), SparseAttnCudaPath::kWgmma);
  // Width 640 (10 blocks): 1 / 8 / 12 tokens run 1-block units (wgmma), 13 tokens 2-block ones,
  // 64 and 256 tokens 5- and 10-block ones (wgmma-ws; the threshold is 2 blocks per unit).
  EXPECT_EQ(PathOfDims(released, 1, 640), SparseAttnCudaPath::kWgmma);
  EXPECT_EQ(PathOfDims(released, 8, 640), SparseAttnCudaPath::kWgmma);
  EXPECT_EQ(PathOfDims(released, 12, 640), SparseAttnCudaPath::kWgmma);
  EXPECT_EQ(PathOfDims(released, 13, 640), SparseAttnCudaPath::kWgmmaWs);
  EXPECT_EQ(PathOfDims(released, 64, 640), SparseAttnCudaPath::kWgmmaWs);
  EXPECT_EQ(PathOfDims(released, 256, 640), SparseAttnCudaPath::kWgmmaWs);
  EXPECT_EQ(PathOfDims(released, 256, 64), SparseAttnCudaPath::kWgmma);     // 1-block lists
  EXPECT_EQ(PathOfDims(released, 256, 128), SparseAttnCudaPath::kWgmmaWs);  // 2-block lists
  EXPECT_EQ(PathOfDims(released, 1, 2560), SparseAttnCudaPath::kWgmma);     // 40 splits of 1 block
  EXPECT_EQ(PathOfDims(released, 1, 24576), SparseAttnCudaPath::kWgmmaWs);  // 128 splits of 3
  EXPECT_EQ(PathOf(released, {0, 3, 0}), SparseAttnCudaPath::kScalar);
  const AttnCase heads65 = RandomCase(1, 65, 512, 10, 8, 0.0, 1);
  EXPECT_EQ(PathOf(heads65), SparseAttnCudaPath::kMmaSync);
  const AttnCase d128 = RandomCase(1, 64, 128, 10, 8, 0.0, 1);
  EXPECT_EQ(PathOf(d128), SparseAttnCudaPath::kMmaSync);
  {
    PathOverride force(SparseAttnCudaPath::kWgmma);
    EXPECT_EQ(PathOf(heads65), SparseAttnCudaPath::kWgmma);
    EXPECT_EQ(PathOf(d128), SparseAttnCudaPath::kMmaSync);  // does not fit: falls back
  }
  {
    PathOverride force(SparseAttnCudaPath::kWgmmaSplitK);
    EXPECT_EQ(PathOf(released), SparseAttnCudaPath::kWgmmaSplitK);
    EXPECT_EQ(PathOf(heads65), SparseAttnCudaPath::kWgmmaSplitK);
    EXPECT_EQ(PathOf(d128), SparseAttnCudaPath::kMmaSync);  // does not fit: falls back
    EXPECT_EQ(PathOf(released, {0, 3, 0}), SparseAttnCudaPath::kScalar);
  }
  {
    PathOverride force(SparseAttnCudaPath::kWgmmaWs);
    EXPECT_EQ(PathOf(released), SparseAttnCudaPath::kWgmmaWs);
    EXPECT_EQ(PathOf(heads65), SparseAttnCudaPath::kWgmmaWs);
    EXPECT_EQ(PathOf(d128), SparseAttnCudaPath::kMmaSync);  // does not fit: falls back
    EXPECT_EQ(PathOf(released, {0, 3, 0}), SparseAttnCudaPath::kScalar);
  }
  {
    PathOverride force(SparseAttnCudaPath::kWgmmaWs);
    EXPECT_EQ(PathOfDims(released, 1, 640), SparseAttnCudaPath::kWgmmaWs);  // forced at any size
  }
  {
    PathOverride force(SparseAttnCudaPath::kWgmma);
    EXPECT_EQ(PathOfDims(released, 256, 640), SparseAttnCudaPath::kWgmma);  // A/B against ws
  }
  {
    PathOverride force(SparseAttnCudaPath::kMmaSync);
    EXPECT_EQ(PathOf(released), SparseAttnCudaPath::kMmaSync);
  }
  {
    PathOverride force(SparseAttnCudaPath::kScalar);
    EXPECT_EQ(PathOf(released), SparseAttnCudaPath::kScalar);
  }
  // The row form: wgmma by default at every size; an override to wgmma-ws (opt-in) forces the
  // warp-specialised row kernel, any other override is ignored.
  auto row_path = [&](int64_t tokens, int64_t width) {
    SparseAttnParams p = LayoutParams(released, {});
    alignas(16) static const uint8_t kRows[16] = {};
    p.kv = nullptr;
    p.kv_rows.window = p.kv_rows.compressed = kRows;
    p.tokens = tokens;
    p.width = width;
    return SparseAttnCudaPathFor(p);
  };
  EXPECT_EQ(row_path(8, 640), SparseAttnCudaPath::kWgmma);
  EXPECT_EQ(row_path(256, 640), SparseAttnCudaPath::kWgmma);
  for (SparseAttnCudaPath force :
       {SparseAttnCudaPath::kScalar, SparseAttnCudaPath::kMmaSync, SparseAttnCudaPath::kWgmmaSplitK,
        SparseAttnCudaPath::kWgmma, SparseAttnCudaPath::kWgmmaWs}) {
    PathOverride scope(force);
    const SparseAttnCudaPath want =
        force == SparseAttnCudaPath::kWgmmaWs ? force : SparseAttnCudaPath::kWgmma;
    EXPECT_EQ(row_path(1, 640), want);
    EXPECT_EQ(row_path(256, 640), want);
  }
  EXPECT_EQ(PathOf(released), SparseAttnCudaPath::kWgmma);
  EXPECT_EQ(PathOfDims(released, 256, 640), SparseAttnCudaPath::kWgmmaWs);
  EXPECT_STREQ(SparseAttnCudaPathName(SparseAttnCudaPath::kWgmmaWs), "wgmma-ws");
}

// The released dims through each tensor-core path explicitly (the default takes wgmma or
// wgmma-ws there by the list blocks per unit):
// decode batches split (1, 4, 64 tokens) and unsplit (128), padded strides, a partial last
// block, sinks, and head counts that leave a wgmma group partly empty.
void CheckReleasedDimsOn(SparseAttnCudaPath path) {
  {
    PathOverride force(path);
    const char* name = SparseAttnCudaPathName(path);
    char label[96];
    for (int64_t tokens : {1, 4, 64, 128}) {
      const AttnCase c = DecodeCase(tokens, 64, 512, 128, 512, 4096, 0.1, 800 + tokens);
      ASSERT_EQ(PathOf(c), path);
      std::snprintf(label, sizeof(label), "%s 64x512 w640 tokens %ld", name, long(tokens));
      ExpectClose(c, RunBoth(c), label);
    }
    const AttnCase padded = DecodeCase(3, 64, 512, 128, 512, 1000, 0.05, 17);
    ASSERT_EQ(PathOf(padded, {8, 16, 24}), path);
    std::snprintf(label, sizeof(label), "%s padded strides", name);
    ExpectClose(padded, RunBoth(padded, {8, 16, 24}), label);
    // Width 150: blocks of 64, 64, 22 entries; 30 % -1.
    const AttnCase partial = RandomCase(5, 64, 512, 300, 150, 0.3, 19);
    std::snprintf(label, sizeof(label), "%s 64x512 w150", name);
    ExpectClose(partial, RunBoth(partial), label);
    AttnCase sinks = DecodeCase(4, 64, 512, 128, 512, 2000, 0.1, 21);
    for (size_t h = 0; h < sinks.sink.size(); ++h) sinks.sink[h] = h % 2 == 0 ? 30.0f : -60.0f;
    std::snprintf(label, sizeof(label), "%s sinks 30 / -60", name);
    ExpectClose(sinks, RunBoth(sinks), label);
    for (int64_t heads : {65, 128}) {
      const AttnCase c = RandomCase(3, heads, 512, 300, 200, 0.2, 900 + heads);
      std::snprintf(label, sizeof(label), "%s heads %ld x512 w200", name, long(heads));
      ExpectClose(c, RunBoth(c), label);
    }
  }
}

TEST(SparseAttnGpuTest, BothTensorPathsAtReleasedDims) {
  FS_SKIP_WITHOUT_GPU();
  CheckReleasedDimsOn(SparseAttnCudaPath::kWgmma);
  CheckReleasedDimsOn(SparseAttnCudaPath::kMmaSync);
}

// The same cases on the opt-in split-K S variant of the wgmma kernel (never the default).
TEST(SparseAttnGpuTest, WgmmaSplitKAtReleasedDims) {
  FS_SKIP_WITHOUT_GPU();
  CheckReleasedDimsOn(SparseAttnCudaPath::kWgmmaSplitK);
}

// The same cases on the warp-specialised wgmma kernel (producer warpgroup + mbarrier ring).
TEST(SparseAttnGpuTest, WgmmaWsAtReleasedDims) {
  FS_SKIP_WITHOUT_GPU();
  CheckReleasedDimsOn(SparseAttnCudaPath::kWgmmaWs);
}

// wgmma-ws runs wgmma's instructions on the same shared-memory tiles in the same order (only the
// gather and the synchronisation moved), so its output must equal wgmma's bit for bit; both are
// also checked against SparseAttnCpu within the tolerance. The first mismatches are printed with
// their token / head / dim.
void ExpectWsEqualsWgmma(const AttnCase& c, const char* label, const Layout& l = {}) {
  Outputs ws, base;
  {
    PathOverride force(SparseAttnCudaPath::kWgmmaWs);
    ASSERT_EQ(PathOf(c, l), SparseAttnCudaPath::kWgmmaWs);
    ws = RunBoth(c, l);
  }
  {
    PathOverride force(SparseAttnCudaPath::kWgmma);
    base = RunBoth(c, l);
  }
  int64_t diffs = 0;
  for (size_t i = 0; i < ws.gpu.size(); ++i) {
    if (ws.gpu[i] == base.gpu[i]) continue;
    if (diffs < 5) {
      const int64_t th = static_cast<int64_t>(i) / c.head_dim;
      std::printf("  %s: wgmma-ws != wgmma at token %ld head %ld dim %ld: %04x vs %04x\n", label,
                  long(th / c.heads), long(th % c.heads), long(i % c.head_dim), ws.gpu[i],
                  base.gpu[i]);
    }
    ++diffs;
  }
  std::printf("%-40s wgmma-ws vs wgmma: %ld of %zu elements differ\n", label, long(diffs),
              ws.gpu.size());
  EXPECT_EQ(diffs, 0) << label;
  ExpectClose(c, ws, label);
}

// The shape grid at the released dims: 1 / 8 / 64 tokens (split: 10, 10 and 2 splits of the 10
// blocks) and 256 (unsplit: the two tiles alternate five times per unit), window-only lists,
// ragged selected counts (token t keeps 512 − 37t mod 512 selected entries, the rest -1:
// trailing all--1 blocks), sinks ±, a 2560-entry list (40 blocks; 40 splits at 2 tokens).
TEST(SparseAttnGpuTest, WgmmaWsEqualsWgmma) {
  FS_SKIP_WITHOUT_GPU();
  char label[96];
  for (int64_t tokens : {1, 8, 64, 256}) {
    const AttnCase c = DecodeCase(tokens, 64, 512, 128, 512, 65536, 0.1, 1300 + tokens);
    std::snprintf(label, sizeof(label), "ws 64x512 w640 tokens %ld", long(tokens));
    ExpectWsEqualsWgmma(c, label);
  }
  for (int64_t tokens : {1, 8, 64}) {
    const AttnCase c = DecodeCase(tokens, 64, 512, 128, 0, 1, 0.0, 1400 + tokens);
    std::snprintf(label, sizeof(label), "ws window-only w128 tokens %ld", long(tokens));
    ExpectWsEqualsWgmma(c, label);
  }
  for (int64_t tokens : {8, 64}) {
    AttnCase c = DecodeCase(tokens, 64, 512, 128, 512, 8192, 0.05, 1500 + tokens);
    for (int64_t t = 0; t < tokens; ++t) {
      const int64_t keep = 512 - (37 * t) % 512;
      for (int64_t e = 128 + keep; e < c.width; ++e) c.indices[t * c.width + e] = -1;
    }
    std::snprintf(label, sizeof(label), "ws ragged selected tokens %ld", long(tokens));
    ExpectWsEqualsWgmma(c, label);
  }
  AttnCase sinks = DecodeCase(8, 64, 512, 128, 512, 4096, 0.1, 1600);
  for (size_t h = 0; h < sinks.sink.size(); ++h) sinks.sink[h] = h % 3 == 0 ? 25.0f : -40.0f;
  ExpectWsEqualsWgmma(sinks, "ws sinks 25 / -40");
  const AttnCase padded = DecodeCase(3, 64, 512, 128, 512, 1000, 0.05, 1700);
  ExpectWsEqualsWgmma(padded, "ws padded strides", {8, 16, 24});
  for (int64_t tokens : {2, 32}) {
    const AttnCase c = DecodeCase(tokens, 64, 512, 128, 2432, 20000, 0.1, 1800 + tokens);
    std::snprintf(label, sizeof(label), "ws w2560 tokens %ld", long(tokens));
    ExpectWsEqualsWgmma(c, label);
  }
  AttnCase none = DecodeCase(4, 64, 512, 128, 512, 4096, 0.0, 1900);
  for (int64_t e = 0; e < none.width; ++e) none.indices[2 * none.width + e] = -1;
  ExpectWsEqualsWgmma(none, "ws token 2 without a valid entry");
}

// The wgmma family's two combine forms run the same operations in the same order (M, the weights,
// denom and the states summed in split order), so each gives the other's bits at any split count
// (session 77 reordered the shared form's loads): 1 / 8 tokens (10 splits), 64 (2), 2 tokens at
// width 2560 (40 splits: three passes of the shared form, a short last batch), sinks, and a token
// without a valid entry; on wgmma and wgmma-ws.
TEST(SparseAttnGpuTest, CombineFormsGiveTheSameBits) {
  FS_SKIP_WITHOUT_GPU();
  std::vector<std::pair<AttnCase, std::string>> cases;
  for (int64_t tokens : {1, 8, 64}) {
    cases.emplace_back(DecodeCase(tokens, 64, 512, 128, 512, 65536, 0.1, 2100 + tokens),
                       "w640 tokens " + std::to_string(tokens));
  }
  cases.emplace_back(DecodeCase(2, 64, 512, 128, 2432, 20000, 0.1, 2200), "w2560 tokens 2");
  AttnCase sinks = DecodeCase(8, 64, 512, 128, 512, 4096, 0.1, 2300);
  for (size_t h = 0; h < sinks.sink.size(); ++h) sinks.sink[h] = h % 3 == 0 ? 25.0f : -40.0f;
  for (int64_t e = 0; e < sinks.width; ++e) sinks.indices[2 * sinks.width + e] = -1;
  cases.emplace_back(sinks, "sinks 25 / -40, token 2 without a valid entry");
  for (SparseAttnCudaPath path : {SparseAttnCudaPath::kWgmma, SparseAttnCudaPath::kWgmmaWs}) {
    PathOverride force(path);
    for (const auto& [c, label] : cases) {
      SCOPED_TRACE(::testing::Message() << SparseAttnCudaPathName(path) << " " << label);
      Outputs shared, per_thread;
      {
        CombineFormOverride form(attention_internal::SparseAttnCombineForm::kShared);
        shared = RunBoth(c);
      }
      {
        CombineFormOverride form(attention_internal::SparseAttnCombineForm::kPerThread);
        per_thread = RunBoth(c);
      }
      int64_t diffs = 0;
      for (size_t i = 0; i < shared.gpu.size(); ++i) diffs += shared.gpu[i] != per_thread.gpu[i];
      EXPECT_EQ(diffs, 0) << diffs << " of " << shared.gpu.size() << " outputs differ";
      ExpectClose(c, shared, label.c_str());
    }
  }
}

// The launchers accept a workspace at any address (README: "any alignment"; the split paths align
// their state region inside the 16 bytes of slack SparseAttnCudaWorkspaceBytes includes): a
// workspace 4 and 12 bytes past a 256-byte boundary gives the same bits as an aligned one on
// every tensor path, at token counts that split (1, 8) and one that does not (64).
TEST(SparseAttnGpuTest, MisalignedWorkspaceGivesTheSameBits) {
  FS_SKIP_WITHOUT_GPU();
  for (SparseAttnCudaPath path : {SparseAttnCudaPath::kMmaSync, SparseAttnCudaPath::kWgmma,
                                  SparseAttnCudaPath::kWgmmaSplitK, SparseAttnCudaPath::kWgmmaWs}) {
    PathOverride force(path);
    for (int64_t tokens : {1, 8, 64}) {
      const AttnCase c = DecodeCase(tokens, 64, 512, 128, 512, 65536, 0.1, 2000 + tokens);
      const Outputs aligned = RunBoth(c);
      for (int64_t offset : {4, 12}) {
        SCOPED_TRACE(::testing::Message() << SparseAttnCudaPathName(path) << " tokens " << tokens
                                          << " workspace offset " << offset);
        Layout l;
        l.ws_offset = offset;
        const Outputs shifted = RunBoth(c, l);
        EXPECT_EQ(shifted.gpu, aligned.gpu);
      }
    }
  }
}

TEST(SparseAttnGpuTest, LauncherErrors) {
  FS_SKIP_WITHOUT_GPU();
  const AttnCase c = RandomCase(2, 4, 128, 10, 8, 0.0, 9);
  DeviceBuffer dq = ToDevice(c.q), dkv = ToDevice(c.kv), didx = ToDevice(c.indices),
               dsink = ToDevice(c.sink), dout(c.q.size() * 2);
  DeviceBuffer dws(SparseAttnCudaWorkspaceBytes(c.heads, c.head_dim));
  SparseAttnParams p = LayoutParams(c, {});
  p.q = dq.get<uint16_t>();
  p.kv = dkv.get<uint16_t>();
  p.indices = didx.get<int32_t>();
  p.attn_sink = dsink.get<float>();
  p.out = dout.get<uint16_t>();
  p.workspace = dws.get();
  p.workspace_bytes = dws.bytes();
  EXPECT_TRUE(LaunchSparseAttn(p, nullptr).ok());
  SparseAttnParams bad = p;
  bad.workspace_bytes = SparseAttnCudaWorkspaceBytes(c.heads, c.head_dim) - 1;
  EXPECT_EQ(LaunchSparseAttn(bad, nullptr).code(), absl::StatusCode::kInvalidArgument);
  bad = p;
  bad.q = nullptr;
  EXPECT_EQ(LaunchSparseAttn(bad, nullptr).code(), absl::StatusCode::kInvalidArgument);
  bad = p;
  bad.softmax_scale = 0.0f;
  EXPECT_EQ(LaunchSparseAttn(bad, nullptr).code(), absl::StatusCode::kInvalidArgument);
  bad = p;
  bad.out = const_cast<uint16_t*>(p.q);
  EXPECT_EQ(LaunchSparseAttn(bad, nullptr).code(), absl::StatusCode::kInvalidArgument);
  bad = p;
  bad.tokens = 0;
  EXPECT_TRUE(LaunchSparseAttn(bad, nullptr).ok());
  CUDA_CHECK(cudaDeviceSynchronize());
}

}  // namespace
}  // namespace flashserve::kernels
