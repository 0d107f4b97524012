// kernel_trace.h's host pieces (no device, no CUPTI): the kernel names a trace prints and the
// totals of a timeline.
#include "kernels/common/kernel_trace.h"

#include <string>
#include <vector>

#include "gtest/gtest.h"

namespace flashserve::kernels {
namespace {

TEST(KernelTraceTest, ShortNamesKeepTemplateArgumentsAndDropTheRest) {
  EXPECT_EQ(
      ShortKernelName(
          "_ZN10flashserve7kernels10moe_device19MoeExpertRingKernelILb1ELb0EEEvNS1_8RingArgsE"),
      "MoeExpertRingKernel<true, false>");
  // Qualifiers inside the template arguments go too; the parameters, whatever they hold, go.
  EXPECT_EQ(
      ShortKernelName("_ZN10flashserve7kernels10moe_device4WalkINS1_6detail3BoxIfEELi3EEEvNS4_"
                      "IT_EEi"),
      "Walk<Box<float>, 3>");
  // Not a mangled name (a C kernel, or what a driver reports as it is): kept.
  EXPECT_EQ(ShortKernelName("plain_kernel"), "plain_kernel");
  const std::string long_name(100, 'k');
  EXPECT_EQ(ShortKernelName(long_name.c_str()), std::string(69, 'k') + "...");
}

KernelRecord At(uint64_t start_ns, uint64_t end_ns) {
  KernelRecord r;
  r.start_ns = start_ns;
  r.end_ns = end_ns;
  return r;
}

TEST(KernelTraceTest, SummaryCountsIdleAndOverlap) {
  EXPECT_EQ(SummarizeKernelTrace({}).span_us, 0.0);
  // 0-10, a gap of 5, 15-30 with 20-25 beside it, 28-40 overlapping its end, a gap of 10, 50-52.
  const std::vector<KernelRecord> r = {At(1000, 11000), At(16000, 31000), At(21000, 26000),
                                       At(29000, 41000), At(51000, 53000)};
  const KernelTraceSummary t = SummarizeKernelTrace(r);
  EXPECT_DOUBLE_EQ(t.span_us, 52.0);
  EXPECT_DOUBLE_EQ(t.kernel_us, 10.0 + 15.0 + 5.0 + 12.0 + 2.0);
  EXPECT_DOUBLE_EQ(t.idle_us, 5.0 + 10.0);
  // Busy 37 µs of the span, 44 µs of kernel time: 7 µs ran beside another kernel.
  EXPECT_DOUBLE_EQ(t.overlap_us, 7.0);
}

}  // namespace
}  // namespace flashserve::kernels
