// The IEEE edge table (../ieee_edges.h) on the GPU: the same rows and tolerances as on the CPU.
#include "../ieee_edges.h"
#include "gpu_util.h"

namespace gg::test::ieee {
namespace {

class CudaIeeeEdges : public ::testing::TestWithParam<EdgeCase> {};

TEST_P(CudaIeeeEdges, MatchLongDouble) {
  GG_REQUIRE_GPU_OR_SKIP();
  check_edge_case(GetParam(), Device::cuda(0));
}

INSTANTIATE_TEST_SUITE_P(Cuda, CudaIeeeEdges, ::testing::ValuesIn(edge_table()), edge_case_name);

}  // namespace
}  // namespace gg::test::ieee
