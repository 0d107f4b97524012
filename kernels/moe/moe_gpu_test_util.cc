#include "kernels/moe/moe_gpu_test_util.h"

#include <span>
#include <utility>

#include "common/base/check.h"
#include "kernels/moe/cuda/moe_test_weights_cuda.h"

namespace flashserve::kernels::moe_test {
namespace {

void SetView(DeviceExperts* d, int64_t n_experts, int64_t dim, int64_t inter, bool has_bias,
             bool has_bias_vl) {
  MoeCudaWeights& v = d->view;
  v.n_experts = n_experts;
  v.dim = dim;
  v.inter = inter;
  v.w1 = d->codes[kW1].get<uint8_t>();
  v.w1_scale = d->scales[kW1].get<uint8_t>();
  v.w3 = d->codes[kW3].get<uint8_t>();
  v.w3_scale = d->scales[kW3].get<uint8_t>();
  v.w2 = d->codes[kW2].get<uint8_t>();
  v.w2_scale = d->scales[kW2].get<uint8_t>();
  v.gate_bias = has_bias ? d->bias.get<float>() : nullptr;
  v.gate_bias_vl = has_bias_vl ? d->bias_vl.get<float>() : nullptr;
  v.code_order = MoeFp4CodeOrder::kDevice;  // both makers below convert the codes
}

}  // namespace

std::unique_ptr<DeviceExperts> GenerateDeviceExperts(const LayerSpec& s,
                                                     const std::vector<float>& bias,
                                                     const std::vector<float>& bias_vl) {
  auto d = std::make_unique<DeviceExperts>();
  for (int proj : {kW1, kW3, kW2}) {
    const int64_t n = ProjRows(s, proj), k = ProjCols(s, proj);
    d->codes[proj] = DeviceBuffer(static_cast<size_t>(s.n_experts * n * (k / 2)));
    d->scales[proj] = DeviceBuffer(static_cast<size_t>(s.n_experts * n * (k / 32)));
    FillExpertProjection(s.seed, s.kind, proj, s.n_experts, n, k, d->codes[proj].get<uint8_t>(),
                         d->scales[proj].get<uint8_t>());
    // The fill writes checkpoint order (the host references read the same bytes that way).
    CHECK_OK(LaunchMoeFp4ToDeviceOrder(d->codes[proj].get<uint8_t>(), s.n_experts * n * (k / 2),
                                       nullptr));
  }
  CUDA_CHECK(cudaDeviceSynchronize());
  d->bias = ToDevice(bias);
  d->bias_vl = ToDevice(bias_vl);
  SetView(d.get(), s.n_experts, s.dim, s.inter, !bias.empty(), !bias_vl.empty());
  return d;
}

std::unique_ptr<DeviceExperts> UploadDeviceExperts(int64_t n_experts, int64_t dim, int64_t inter,
                                                   const std::vector<HostFp4> (&proj)[3],
                                                   const std::vector<float>& bias,
                                                   const std::vector<float>& bias_vl) {
  auto d = std::make_unique<DeviceExperts>();
  for (int p : {kW1, kW3, kW2}) {
    std::vector<uint8_t> codes, scales;
    for (int64_t e = 0; e < n_experts; ++e) {
      codes.insert(codes.end(), proj[p][e].codes.begin(), proj[p][e].codes.end());
      scales.insert(scales.end(), proj[p][e].scales.begin(), proj[p][e].scales.end());
    }
    MoeFp4CodesToDeviceOrder(codes.data(), codes.size());
    d->codes[p] = ToDevice(codes);
    d->scales[p] = ToDevice(scales);
  }
  d->bias = ToDevice(bias);
  d->bias_vl = ToDevice(bias_vl);
  SetView(d.get(), n_experts, dim, inter, !bias.empty(), !bias_vl.empty());
  return d;
}

std::unique_ptr<DeviceSharedExpert> UploadSharedExpert(const SharedExpert& s, bool fused,
                                                       bool keep_expanded) {
  auto d = std::make_unique<DeviceSharedExpert>();
  auto upload = [keep_expanded](const PreparedLinear& l) {
    auto u = DeviceFp8Linear::Upload(l, keep_expanded);
    CHECK_OK(u.status());
    return std::move(u).value();
  };
  d->w2 = upload(*s.w2);
  d->view.w2 = &d->w2;
  if (fused) {
    const PreparedLinear* parts[] = {s.w1.get(), s.w3.get()};
    auto w13 = ConcatLinearRows(parts, {.expand_to_f32 = false});
    CHECK_OK(w13.status());
    d->w13 = upload(*w13);
    d->view.w13 = &d->w13;
  } else {
    d->w1 = upload(*s.w1);
    d->w3 = upload(*s.w3);
    d->view.w1 = &d->w1;
    d->view.w3 = &d->w3;
  }
  return d;
}

}  // namespace flashserve::kernels::moe_test
