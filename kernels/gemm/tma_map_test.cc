// MakeTmaRows (cuda/tma_map.h): what TMA cannot describe comes back as false, whether its own
// checks or the driver refuse it (needs the driver: skips without a device).
#include "kernels/gemm/cuda/tma_map.h"

#include <gtest/gtest.h>

#include <cstdint>

#include "kernels/common/cuda_check.h"
#include "kernels/common/gpu_test_util.h"

namespace flashserve::kernels {
namespace {

using wgmma_ws::MakeTmaRows;

TEST(TmaMapTest, MakeTmaRowsRefusesWhatTmaCannotDescribe) {
  FS_SKIP_WITHOUT_GPU();
  alignas(256) static uint8_t buf[4096];
  CUtensorMap map;
  EXPECT_FALSE(MakeTmaRows(&map, nullptr, 64, 16, 64, 8, CU_TENSOR_MAP_SWIZZLE_64B));
  EXPECT_FALSE(MakeTmaRows(&map, buf + 8, 64, 16, 64, 8, CU_TENSOR_MAP_SWIZZLE_64B));
  EXPECT_FALSE(MakeTmaRows(&map, buf, 72, 16, 64, 8, CU_TENSOR_MAP_SWIZZLE_64B));  // row stride
  EXPECT_FALSE(MakeTmaRows(&map, buf, 0, 16, 64, 8, CU_TENSOR_MAP_SWIZZLE_64B));
  EXPECT_FALSE(MakeTmaRows(&map, buf, 64, 0, 64, 8, CU_TENSOR_MAP_SWIZZLE_64B));
  EXPECT_FALSE(MakeTmaRows(&map, buf, int64_t{1} << 41, 1, 64, 8, CU_TENSOR_MAP_SWIZZLE_64B));
}

// The MoE RS GEMM's down codes at the released dims' row length (K 2304: 1,152 bytes a row),
// boxes of 64 bytes × 256 rows with the 64-byte swizzle; a 128-byte box row does not fit that
// swizzle, and the driver says so.
TEST(TmaMapTest, MakeTmaRowsDescribesTheMoeDownCodes) {
  FS_SKIP_WITHOUT_GPU();
  DeviceBuffer codes(512 * 1152);
  CUtensorMap map;
  EXPECT_TRUE(MakeTmaRows(&map, codes.get(), 1152, 512, 64, 256, CU_TENSOR_MAP_SWIZZLE_64B));
  EXPECT_FALSE(MakeTmaRows(&map, codes.get(), 1152, 512, 128, 256, CU_TENSOR_MAP_SWIZZLE_64B));
  EXPECT_FALSE(MakeTmaRows(&map, codes.get(), 1152, 512, 64, 512, CU_TENSOR_MAP_SWIZZLE_64B));
}

}  // namespace
}  // namespace flashserve::kernels
