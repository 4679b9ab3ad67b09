// Row-major walk over an N-d index space shared by several strided operands. The callback
// receives one innermost run at a time: the base offset of each operand, the run length and
// each operand's innermost stride, so the hot loop is a plain strided 1-D loop.
#pragma once
#include <cstdint>

#include "kernels/params.h"

namespace gg::kernels::cpu {

template <int kOps, typename Run>
void for_each_run(const Layout* const (&layouts)[kOps], Run&& run) {
  const Layout& shape = *layouts[0];
  const int nd = shape.ndim;
  int64_t base[kOps] = {};
  int64_t inner_stride[kOps] = {};
  if (nd == 0) {
    run(base, int64_t{1}, inner_stride);
    return;
  }
  for (int d = 0; d < nd; ++d)
    if (shape.sizes[d] == 0) return;
  const int64_t inner = shape.sizes[nd - 1];
  for (int k = 0; k < kOps; ++k) inner_stride[k] = layouts[k]->strides[nd - 1];
  int64_t counter[kMaxDims] = {};
  while (true) {
    run(base, inner, inner_stride);
    // Advance the outer counter (dims nd-2 .. 0) like an odometer.
    int d = nd - 2;
    for (; d >= 0; --d) {
      if (++counter[d] < shape.sizes[d]) {
        for (int k = 0; k < kOps; ++k) base[k] += layouts[k]->strides[d];
        break;
      }
      for (int k = 0; k < kOps; ++k) base[k] -= layouts[k]->strides[d] * (shape.sizes[d] - 1);
      counter[d] = 0;
    }
    if (d < 0) return;
  }
}

}  // namespace gg::kernels::cpu
