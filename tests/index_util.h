// Row-major index arithmetic for the plain-loop references of the tests and the fuzzer (no
// test framework needed).
#pragma once
#include <cstdint>
#include <vector>

#include "gradgrad.h"

namespace gg::test {

inline std::vector<int64_t> unravel(int64_t i, const Shape& shape) {
  std::vector<int64_t> idx(shape.size());
  for (size_t d = shape.size(); d-- > 0;) {
    idx[d] = i % shape[d];
    i /= shape[d];
  }
  return idx;
}

inline int64_t ravel(const std::vector<int64_t>& idx, const Shape& shape) {
  int64_t i = 0;
  for (size_t d = 0; d < shape.size(); ++d) i = i * shape[d] + idx[d];
  return i;
}

}  // namespace gg::test
