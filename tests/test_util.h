// Helpers shared by the tests: random f64 inputs, index arithmetic for plain-loop references.
#pragma once
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "gradgrad.h"

namespace gg::test {

using Values = std::vector<double>;

// Row-major index arithmetic for the plain-loop references (the fuzzer's too).
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

// Index into a tensor of `shape` broadcast to `out_shape` at the output multi-index `out_idx`.
inline int64_t bcast_index(const std::vector<int64_t>& out_idx, const Shape& shape) {
  const size_t lead = out_idx.size() - shape.size();
  std::vector<int64_t> idx(shape.size());
  for (size_t d = 0; d < shape.size(); ++d) idx[d] = shape[d] == 1 ? 0 : out_idx[d + lead];
  return ravel(idx, shape);
}

inline void expect_close(const Values& got, const Values& want, double rtol, double atol, const std::string& what) {
  ASSERT_EQ(got.size(), want.size()) << what;
  for (size_t i = 0; i < got.size(); ++i)
    ASSERT_NEAR(got[i], want[i], atol + rtol * std::abs(want[i])) << what << " at element " << i;
}

// Max |a-b| / max(max|b|, floor).
inline double rel_error(const Values& a, const Values& b, double floor = 1e-30) {
  double num = 0, den = floor;
  for (size_t i = 0; i < a.size(); ++i) {
    num = std::max(num, std::abs(a[i] - b[i]));
    den = std::max(den, std::abs(b[i]));
  }
  return num / den;
}

// call() throws an E whose message contains `needle`.
template <typename E, typename F>
void expect_error(F&& call, const std::string& needle) {
  try {
    call();
    ADD_FAILURE() << "no exception; wanted one containing: " << needle;
  } catch (const E& e) {
    EXPECT_NE(std::string(e.what()).find(needle), std::string::npos) << e.what();
  }
}

inline Tensor leaf(const Tensor& t) {
  Tensor l = t.detach();
  l.requires_grad_(true);
  return l;
}

}  // namespace gg::test
