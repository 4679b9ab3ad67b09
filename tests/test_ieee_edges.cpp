// The IEEE edge table (ieee_edges.h) on the CPU.
#include "ieee_edges.h"

namespace gg::test::ieee {
namespace {

class IeeeEdges : public ::testing::TestWithParam<EdgeCase> {};

TEST_P(IeeeEdges, MatchLongDouble) { check_edge_case(GetParam(), Device::cpu()); }

INSTANTIATE_TEST_SUITE_P(Cpu, IeeeEdges, ::testing::ValuesIn(edge_table()), edge_case_name);

}  // namespace
}  // namespace gg::test::ieee
