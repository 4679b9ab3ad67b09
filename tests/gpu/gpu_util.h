// GPU tests skip without a usable CUDA device, unless GG_REQUIRE_GPU=1 makes that a failure.
#pragma once
#include <gtest/gtest.h>

#include <cstdlib>
#include <cstring>

#include "gradgrad.h"

#define GG_REQUIRE_GPU_OR_SKIP()                                                        \
  do {                                                                                  \
    if (!::gg::cuda::is_available()) {                                                  \
      const char* req = std::getenv("GG_REQUIRE_GPU");                                  \
      if (req && std::strcmp(req, "1") == 0) FAIL() << "GG_REQUIRE_GPU=1 but no CUDA device is usable"; \
      GTEST_SKIP() << "no CUDA device";                                                 \
    }                                                                                   \
  } while (0)
