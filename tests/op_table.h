// The op table: one row per op, shared by the CPU tests (tests/test_ops.cpp) and the GPU tests
// (tests/gpu/test_cuda_ops.cpp). Each row has its inputs' shapes and domain, the op, and a
// plain-loop reference for the forward.
#pragma once
#include <functional>
#include <string>
#include <vector>

#include "test_util.h"

namespace gg::test {

using Fn = std::function<Tensor(const TensorList&)>;
using Ref = std::function<Values(const std::vector<Values>&)>;

struct OpCase {
  std::string name;
  std::vector<Shape> shapes;  // one per input; all inputs are floating and require grad
  Fn fn;                      // builds any constants on the inputs' device and dtype
  Shape out_shape;
  Ref ref;
  // Input domain: values are lo + (hi - lo) * U[0,1), kept `gap` away from zero when gap > 0
  // (for ops with a kink or a pole at 0).
  double lo = -2, hi = 2, gap = 0;
  bool third_order = false;
};

std::vector<OpCase> op_table();

// Inputs for a row: f64 values on the CPU drawn from the row's domain with a seed from its name.
std::vector<Values> op_inputs(const OpCase& c);

inline void PrintTo(const OpCase& c, std::ostream* os) { *os << c.name; }

}  // namespace gg::test
