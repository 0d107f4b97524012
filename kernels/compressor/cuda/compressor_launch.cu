// CUDA launchers of the compressor: validate (compressor_params.cc, shared with the CPU bodies),
// pick the instantiation, size the grid, launch; and the device state's copies.
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "common/base/status_macros.h"
#include "kernels/common/cuda_check.h"
#include "kernels/compressor/compressor_params.h"
#include "kernels/compressor/cuda/compressor_kernels.cuh"

namespace flashserve::kernels {
namespace {

using compressor_device::CompressArgs;
using compressor_device::CompressBatchArgs;
using compressor_device::CompressBatchSequence;
using compressor_device::Input;
using compressor_device::kFinalizeThreads;
using compressor_device::kThreads;

// Rows are walked grid-stride; more blocks than this only queue.
constexpr int64_t kMaxBlocks = int64_t{1} << 20;
// A warp per latent row up to this many channels; a whole block per row above.
constexpr int64_t kWarpRowMaxChannels = 1024;

int CeilLog2(int64_t n) {
  int b = 0;
  while ((int64_t{1} << b) < n) ++b;
  return b;
}

bool Aligned(const void* ptr, int64_t stride_bytes, int64_t n) {
  return reinterpret_cast<uintptr_t>(ptr) % static_cast<uintptr_t>(n) == 0 && stride_bytes % n == 0;
}

// CompressArgs::vec: ratio 2 or 1 on a warp per row at C = 128·kVecChunks (512, released),
// every fp32 row (this call's and, at ratio 2, the state's) 16-byte aligned (bf16 kv rows
// 8-byte), the latent rows and the norm weight 8-byte.
bool VecRows(const CompressArgs& a) {
  const CompressProjectedParams& p = a.p;
  if (p.channels != 128 * compressor_device::kVecChunks ||
      !Aligned(p.latent, 2 * p.latent_stride, 8) || !Aligned(p.norm_weight, 0, 8)) {
    return false;
  }
  if (p.ratio == 1) {
    return p.kv_bf16 != nullptr ? Aligned(p.kv_bf16, 2 * p.kv_stride, 8)
                                : Aligned(p.kv, 4 * p.kv_stride, 16);
  }
  return p.ratio == 2 && p.kv != nullptr && Aligned(p.kv, 4 * p.kv_stride, 16) &&
         Aligned(p.score, 4 * p.score_stride, 16) && Aligned(a.state_kv, 4 * p.channels, 16) &&
         Aligned(a.state_score, 4 * p.channels, 16);
}

template <int kGroup, Input kInput, int kRatio>
void LaunchCompress(const CompressArgs& a, cudaStream_t stream) {
  constexpr int kBlockThreads = compressor_device::SingleBlockThreads(kGroup);
  constexpr int64_t kRowsPerBlock = kBlockThreads / kGroup;
  // At least one block: block 0 also writes the state's new open group.
  const int64_t blocks =
      std::clamp<int64_t>((a.groups + kRowsPerBlock - 1) / kRowsPerBlock, 1, kMaxBlocks);
  if constexpr (kGroup == 32 && kInput == Input::kPool && kRatio == 2) {
    compressor_device::
        CompressRatio2Kernel<<<static_cast<unsigned>(blocks), kBlockThreads, 0, stream>>>(a);
  } else {
    compressor_device::CompressKernel<kGroup, kInput, kRatio>
        <<<static_cast<unsigned>(blocks), kBlockThreads, 0, stream>>>(a);
  }
  CUDA_CHECK(cudaGetLastError());
}

template <int kGroup>
void LaunchCompressFor(const CompressArgs& a, cudaStream_t stream) {
  if (a.p.ratio == 1) {
    if (a.p.kv_bf16 != nullptr) {
      LaunchCompress<kGroup, Input::kBf16, 1>(a, stream);
    } else {
      LaunchCompress<kGroup, Input::kCastF32, 1>(a, stream);
    }
  } else if (a.p.ratio == 2) {  // the released model
    LaunchCompress<kGroup, Input::kPool, 2>(a, stream);
  } else {
    LaunchCompress<kGroup, Input::kPool, 0>(a, stream);
  }
}

// ---- batched ----

// Descriptor capacities: a small one (≈2.6 KB of parameters) for decode batches up to 32
// sequences, a medium one (≈10 KB) up to 128, the large one (≈31 KB, the CUDA 12.1+ limit is
// 32,764 B) above. The launch pays for the parameters it carries: at 64 sequences the medium tier
// took 14.9–15.0 µs against the large one's 16.6–17.1 (H200, bench_compressor, session 49).
constexpr int kSmallBatch = 32;
constexpr int kMediumBatch = 128;
// The batched launch takes the vector path (every sequence's rows permitting) up to this many
// sequences. H200, bench_compressor's ratio-2 decode, scalar / vector µs: B = 1 15.6 / 6.9–7.4,
// 8 15.8–16.1 / 7.3–8.2, 64 22.9–23.6 / 16.6–16.9; at 256 and 1,024 the vector path measured
// 25.0–26.0 / 78.6–81.3 against 21.6–26.0 / 68.7–80.4 (those run-to-run spreads are ±15 %), so
// the larger launches (a 256-thread block per sequence of which one warp works, 64 registers on
// the vector path) keep the scalar path until a layout with more sequences per block exists.
constexpr int kBatchVecMaxSequences = 64;
constexpr int kLargeBatch = static_cast<int>(kCompressBatchPerLaunch);
static_assert(sizeof(CompressBatchArgs<kLargeBatch>) <= 32764,
              "batched compressor descriptors exceed the kernel parameter limit");

template <int kGroup, Input kInput, int kRatio, int kCapacity>
void LaunchBatchKernel(const CompressBatchArgs<kCapacity>& b, int count, cudaStream_t stream) {
  constexpr int64_t kRowsPerBlock = kThreads / kGroup;
  int64_t most = 0;
  for (int i = 0; i < count; ++i) most = std::max(most, b.seq[i].groups);
  // At least one block per sequence: block 0 also writes that sequence's new open group.
  const int64_t blocks =
      std::clamp<int64_t>((most + kRowsPerBlock - 1) / kRowsPerBlock, 1, kMaxBlocks / kLargeBatch);
  compressor_device::CompressBatchKernel<kGroup, kInput, kRatio, kCapacity>
      <<<dim3(static_cast<unsigned>(blocks), static_cast<unsigned>(count)), kThreads, 0, stream>>>(
          b);
  CUDA_CHECK(cudaGetLastError());
}

template <int kGroup, int kCapacity>
void LaunchBatchFor(const CompressBatchArgs<kCapacity>& b, bool bf16, int count,
                    cudaStream_t stream) {
  if (b.ratio == 1) {
    if (bf16) {
      LaunchBatchKernel<kGroup, Input::kBf16, 1>(b, count, stream);
    } else {
      LaunchBatchKernel<kGroup, Input::kCastF32, 1>(b, count, stream);
    }
  } else if (b.ratio == 2) {  // the released model
    LaunchBatchKernel<kGroup, Input::kPool, 2>(b, count, stream);
  } else {
    LaunchBatchKernel<kGroup, Input::kPool, 0>(b, count, stream);
  }
}

// Enqueues the sequences with tokens > 0 in launches of kCapacity descriptors, in order, and
// advances each state's host counters / writes each groups_emitted as the single launcher does.
// The params have been validated.
template <int kCapacity>
void LaunchBatchChunks(const CompressProjectedBatchParams& p, CompressorDeviceState* const* states,
                       cudaStream_t stream) {
  const CompressProjectedParams& first = p.sequences[0];
  const bool bf16 = first.kv_bf16 != nullptr;
  CompressBatchArgs<kCapacity> b;
  b.ratio = first.ratio;
  b.channels = first.channels;
  b.kv_stride = first.kv_stride;
  b.score_stride = first.score_stride;
  b.latent_stride = first.latent_stride;
  b.norm_weight = first.norm_weight;
  b.norm_eps = first.norm_eps;
  b.sum_bits = CeilLog2(first.channels);
  b.vec = true;  // until a sequence of the launch does not allow it
  int count = 0;
  auto flush = [&] {
    if (count == 0) return;
    b.vec = b.vec && count <= kBatchVecMaxSequences;
    if (b.channels <= kWarpRowMaxChannels) {
      LaunchBatchFor<32>(b, bf16, count, stream);
    } else {
      LaunchBatchFor<kThreads>(b, bf16, count, stream);
    }
    count = 0;
    b.vec = true;
  };
  for (int64_t i = 0; i < p.batch; ++i) {
    const CompressProjectedParams& q = p.sequences[i];
    CompressorDeviceState* state = states[i];
    if (q.tokens == 0) {
      *q.groups_emitted = 0;
      continue;
    }
    CompressArgs one;  // the single call's vector-path conditions on this sequence's rows
    one.p = q;
    one.state_kv = state->kv;
    one.state_score = state->score;
    b.vec = b.vec && VecRows(one);
    CompressBatchSequence& d = b.seq[count];
    d.kv = bf16 ? static_cast<const void*>(q.kv_bf16) : static_cast<const void*>(q.kv);
    d.score = q.score;
    d.latent = q.latent;
    d.group_index = q.group_index;
    d.state_kv = state->kv;
    d.state_score = state->score;
    d.tokens = q.tokens;
    d.pending = q.ratio == 1 ? 0 : state->pending;
    const int64_t total = d.pending + q.tokens;
    d.groups = total / q.ratio;
    d.first_group = (q.start_pos - d.pending) / q.ratio;
    *q.groups_emitted = d.groups;
    state->pending = total - d.groups * q.ratio;
    state->next_pos = q.start_pos + q.tokens;
    if (++count == kCapacity) flush();
  }
  flush();
}

absl::Status CheckStateShape(const CompressorState& host, const CompressorDeviceState& device) {
  if (host.ratio != device.ratio || host.channels != device.channels ||
      host.kv.size() != static_cast<size_t>((host.ratio - 1) * host.channels) ||
      host.score.size() != host.kv.size()) {
    return absl::InvalidArgumentError(
        "compressor: host and device states differ in ratio / channels (or the host state was "
        "not made by MakeCompressorState)");
  }
  if (device.ratio >= 2 && (device.kv == nullptr || device.score == nullptr)) {
    return absl::InvalidArgumentError("compressor: device state rows are null");
  }
  return absl::OkStatus();
}

}  // namespace

absl::Status LaunchCompressProjected(const CompressProjectedParams& p, CompressorDeviceState* state,
                                     CUstream_st* stream) {
  if (state == nullptr) return absl::InvalidArgumentError("compressor: state is null");
  RETURN_IF_ERROR(ValidateCompressProjected(p, *state));
  if (p.tokens == 0) {
    *p.groups_emitted = 0;
    return absl::OkStatus();
  }
  CompressArgs a;
  a.p = p;
  a.state_kv = state->kv;
  a.state_score = state->score;
  a.pending = p.ratio == 1 ? 0 : state->pending;
  const int64_t total = a.pending + p.tokens;
  a.groups = total / p.ratio;
  a.first_group = (p.start_pos - a.pending) / p.ratio;
  a.sum_bits = CeilLog2(p.channels);
  a.vec = VecRows(a);
  if (p.channels <= kWarpRowMaxChannels) {
    LaunchCompressFor<32>(a, stream);
  } else {
    LaunchCompressFor<kThreads>(a, stream);
  }
  *p.groups_emitted = a.groups;
  state->pending = total - a.groups * p.ratio;
  state->next_pos = p.start_pos + p.tokens;
  return absl::OkStatus();
}

absl::Status LaunchCompressProjectedBatch(const CompressProjectedBatchParams& p,
                                          CompressorDeviceState* const* states,
                                          CUstream_st* stream) {
  RETURN_IF_ERROR(ValidateCompressProjectedBatch(p, states));
  int64_t active = 0;
  for (int64_t i = 0; i < p.batch; ++i) active += p.sequences[i].tokens > 0 ? 1 : 0;
  if (active <= kSmallBatch) {
    LaunchBatchChunks<kSmallBatch>(p, states, stream);
  } else if (active <= kMediumBatch) {
    LaunchBatchChunks<kMediumBatch>(p, states, stream);
  } else {
    LaunchBatchChunks<kLargeBatch>(p, states, stream);
  }
  return absl::OkStatus();
}

absl::Status LaunchFinalizeCompressedKv(const FinalizeCompressedKvParams& p, CUstream_st* stream) {
  RETURN_IF_ERROR(ValidateFinalizeCompressedKvLayout(p));
  if (p.rows == 0) return absl::OkStatus();
  compressor_device::FinalizeArgs a;
  a.p = p;
  const auto freqs = p.table->frequencies();
  a.pairs = static_cast<int>(freqs.size());
  std::copy(freqs.begin(), freqs.end(), a.freqs);
  // 16-byte rows of latent and kv, 8-byte serving rows: the vector accesses.
  const bool vec = Aligned(p.latent, 2 * p.latent_stride, 16) &&
                   Aligned(p.kv, 2 * p.kv_stride, 16) &&
                   (p.cache_rows == nullptr || Aligned(p.cache_rows, p.cache_row_stride, 8));
  const int64_t rows_per_block =
      vec ? compressor_device::kFinalizeRows<true> : compressor_device::kFinalizeRows<false>;
  const size_t smem = vec ? compressor_device::FinalizeSmemBytes<true>(a.pairs)
                          : compressor_device::FinalizeSmemBytes<false>(a.pairs);
  const int64_t blocks = std::min((p.rows + rows_per_block - 1) / rows_per_block, kMaxBlocks);
  const auto kernel =
      vec ? compressor_device::FinalizeKernel<true> : compressor_device::FinalizeKernel<false>;
  kernel<<<static_cast<unsigned>(blocks), kFinalizeThreads, smem, stream>>>(a);
  CUDA_CHECK(cudaGetLastError());
  return absl::OkStatus();
}

absl::Status UploadCompressorState(const CompressorState& host, CompressorDeviceState* device,
                                   CUstream_st* stream) {
  if (device == nullptr) return absl::InvalidArgumentError("compressor: device state is null");
  RETURN_IF_ERROR(CheckStateShape(host, *device));
  if (host.pending < 0 || host.pending >= host.ratio || host.next_pos < host.pending) {
    return absl::InvalidArgumentError(absl::StrCat(
        "compressor: host state holds pending = ", host.pending, ", next_pos = ", host.next_pos));
  }
  const size_t bytes = host.kv.size() * sizeof(float);
  if (bytes > 0) {
    CUDA_CHECK(cudaMemcpyAsync(device->kv, host.kv.data(), bytes, cudaMemcpyHostToDevice, stream));
    CUDA_CHECK(
        cudaMemcpyAsync(device->score, host.score.data(), bytes, cudaMemcpyHostToDevice, stream));
  }
  device->pending = host.pending;
  device->next_pos = host.next_pos;
  return absl::OkStatus();
}

absl::Status DownloadCompressorState(const CompressorDeviceState& device, CompressorState* host,
                                     CUstream_st* stream) {
  if (host == nullptr) return absl::InvalidArgumentError("compressor: host state is null");
  RETURN_IF_ERROR(CheckStateShape(*host, device));
  const size_t bytes = host->kv.size() * sizeof(float);
  if (bytes > 0) {
    CUDA_CHECK(cudaMemcpyAsync(host->kv.data(), device.kv, bytes, cudaMemcpyDeviceToHost, stream));
    CUDA_CHECK(
        cudaMemcpyAsync(host->score.data(), device.score, bytes, cudaMemcpyDeviceToHost, stream));
  }
  CUDA_CHECK(cudaStreamSynchronize(stream));
  host->pending = device.pending;
  host->next_pos = device.next_pos;
  return absl::OkStatus();
}

}  // namespace flashserve::kernels
