// GPU tests call FS_SKIP_WITHOUT_GPU() first: without a device they skip with a message that
// ctest's SKIP_REGULAR_EXPRESSION (cmake/FlashserveHelpers.cmake) reports as "skipped".
#pragma once

#include "gtest/gtest.h"
#include "kernels/common/cuda_check.h"

#define FS_SKIP_WITHOUT_GPU()                            \
  do {                                                   \
    if (!::flashserve::kernels::CudaDeviceAvailable()) { \
      GTEST_SKIP() << "no CUDA device";                  \
    }                                                    \
  } while (false)
