// Type promotion against PyTorch's table (../promotion_table.h) on the GPU, where every dtype
// computes: every row runs through its op.
#include "../promotion_table.h"
#include "gpu_util.h"

namespace gg::test::promotion {
namespace {

TEST(CudaPromotion, OpsMatchPyTorch) {
  GG_REQUIRE_GPU_OR_SKIP();
  const int run = check_rows(Device::cuda(0), [](DType) { return true; });
  EXPECT_EQ(run, static_cast<int>(table().size()));
}

}  // namespace
}  // namespace gg::test::promotion
