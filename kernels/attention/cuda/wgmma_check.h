// A one-CTA check of the wgmma path's primitives (swizzled tiles, descriptors, fences, the
// accumulator and register-A fragment layouts) for the GPU test; no CUDA header. Not part of the
// launcher.
#pragma once

#include <cstdint>

namespace flashserve::kernels::attention_internal {

// The MN-major descriptor offsets (bytes) the wgmma path uses for P·V's B operand.
uint32_t WgmmaPvLeadingOffset();
uint32_t WgmmaPvStrideOffset();

// One CTA of the wgmma path (256 threads) on device buffers, through the kernel's own helpers:
// q and kv (bf16 [64][512], packed) are staged with cp.async into the 128-byte-swizzled tiles;
// s = q·kv^T (fp32 [64][64]: warpgroup g computes columns 32g.. with WgmmaQk); p (bf16 [64][64])
// is loaded into the register-A layout straight from global memory (lane mapping as documented
// in kernels/common/wgmma.cuh, independently of the kernel's S → P packing) and
// o = p·kv (fp32 [64][512]: warpgroup g computes columns 256g.. with WgmmaPv and the MN-major
// descriptor offsets pv_lbo / pv_sbo). s_split (fp32 [64][64]) gets q·kv^T again through the
// split-K variant (WgmmaQkSplitKIssue: warpgroup g takes dims 256g.. of all 64 columns with
// m64n64k16, WgmmaSplitKExchange adds the other's partial). Synchronises the device; CUDA errors
// abort.
void RunWgmmaPrimitiveCheck(const uint16_t* q, const uint16_t* kv, const uint16_t* p, float* s,
                            float* o, float* s_split, uint32_t pv_lbo, uint32_t pv_sbo);

// The row form's fast decoders against quant's (Fmt<>::Decode, = DecodeRowsCpu) on the device:
// fp8 = false: DecodeFp4E4m3Block16 (the FP4 table decode of compressed rows); fp8 = true:
// DecodeFp8Ue8m0Block16 (window rows). Every 16-bit code pattern in the low half of the first code
// word (the other code words derived from it, so every nibble / byte position sees every code)
// under every scale byte (NaN, negative, subnormal and out-of-range ones included); returns the
// number of 16-value blocks whose bf16 bits differ. Synchronises the device.
int64_t CountRowDecodeMismatches(bool fp8);

}  // namespace flashserve::kernels::attention_internal
