// LaunchSparseAttn: validate (sparse_attn_params.cc, shared with the CPU body), pick the path and
// the instantiation, cut the launch into units (README.md "CUDA"), launch.
#include <cuda_runtime.h>

#include <algorithm>
#include <atomic>
#include <cstdint>

#include "absl/status/status.h"
#include "common/base/check.h"
#include "common/base/status_macros.h"
#include "kernels/attention/attention.h"
#include "kernels/attention/cuda/sparse_attn_kernels.cuh"
#include "kernels/attention/cuda/sparse_attn_path.h"
#include "kernels/attention/cuda/sparse_attn_wgmma.cuh"
#include "kernels/attention/cuda/sparse_attn_wgmma_cluster.cuh"
#include "kernels/attention/cuda/sparse_attn_wgmma_combine.cuh"
#include "kernels/attention/cuda/sparse_attn_wgmma_kernel.cuh"
#include "kernels/attention/cuda/sparse_attn_wgmma_rows.cuh"
#include "kernels/attention/cuda/sparse_attn_wgmma_ws.cuh"
#include "kernels/attention/sparse_attn_internal.h"
#include "kernels/common/cuda_check.h"
#include "kernels/common/per_device_cache.h"
#include "kernels/norm_rope/norm_rope.h"
#include "kernels/norm_rope/rope_table.h"
#include "kernels/quant/quant.h"

namespace flashserve::kernels {
namespace {

using attention_internal::SparseAttnCudaPath;
using attn_device::Geometry;
using attn_device::TensorShape;

static_assert(attention_internal::kSparseAttnWgmmaHeads == attn_device::WgmmaShape::kHeads,
              "the default path rule cuts units as the wgmma launchers do");

std::atomic<int> g_path_override{static_cast<int>(SparseAttnCudaPath::kAuto)};
std::atomic<int> g_decode_once_override{
    static_cast<int>(attention_internal::SparseAttnDecodeOnce::kAuto)};
std::atomic<int> g_combine_form_override{
    static_cast<int>(attention_internal::SparseAttnCombineForm::kAuto)};

// Grid-stride kernels never need more CTAs than this.
constexpr int64_t kMaxCtas = int64_t{1} << 20;

bool Aligned16(const void* ptr) { return reinterpret_cast<uintptr_t>(ptr) % 16 == 0; }

// The tensor path's preconditions: its head_dim instantiations, 16-byte rows for cp.async and
// 4-byte bf16 pairs for the stores.
bool TensorPathFits(const SparseAttnParams& p) {
  if (p.head_dim != 128 && p.head_dim != 256 && p.head_dim != 512) return false;
  if (!Aligned16(p.q) || !Aligned16(p.out) || (p.n_kv > 0 && !Aligned16(p.kv))) return false;
  for (int64_t s : {p.q_stride, p.q_head_stride, p.kv_stride, p.out_stride, p.out_head_stride}) {
    if (s % 8 != 0) return false;
  }
  return true;
}

// Cuts the launch into units of (token, group of `heads_per_cta` heads, split):
// attention_internal::SparseAttnCudaCutFor, which the default path rule reads too.
Geometry MakeGeometry(const SparseAttnParams& p, int64_t heads_per_cta) {
  const attention_internal::SparseAttnCudaCut cut =
      attention_internal::SparseAttnCudaCutFor(p.tokens, p.heads, p.width, heads_per_cta);
  Geometry geo;
  geo.groups = cut.groups;
  geo.blocks_per_split = cut.blocks_per_split;
  geo.splits = cut.splits;
  geo.units = p.tokens * geo.groups * geo.splits;
  // 16-byte aligned (SparseAttnCudaWorkspaceBytes includes the slack): the wgmma family's
  // states are written and read as float4.
  const uintptr_t ws = reinterpret_cast<uintptr_t>(p.workspace);
  geo.state = reinterpret_cast<float*>((ws + 15) & ~uintptr_t{15});
  return geo;
}

// Whether the wgmma family applies the RoPE itself (Geometry::rope): a table of at most
// kRopeMaxPairs pairs (the released rd = 64 is 32) and the caller's cos/sin (rope_cos_sin).
// Otherwise, and on the mma.sync and scalar paths, rope_out runs norm_rope's kernel on the output
// after the attention (LaunchOutRope) and rope_q is an error.
bool RopeFuses(const SparseAttnParams& p) {
  return p.rope != nullptr && p.rope->rope_dims() / 2 <= attn_device::kRopeMaxPairs &&
         p.rope_cos_sin != nullptr;
}

// The wgmma family's RoPE constants (pairs 0: none).
void SetRope(const SparseAttnParams& p, Geometry* geo) {
  if (!RopeFuses(p)) return;
  geo->rope.cos_sin = reinterpret_cast<const float2*>(p.rope_cos_sin);
  geo->rope.pairs = static_cast<int>(p.rope->rope_dims() / 2);
  geo->rope.first = static_cast<int>(p.head_dim - p.rope->rope_dims());
  geo->rope.q = p.rope_q;
  geo->rope.out = p.rope_out;
}

// The output's inverse RoPE as its own kernel, in place (the unfused form).
absl::Status LaunchOutRope(const SparseAttnParams& p, cudaStream_t stream) {
  return LaunchRope(attention_internal::OutputRopeParams(p), stream);
}

// Raises `kernel`'s dynamic shared-memory limit to `bytes` once per device (the attribute is per
// device; the check costs a cudaGetDevice, the attribute call a driver round trip that would
// otherwise sit on every launch's host path). Devices 0..63; others set it on every launch.
template <typename Kernel>
void SetSmemLimitOnce(Kernel* kernel, size_t bytes, std::atomic<uint64_t>& done) {
  int device = 0;
  CUDA_CHECK(cudaGetDevice(&device));
  const uint64_t bit = device < 64 ? uint64_t{1} << device : 0;
  if (bit != 0 && (done.load(std::memory_order_acquire) & bit) != 0) return;
  CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                  static_cast<int>(bytes)));
  done.fetch_or(bit, std::memory_order_release);
}

// The second kernel of a split launch: merges the states of the CTAs of `heads_per_cta` heads.
// Launched as a programmatic dependent (PDL) of the split kernel: its CTAs may be scheduled on
// idle SMs while the split kernel runs and wait there (griddepcontrol.wait) for its completion,
// so the second launch's latency overlaps the first kernel.
// `kernel` is CombineKernel<heads per CTA> (mma.sync path: a CTA per (token, head)) or
// WgmmaCombineKernel (the wgmma family's fragment-order states: a CTA per (token, group of 64
// heads, WgmmaCombineGroups<kShared>() float4 groups)).
using CombineFn = void (*)(SparseAttnParams, Geometry);
void LaunchCombine(CombineFn kernel, int64_t ctas, int threads, const SparseAttnParams& p,
                   const Geometry& geo, cudaStream_t stream) {
  cuda_common::LaunchPdl(kernel, dim3(static_cast<unsigned>(std::min(ctas, kMaxCtas))),
                         dim3(static_cast<unsigned>(threads)), 0, stream, p, geo);
}

template <int kHeadsPerCta>
void LaunchTensorCombine(const SparseAttnParams& p, const Geometry& geo, cudaStream_t stream) {
  CHECK(p.head_dim <= attn_device::kCombineMaxDim) << "CombineKernel: head_dim " << p.head_dim;
  LaunchCombine(attn_device::CombineKernel<kHeadsPerCta>, p.tokens * p.heads,
                attn_device::kCombineThreads, p, geo, stream);
}

// kRope: the instantiations with the RoPE code (Geometry::rope set); without it the kernels carry
// none of it (README.md "RoPE inside the attention": compiled in but unused, it slowed them).
template <bool kRope>
void LaunchWgmmaCombine(const SparseAttnParams& p, const Geometry& geo, cudaStream_t stream) {
  using W = attn_device::WgmmaShape;
  const int64_t items = geo.units / geo.splits;
  using attention_internal::SparseAttnCombineForm;
  const auto form =
      static_cast<SparseAttnCombineForm>(g_combine_form_override.load(std::memory_order_relaxed));
  if (form == SparseAttnCombineForm::kShared ||
      (form == SparseAttnCombineForm::kAuto &&
       attention_internal::SparseAttnCombineShared(geo.splits))) {
    LaunchCombine(attn_device::WgmmaCombineKernel<W::kD, true, kRope>,
                  items * attn_device::WgmmaCombineCtasPerItem<true>(),
                  attn_device::kWgmmaStateThreads, p, geo, stream);
  } else {
    LaunchCombine(attn_device::WgmmaCombineKernel<W::kD, false, kRope>,
                  items * attn_device::WgmmaCombineCtasPerItem<false>(),
                  attn_device::kWgmmaStateThreads, p, geo, stream);
  }
}

template <int kD, int kMT>
void LaunchTensor(const SparseAttnParams& p, cudaStream_t stream) {
  using S = TensorShape<kD, kMT>;
  const Geometry geo = MakeGeometry(p, S::kHeads);
  auto* kernel = attn_device::TensorKernel<kD, kMT>;
  static std::atomic<uint64_t> smem_set{0};
  SetSmemLimitOnce(kernel, S::kSmemBytes, smem_set);
  const auto ctas = static_cast<unsigned>(std::min(geo.units, kMaxCtas));
  kernel<<<ctas, S::kThreads, S::kSmemBytes, stream>>>(p, geo);
  CUDA_CHECK(cudaGetLastError());
  if (geo.splits > 1) LaunchTensorCombine<S::kHeads>(p, geo, stream);
}

// Launches one of the wgmma family's unit kernels (a CTA per unit up to `max_ctas`, grid-stride;
// the shared-memory limit set once per kernel and device) and, for a split list, the family's
// combine.
template <auto kKernel, size_t kSmem, int kThreads, bool kRope>
void LaunchWgmmaUnits(const SparseAttnParams& p, const Geometry& geo, cudaStream_t stream,
                      int64_t max_ctas = kMaxCtas) {
  static std::atomic<uint64_t> smem_set{0};
  SetSmemLimitOnce(kKernel, kSmem, smem_set);
  const auto ctas = static_cast<unsigned>(std::min(geo.units, max_ctas));
  kKernel<<<ctas, kThreads, kSmem, stream>>>(p, geo);
  CUDA_CHECK(cudaGetLastError());
  if (geo.splits > 1) LaunchWgmmaCombine<kRope>(p, geo, stream);
}

template <bool kSplitK, bool kRope>
void LaunchWgmmaKernel(const SparseAttnParams& p, const Geometry& geo, cudaStream_t stream) {
  using W = attn_device::WgmmaShape;
  LaunchWgmmaUnits<attn_device::WgmmaKernel<W::kD, kSplitK, kRope>,
                   kSplitK ? W::kSplitKSmemBytes : W::kSmemBytes, W::kThreads, kRope>(p, geo,
                                                                                      stream);
}

template <bool kSplitK>
void LaunchWgmma(const SparseAttnParams& p, cudaStream_t stream) {
  Geometry geo = MakeGeometry(p, attn_device::WgmmaShape::kHeads);
  SetRope(p, &geo);
  if (geo.rope.pairs > 0) return LaunchWgmmaKernel<kSplitK, true>(p, geo, stream);
  LaunchWgmmaKernel<kSplitK, false>(p, geo, stream);
}

// The row form's cluster-merge kernel (sparse_attn_wgmma_cluster.cuh) as a launch config: one
// unit per CTA, clusters of geo.splits CTAs (an item's splits, consecutive units). Its
// shared-memory limit and the non-portable cluster sizes (9–16) are opted into once per device.
template <bool kRope>
cudaLaunchConfig_t RowsClusterConfig(const Geometry& geo, cudaStream_t stream,
                                     cudaLaunchAttribute* attr) {
  auto* kernel = attn_device::WgmmaRowsKernel<kRope, true>;
  static std::atomic<uint64_t> set{0};
  SetSmemLimitOnce(kernel, attn_device::WgmmaRowsShape::kSmemBytes, set);
  static PerDeviceInt non_portable;
  non_portable.Get(CurrentDevice(), [kernel] {
    CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeNonPortableClusterSizeAllowed, 1));
    return 1;
  });
  cudaLaunchConfig_t config = {};
  config.gridDim = dim3(static_cast<unsigned>(geo.units));
  config.blockDim = dim3(attn_device::WgmmaShape::kThreads);
  config.dynamicSmemBytes = attn_device::WgmmaRowsShape::kSmemBytes;
  config.stream = stream;
  attr->id = cudaLaunchAttributeClusterDimension;
  attr->val.clusterDim.x = static_cast<unsigned>(geo.splits);
  attr->val.clusterDim.y = 1;
  attr->val.clusterDim.z = 1;
  config.attrs = attr;
  config.numAttrs = 1;
  return config;
}

// How many clusters of `splits` row-kernel CTAs the device runs at once (a driver query, once per
// device and split count; 0: such a cluster cannot run here, and the merge is never taken). H100,
// 10 splits: between 4 and 7 (kit s148 took it at 4 items, not at 8).
template <bool kRope>
int RowsClusterCapacity(int64_t splits) {
  static PerDeviceInt cache[attn_device::kWgmmaClusterMaxSplits + 1];
  return cache[splits].Get(CurrentDevice(), [splits] {
    Geometry geo;
    geo.splits = splits;
    geo.units = splits;
    cudaLaunchAttribute attr;
    const cudaLaunchConfig_t config = RowsClusterConfig<kRope>(geo, nullptr, &attr);
    int clusters = 0;
    if (cudaOccupancyMaxActiveClusters(&clusters, attn_device::WgmmaRowsKernel<kRope, true>,
                                       &config) != cudaSuccess) {
      (void)cudaGetLastError();  // not schedulable as a cluster here: never taken
      return 0;
    }
    return clusters;
  });
}

// Whether the row kernel merges geo's split states in clusters: only under
// SparseAttnCombineForm::kCluster, where 2–16 splits and the device runs such a cluster. Not by
// default: measured slower (session 85, H100, kit s148: 1 token graph 14.7 → 19.0 µs, the step
// 186 → 194 µs; under ncu the cluster kernel took 30.0 µs against 16.1 + 7.4 for the split kernel
// and the combine kernel) — each of the 10 CTAs takes in ~128 KB of the others' states through
// distributed shared memory, where the combine kernel spreads the 1.3 MB over 32 CTAs reading the
// L2 (kernels/attention/split_states.md "Cluster merge").
bool RowsMergeInCluster(const Geometry& geo) {
  using attention_internal::SparseAttnCombineForm;
  if (geo.splits < 2 || geo.splits > attn_device::kWgmmaClusterMaxSplits) return false;
  const auto form =
      static_cast<SparseAttnCombineForm>(g_combine_form_override.load(std::memory_order_relaxed));
  if (form != SparseAttnCombineForm::kCluster) return false;
  const int capacity = geo.rope.pairs > 0 ? RowsClusterCapacity<true>(geo.splits)
                                          : RowsClusterCapacity<false>(geo.splits);
  return capacity > 0;
}

// The row form's wgmma kernel (sparse_attn_wgmma_rows.cuh): same units, states and combine as
// LaunchWgmma, WgmmaShape's bf16 layout plus the per-thread slots; or, where RowsMergeInCluster
// (opt-in), its cluster-merge instantiation (no combine launch, no states in the workspace).
template <bool kRope>
void LaunchWgmmaRowsKernel(const SparseAttnParams& p, const Geometry& geo, cudaStream_t stream) {
  if (RowsMergeInCluster(geo)) {
    cudaLaunchAttribute attr;
    const cudaLaunchConfig_t config = RowsClusterConfig<kRope>(geo, stream, &attr);
    CUDA_CHECK(cudaLaunchKernelEx(&config, attn_device::WgmmaRowsKernel<kRope, true>, p, geo));
    return;
  }
  LaunchWgmmaUnits<attn_device::WgmmaRowsKernel<kRope>, attn_device::WgmmaRowsShape::kSmemBytes,
                   attn_device::WgmmaShape::kThreads, kRope>(p, geo, stream);
}

Geometry RowsGeometry(const SparseAttnParams& p) {
  Geometry geo = MakeGeometry(p, attn_device::WgmmaShape::kHeads);
  SetRope(p, &geo);
  return geo;
}

void LaunchWgmmaRows(const SparseAttnParams& p, cudaStream_t stream) {
  const Geometry geo = RowsGeometry(p);
  if (geo.rope.pairs > 0) return LaunchWgmmaRowsKernel<true>(p, geo, stream);
  LaunchWgmmaRowsKernel<false>(p, geo, stream);
}

// The warp-specialised wgmma kernel (sparse_attn_wgmma_ws.cuh): same units, states and combine as
// LaunchWgmma, 384 threads. kRows: the row form (the producer gathers and decodes serving rows).
// Persistent: one CTA per SM at most (its shared memory allows one), each walking units
// grid-stride, so that a unit's first block and Q are gathered during the previous unit's tail
// (sparse_attn_wgmma_ws.cuh, WsProduceUnit / WsConsumeUnit).
template <bool kRope, bool kRows>
void LaunchWgmmaWsKernel(const SparseAttnParams& p, const Geometry& geo, cudaStream_t stream) {
  using WS = attn_device::WgmmaWsShape;
  LaunchWgmmaUnits<attn_device::WgmmaWsKernel<attn_device::WgmmaShape::kD, kRope, kRows>,
                   kRows ? WS::kRowsSmemBytes : WS::kSmemBytes, WS::kThreads, kRope>(
      p, geo, stream, SmCount(CurrentDevice()));
}

template <bool kRows = false>
void LaunchWgmmaWs(const SparseAttnParams& p, cudaStream_t stream) {
  Geometry geo = MakeGeometry(p, attn_device::WgmmaShape::kHeads);
  SetRope(p, &geo);
  if (geo.rope.pairs > 0) return LaunchWgmmaWsKernel<true, kRows>(p, geo, stream);
  LaunchWgmmaWsKernel<false, kRows>(p, geo, stream);
}

// The row form's preconditions (attention.h): the wgmma kernel's dims and cp.async alignment.
absl::Status CheckRowFormFits(const SparseAttnParams& p) {
  const SparseAttnKvRows& r = p.kv_rows;
  bool fits = p.head_dim == attn_device::WgmmaShape::kD && Aligned16(p.q) && Aligned16(p.out);
  for (int64_t s : {p.q_stride, p.q_head_stride, p.out_stride, p.out_head_stride}) {
    fits = fits && s % 8 == 0;
  }
  fits = fits && (r.n_window == 0 || (Aligned16(r.window) && r.window_stride % 16 == 0));
  fits =
      fits && (r.n_compressed == 0 || (Aligned16(r.compressed) && r.compressed_stride % 16 == 0));
  if (fits) return absl::OkStatus();
  return absl::InvalidArgumentError(
      "SparseAttn: kv_rows on CUDA needs head_dim 512, 16-byte aligned q / out / row pools, q and "
      "out strides multiples of 8 elements and row strides multiples of 16 bytes");
}

// The decode-once variant (attention.h SparseAttnKvRows::decoded): the bf16 pool the rows decode
// to, as the indices address it (window rows first, then the compressed rows).
SparseAttnParams DecodedPoolParams(const SparseAttnParams& p) {
  SparseAttnParams b = p;
  b.kv_rows = SparseAttnKvRows{};
  b.kv = p.kv_rows.decoded;
  b.n_kv = p.kv_rows.n_window + p.kv_rows.n_compressed;
  b.kv_stride = p.head_dim;
  return b;
}

// The two pools' DecodeRows params (window rows, then compressed rows), validated before either is
// enqueued so that a failure enqueues nothing.
absl::Status DecodeRowsOnce(const SparseAttnParams& p, cudaStream_t stream) {
  const SparseAttnKvRows& r = p.kv_rows;
  quant::DecodeRowsParams parts[2];
  int n = 0;
  if (r.n_window > 0) {
    parts[n++] = {quant::KvRowKind::kSwaKv, r.n_window, p.head_dim, r.window,
                  r.window_stride,          r.decoded,  p.head_dim};
  }
  if (r.n_compressed > 0) {
    parts[n++] = {quant::KvRowKind::kMainKv,
                  r.n_compressed,
                  p.head_dim,
                  r.compressed,
                  r.compressed_stride,
                  r.decoded + r.n_window * p.head_dim,
                  p.head_dim};
  }
  for (int i = 0; i < n; ++i) {
    quant::DequantizeParams unused;
    RETURN_IF_ERROR(quant::ToDequantizeParams(parts[i], &unused));
  }
  for (int i = 0; i < n; ++i) RETURN_IF_ERROR(quant::LaunchDecodeRows(parts[i], stream));
  return absl::OkStatus();
}

// SparseAttnCudaPathFor for params that do not decode once, under the override `want`.
SparseAttnCudaPath PathWithoutDecodeOnce(const SparseAttnParams& p, SparseAttnCudaPath want) {
  // The row form has two bodies (the launcher rejects row-form params they do not fit): wgmma,
  // the default, and wgmma-ws (its producer warpgroup gathers and decodes the rows; opt-in for
  // A/B: slower at every measured batch, README.md "Row form on wgmma-ws"), taken only when
  // forced; any other override is ignored.
  if (attention_internal::UsesKvRows(p)) {
    return want == SparseAttnCudaPath::kWgmmaWs ? SparseAttnCudaPath::kWgmmaWs
                                                : SparseAttnCudaPath::kWgmma;
  }
  if (want == SparseAttnCudaPath::kScalar || !TensorPathFits(p)) return SparseAttnCudaPath::kScalar;
  // The wgmma kernel zero-fills missing heads of a group, so any head count works; by default it
  // takes only whole groups of 64 (the released dims), where no tensor-core row is wasted.
  const bool wgmma_fits = p.head_dim == attn_device::WgmmaShape::kD;
  if (want == SparseAttnCudaPath::kMmaSync || !wgmma_fits) return SparseAttnCudaPath::kMmaSync;
  if (want == SparseAttnCudaPath::kWgmmaSplitK) return SparseAttnCudaPath::kWgmmaSplitK;
  if (want == SparseAttnCudaPath::kWgmmaWs) return SparseAttnCudaPath::kWgmmaWs;
  if (want == SparseAttnCudaPath::kWgmma) return SparseAttnCudaPath::kWgmma;
  if (p.heads % attn_device::WgmmaShape::kHeads == 0) {
    return attention_internal::SparseAttnWsPays(p.tokens, p.heads, p.width)
               ? SparseAttnCudaPath::kWgmmaWs
               : SparseAttnCudaPath::kWgmma;
  }
  // rope_q exists on the wgmma family only, which takes any head count (a partial last group).
  return p.rope_q ? SparseAttnCudaPath::kWgmma : SparseAttnCudaPath::kMmaSync;
}

// The decoded pool's body: the bf16 pool's default (wgmma-ws where SparseAttnWsPays, else wgmma),
// or the wgmma / wgmma-ws override; other overrides are ignored, as for the row form, so that the
// output keeps the row kernel's bits.
SparseAttnCudaPath DecodeOncePath(const SparseAttnParams& pool, SparseAttnCudaPath want) {
  if (want == SparseAttnCudaPath::kWgmma || want == SparseAttnCudaPath::kWgmmaWs) return want;
  return attention_internal::SparseAttnWsPays(pool.tokens, pool.heads, pool.width)
             ? SparseAttnCudaPath::kWgmmaWs
             : SparseAttnCudaPath::kWgmma;
}

template <int kD>
void LaunchTensorForHeads(const SparseAttnParams& p, cudaStream_t stream) {
  if (p.heads <= 16) {
    LaunchTensor<kD, 1>(p, stream);
  } else if (p.heads <= 32) {
    LaunchTensor<kD, 2>(p, stream);
  } else {
    LaunchTensor<kD, 4>(p, stream);
  }
}

void LaunchScalar(const SparseAttnParams& p, cudaStream_t stream) {
  const size_t smem = attn_device::ScalarSmemBytes(p.head_dim);  // <= 33 KB at head_dim 4096
  const auto ctas = static_cast<unsigned>(std::min(p.tokens * p.heads, kMaxCtas));
  attn_device::ScalarKernel<<<ctas, attn_device::kScalarThreads, smem, stream>>>(p);
  CUDA_CHECK(cudaGetLastError());
}

}  // namespace

namespace attention_internal {

const char* SparseAttnCudaPathName(SparseAttnCudaPath path) {
  switch (path) {
    case SparseAttnCudaPath::kAuto:
      return "auto";
    case SparseAttnCudaPath::kScalar:
      return "scalar";
    case SparseAttnCudaPath::kMmaSync:
      return "mma.sync";
    case SparseAttnCudaPath::kWgmma:
      return "wgmma";
    case SparseAttnCudaPath::kWgmmaSplitK:
      return "wgmma-splitk";
    case SparseAttnCudaPath::kWgmmaWs:
      return "wgmma-ws";
  }
  return "?";
}

void SetSparseAttnCudaPathOverride(SparseAttnCudaPath path) {
  g_path_override.store(static_cast<int>(path), std::memory_order_relaxed);
}

void SetSparseAttnDecodeOnceOverride(SparseAttnDecodeOnce mode) {
  g_decode_once_override.store(static_cast<int>(mode), std::memory_order_relaxed);
}

void SetSparseAttnCombineFormOverride(SparseAttnCombineForm form) {
  g_combine_form_override.store(static_cast<int>(form), std::memory_order_relaxed);
}

bool SparseAttnDecodesOnce(const SparseAttnParams& p) {
  const SparseAttnKvRows& r = p.kv_rows;
  if (!UsesKvRows(p) || r.decoded == nullptr || !CheckRowFormFits(p).ok()) return false;
  // The pool's default path must be the wgmma family (the row kernel's bits): whole head groups.
  if (p.heads % kSparseAttnWgmmaHeads != 0) return false;
  // quant's GPU decoder takes a launch's rows · channels / 8 below 2^31 (its PlanGrid, in 8-value
  // units per row).
  const int64_t units_per_row = p.head_dim / 8;
  for (int64_t rows : {r.n_window, r.n_compressed}) {
    if (rows > (int64_t{1} << 31) / units_per_row - 1) return false;
  }
  switch (
      static_cast<SparseAttnDecodeOnce>(g_decode_once_override.load(std::memory_order_relaxed))) {
    case SparseAttnDecodeOnce::kOff:
      return false;
    case SparseAttnDecodeOnce::kOn:
      return true;
    case SparseAttnDecodeOnce::kAuto:
      break;
  }
  return SparseAttnDecodeOncePays(p.tokens, p.width, r.n_window + r.n_compressed);
}

bool SparseAttnMergesInCluster(const SparseAttnParams& p) {
  if (!UsesKvRows(p) || SparseAttnDecodesOnce(p) || !CheckRowFormFits(p).ok()) return false;
  if (SparseAttnCudaPathFor(p) != SparseAttnCudaPath::kWgmma) return false;
  return RowsMergeInCluster(RowsGeometry(p));
}

SparseAttnCudaPath SparseAttnCudaPathFor(const SparseAttnParams& p) {
  const auto want =
      static_cast<SparseAttnCudaPath>(g_path_override.load(std::memory_order_relaxed));
  return SparseAttnDecodesOnce(p) ? DecodeOncePath(DecodedPoolParams(p), want)
                                  : PathWithoutDecodeOnce(p, want);
}

}  // namespace attention_internal

absl::Status LaunchSparseAttn(const SparseAttnParams& p, CUstream_st* stream) {
  RETURN_IF_ERROR(attention_internal::ValidateSparseAttnFor(
      p, SparseAttnCudaWorkspaceBytes(p.heads, p.head_dim), /*host_values=*/false));
  const bool rows = attention_internal::UsesKvRows(p);
  if (rows) RETURN_IF_ERROR(CheckRowFormFits(p));
  // Each override is read once, so that the checks below hold for what is launched.
  const auto want =
      static_cast<SparseAttnCudaPath>(g_path_override.load(std::memory_order_relaxed));
  const bool once = attention_internal::SparseAttnDecodesOnce(p);
  // a: what the attention body reads — the decoded bf16 pool when decoding once.
  const SparseAttnParams a = once ? DecodedPoolParams(p) : p;
  const SparseAttnCudaPath path = once ? DecodeOncePath(a, want) : PathWithoutDecodeOnce(a, want);
  const bool wgmma_family = path == SparseAttnCudaPath::kWgmma ||
                            path == SparseAttnCudaPath::kWgmmaSplitK ||
                            path == SparseAttnCudaPath::kWgmmaWs;
  if (a.rope_q && !(wgmma_family && RopeFuses(a))) {
    return absl::InvalidArgumentError(
        "SparseAttn: rope_q on CUDA needs the wgmma path (head_dim 512, 16-byte aligned q / kv / "
        "out, strides multiples of 8 elements, no override to another path), a table of at "
        "most 64 rotated dims and rope_cos_sin (the positions' cos/sin: norm_rope "
        "LaunchRopeCosSin)");
  }
  const bool rope_out_after = a.rope_out && !(wgmma_family && RopeFuses(a));
  if (p.tokens == 0) return absl::OkStatus();
  if (once) RETURN_IF_ERROR(DecodeRowsOnce(p, stream));
  if (rows && !once) {
    if (path == SparseAttnCudaPath::kWgmmaWs) {
      LaunchWgmmaWs<true>(a, stream);
    } else {
      LaunchWgmmaRows(a, stream);
    }
  } else if (path == SparseAttnCudaPath::kScalar) {
    LaunchScalar(a, stream);
  } else if (path == SparseAttnCudaPath::kWgmma) {
    LaunchWgmma<false>(a, stream);
  } else if (path == SparseAttnCudaPath::kWgmmaSplitK) {
    LaunchWgmma<true>(a, stream);
  } else if (path == SparseAttnCudaPath::kWgmmaWs) {
    LaunchWgmmaWs(a, stream);
  } else if (a.head_dim == 128) {
    LaunchTensorForHeads<128>(a, stream);
  } else if (a.head_dim == 256) {
    LaunchTensorForHeads<256>(a, stream);
  } else {
    LaunchTensorForHeads<512>(a, stream);
  }
  if (rope_out_after) return LaunchOutRope(a, stream);
  return absl::OkStatus();
}

}  // namespace flashserve::kernels
