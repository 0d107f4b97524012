// Bench support: the Engram gate of one decode step on the GPU (model spec §4.8 "Module"), which
// no kernels/ family provides (the runtime computes it on the CPU,
// model/runtime/engram_forward.cc). A bench-local stand-in with the spec's arithmetic in fp32,
// deterministic (fixed reduction order), NOT checked against a CPU body: bench_decoder_layer_step
// times it and checks its outputs only for being finite and repeatable.
//
// Per token t and stream c (D = dim):
//   dot = Σ_d h[t,c,d] · (q_w[c,d] · k_w[c,d]) · key[t,c,d]
//         · rsqrt(mean_d h² + 1e-20) · rsqrt(mean_d key² + 1e-20) · D^-0.5
//   gate[t,c] = sigmoid(copysign(sqrt(max(|dot|, 1e-6)), dot))
// Pointers are device pointers; bf16 tensors are uint16 bit patterns; strides count elements.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

namespace flashserve::bench {

struct EngramGateParams {
  int64_t tokens = 0;
  int64_t dim = 0;                     // D
  const uint16_t* h = nullptr;         // bf16 [tokens, 4, D]: the residual streams
  int64_t h_stride = 0;                // elements between tokens, >= 4·D
  const uint16_t* key = nullptr;       // bf16 [tokens, 4, D]: the wkv output's key half
  int64_t key_stride = 0;              // elements between tokens, >= 4·D
  const uint16_t* q_weight = nullptr;  // bf16 [4, D]
  const uint16_t* k_weight = nullptr;  // bf16 [4, D]
  float* gate = nullptr;               // fp32 [tokens, 4] out
};

// Enqueues one kernel (a 256-thread block per (token, stream)) on `stream`; aborts on a CUDA
// launch error. tokens == 0 is a no-op.
void LaunchEngramGate(const EngramGateParams& p, cudaStream_t stream);

}  // namespace flashserve::bench
