#include "kernels/common/kernel_trace.h"

#include <cuda.h>
#include <cuda_runtime.h>
#include <cupti_activity.h>
#include <cupti_result.h>
#include <cupti_version.h>
#include <cxxabi.h>
#include <dlfcn.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <mutex>
#include <regex>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_format.h"
#include "kernels/common/cuda_check.h"

namespace flashserve::kernels {
namespace {

// The CUPTI entry points used, from the first libcupti that loads.
struct Cupti {
  decltype(&cuptiGetVersion) version = nullptr;
  decltype(&cuptiActivityRegisterCallbacks) register_callbacks = nullptr;
  decltype(&cuptiActivityEnable) enable = nullptr;
  decltype(&cuptiActivityFlushAll) flush_all = nullptr;
  decltype(&cuptiActivityGetNextRecord) next_record = nullptr;
  std::string name;
  std::string error;
};

template <typename F>
void Sym(void* lib, const char* name, F* f, std::string* missing) {
  *f = reinterpret_cast<F>(dlsym(lib, name));
  if (*f == nullptr && missing->empty()) *missing = name;
}

const Cupti& LoadCupti() {
  static const Cupti cupti = [] {
    Cupti c;
    void* lib = nullptr;
    for (const char* name :
         {"libcupti.so.13", "libcupti.so", "/usr/local/cuda/lib64/libcupti.so.13",
          "/usr/local/cuda/extras/CUPTI/lib64/libcupti.so.13"}) {
      lib = dlopen(name, RTLD_NOW | RTLD_LOCAL);
      if (lib != nullptr) {
        c.name = name;
        break;
      }
    }
    if (lib == nullptr) {
      c.error = "no libcupti could be loaded (libcupti.so.13 on LD_LIBRARY_PATH)";
      return c;
    }
    std::string missing;
    Sym(lib, "cuptiGetVersion", &c.version, &missing);
    Sym(lib, "cuptiActivityRegisterCallbacks", &c.register_callbacks, &missing);
    Sym(lib, "cuptiActivityEnable", &c.enable, &missing);
    Sym(lib, "cuptiActivityFlushAll", &c.flush_all, &missing);
    Sym(lib, "cuptiActivityGetNextRecord", &c.next_record, &missing);
    if (!missing.empty()) {
      c.error = c.name + " lacks " + missing;
      return c;
    }
    uint32_t v = 0;
    if (c.version(&v) != CUPTI_SUCCESS || v / 10000 != CUPTI_API_VERSION / 10000) {
      c.error = absl::StrFormat("%s reports CUPTI API version %u; built against %d", c.name, v,
                                CUPTI_API_VERSION);
    }
    return c;
  }();
  return cupti;
}

// The records of the trace in progress (CUPTI's completion callback runs on its own thread).
std::mutex g_mu;
std::vector<KernelRecord>* g_records = nullptr;

constexpr size_t kBufferBytes = size_t{8} << 20;

}  // namespace

std::string ShortKernelName(const char* mangled) {
  int status = 0;
  char* d = abi::__cxa_demangle(mangled, nullptr, nullptr, &status);
  std::string s = status == 0 && d != nullptr ? d : mangled;
  std::free(d);
  if (s.rfind("void ", 0) == 0) s = s.substr(5);
  // The parameter list: from the first '(' outside template brackets.
  int depth = 0;
  for (size_t i = 0; i < s.size(); ++i) {
    if (s[i] == '<') ++depth;
    if (s[i] == '>') --depth;
    if (s[i] == '(' && depth == 0) {
      s.resize(i);
      break;
    }
  }
  static const std::regex qualifier("[A-Za-z_][A-Za-z0-9_]*::");
  s = std::regex_replace(s, qualifier, "");
  if (s.size() > 72) s = s.substr(0, 69) + "...";
  return s;
}

namespace {

void CUPTIAPI BufferRequested(uint8_t** buffer, size_t* size, size_t* max_records) {
  *size = kBufferBytes;
  *buffer = static_cast<uint8_t*>(std::aligned_alloc(8, kBufferBytes));
  *max_records = 0;
}

void CUPTIAPI BufferCompleted(CUcontext, uint32_t, uint8_t* buffer, size_t, size_t valid) {
  const Cupti& c = LoadCupti();
  CUpti_Activity* rec = nullptr;
  std::lock_guard<std::mutex> lock(g_mu);
  while (c.next_record(buffer, valid, &rec) == CUPTI_SUCCESS) {
    if (rec->kind != CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL &&
        rec->kind != CUPTI_ACTIVITY_KIND_KERNEL) {
      continue;
    }
    const auto* k = reinterpret_cast<const CUpti_ActivityKernel10*>(rec);
    if (g_records == nullptr) continue;  // no trace collecting: dropped
    KernelRecord r;
    r.name = ShortKernelName(k->name);
    r.start_ns = k->start;
    r.end_ns = k->end;
    r.stream_id = k->streamId;
    r.graph_node_id = k->graphNodeId;
    r.grid = k->gridX * k->gridY * k->gridZ;
    r.block = k->blockX * k->blockY * k->blockZ;
    g_records->push_back(std::move(r));
  }
  std::free(buffer);
}

}  // namespace

absl::Status EnableKernelTrace() {
  const Cupti& c = LoadCupti();
  if (!c.error.empty()) return absl::UnavailableError("kernel trace: " + c.error);
  static const absl::Status enabled = [&c] {
    if (CUptiResult e = c.register_callbacks(BufferRequested, BufferCompleted);
        e != CUPTI_SUCCESS) {
      return absl::InternalError(absl::StrFormat("cuptiActivityRegisterCallbacks: %d", e));
    }
    if (CUptiResult e = c.enable(CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL); e != CUPTI_SUCCESS) {
      return absl::InternalError(absl::StrFormat("cuptiActivityEnable: %d", e));
    }
    return absl::OkStatus();
  }();
  return enabled;
}

absl::StatusOr<std::vector<KernelRecord>> TraceKernels(const std::function<void()>& work) {
  if (absl::Status s = EnableKernelTrace(); !s.ok()) return s;
  const Cupti& c = LoadCupti();
  // What ran before: delivered now, while no trace collects (dropped).
  CUDA_CHECK(cudaDeviceSynchronize());
  c.flush_all(CUPTI_ACTIVITY_FLAG_FLUSH_FORCED);
  std::vector<KernelRecord> records;
  {
    std::lock_guard<std::mutex> lock(g_mu);
    g_records = &records;
  }
  work();
  CUDA_CHECK(cudaDeviceSynchronize());
  c.flush_all(CUPTI_ACTIVITY_FLAG_FLUSH_FORCED);
  {
    std::lock_guard<std::mutex> lock(g_mu);
    g_records = nullptr;
  }
  std::sort(records.begin(), records.end(),
            [](const KernelRecord& a, const KernelRecord& b) { return a.start_ns < b.start_ns; });
  return records;
}

KernelTraceSummary SummarizeKernelTrace(const std::vector<KernelRecord>& records) {
  KernelTraceSummary t;
  if (records.empty()) return t;
  const uint64_t t0 = records.front().start_ns;
  uint64_t busy_until = t0, idle = 0, sum = 0;
  for (const KernelRecord& r : records) {
    idle += r.start_ns > busy_until ? r.start_ns - busy_until : 0;
    busy_until = std::max(busy_until, r.end_ns);
    sum += r.end_ns - r.start_ns;
  }
  t.span_us = (busy_until - t0) / 1e3;
  t.kernel_us = sum / 1e3;
  t.idle_us = idle / 1e3;
  t.overlap_us = t.kernel_us - (t.span_us - t.idle_us);
  return t;
}

void PrintKernelTrace(const std::vector<KernelRecord>& records, const char* indent) {
  if (records.empty()) {
    std::printf("%sno kernels recorded\n", indent);
    return;
  }
  const uint64_t t0 = records.front().start_ns;
  std::printf("%s%9s %9s %8s %8s %7s %6s  %s\n", indent, "start µs", "end µs", "µs", "idle µs",
              "CTAs", "stream", "kernel");
  uint64_t busy_until = t0;
  for (const KernelRecord& r : records) {
    const uint64_t gap = r.start_ns > busy_until ? r.start_ns - busy_until : 0;
    busy_until = std::max(busy_until, r.end_ns);
    std::printf("%s%9.1f %9.1f %8.1f %8.1f %7d %6u  %s\n", indent, (r.start_ns - t0) / 1e3,
                (r.end_ns - t0) / 1e3, (r.end_ns - r.start_ns) / 1e3, gap / 1e3, r.grid,
                r.stream_id, r.name.c_str());
  }
  const KernelTraceSummary t = SummarizeKernelTrace(records);
  std::printf(
      "%s%zu kernels: span %.1f µs, kernel time %.1f µs, no kernel running %.1f µs, overlapped "
      "%.1f µs\n",
      indent, records.size(), t.span_us, t.kernel_us, t.idle_us, t.overlap_us);
}

}  // namespace flashserve::kernels
