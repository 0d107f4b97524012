// A timeline of the kernels a piece of GPU work runs: each kernel's start and end on the device,
// from CUPTI's activity API (CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL, which does not serialise
// kernels; kernels inside CUDA graphs are recorded as nodes of their graph). For the benches: where
// a chain of small kernels spends its time — each kernel's own time, the gaps between dependent
// kernels, what overlaps — which event timing of the whole cannot show and Nsight Systems, absent
// on the GPU machine, would.
//
// libcupti is loaded with dlopen (as cuBLAS in gpu_bench.cc: the static bench binaries must not
// depend on it); without it, or with a CUPTI of another major version than the headers built
// against, Trace returns an error saying so and runs nothing. Host code; one trace at a time per
// process (CUPTI's activity buffers are process-wide).
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"

namespace flashserve::kernels {

struct KernelRecord {
  std::string name;  // demangled, without namespace qualifiers and parameters (72 chars at most)
  uint64_t start_ns = 0, end_ns = 0;  // device timestamps
  uint32_t stream_id = 0;             // CUPTI's stream id (a graph's nodes carry their own)
  uint64_t graph_node_id = 0;         // 0 outside a graph
  int32_t grid = 0;                   // CTAs (x · y · z)
  int32_t block = 0;                  // threads per CTA
};

// Loads CUPTI and turns kernel tracing on for the rest of the process (idempotent; each kernel
// then costs its activity record, so timings of a traced process are a diagnostic's). Call it
// before capturing the CUDA graphs to be traced: CUPTI attached from the start sees every graph
// node as it is created. Errors: UnavailableError without a usable libcupti.
absl::Status EnableKernelTrace();

// Runs `work` (which enqueues GPU work and returns; EnableKernelTrace first if not yet on),
// synchronises the device, and returns every kernel it ran, by start time.
absl::StatusOr<std::vector<KernelRecord>> TraceKernels(const std::function<void()>& work);

// What a trace adds up to (records by start time): first start to last end, the kernels' own
// times summed, the time within the span when no kernel ran, and the kernel time that ran beside
// other kernels (sum − (span − idle)).
struct KernelTraceSummary {
  double span_us = 0, kernel_us = 0, idle_us = 0, overlap_us = 0;
};
KernelTraceSummary SummarizeKernelTrace(const std::vector<KernelRecord>& records);

// "void ns::Kernel<true, 3>(ns::Args)" demangled from `mangled`, without the return type, the
// parameters and every namespace qualifier ("Kernel<true, 3>"), at most 72 characters; a name that
// does not demangle is kept as it is.
std::string ShortKernelName(const char* mangled);

// Prints records as a table: start and end relative to the first start, duration, the time the
// GPU ran no kernel of the trace before it (idle), CTAs, name; then the span, the sum of kernel
// times, the idle total and the overlapped time.
void PrintKernelTrace(const std::vector<KernelRecord>& records, const char* indent);

}  // namespace flashserve::kernels
