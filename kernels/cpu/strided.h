// Row-major walk over an N-d index space shared by several strided operands. The callback
// receives one innermost run at a time: the base offset of each operand, the run length and
// each operand's innermost stride, so the hot loop is a plain strided 1-D loop.
//
// Dims of size 1 are dropped and neighbouring dims that every operand walks as one are merged
// first (a contiguous (25, 10, 1) is one run of 250, not 250 runs of 1), so runs are as long
// as the layouts allow.
#pragma once
#include <cstdint>

#include "../params.h"

namespace gg::kernels::cpu {

// The same walk as `in` (all operands share in[0]'s sizes) over as few dims as possible.
template <int kOps>
void coalesce(const Layout* const (&in)[kOps], Layout (&out)[kOps]) {
  int nd = 0;
  for (int d = 0; d < in[0]->ndim; ++d) {
    const int64_t size = in[0]->sizes[d];
    if (size == 1) continue;
    bool merge = nd > 0;  // dim d continues dim nd-1 in every operand
    for (int k = 0; k < kOps && merge; ++k) merge = out[k].strides[nd - 1] == in[k]->strides[d] * size;
    for (int k = 0; k < kOps; ++k) {
      if (merge) {
        out[k].sizes[nd - 1] *= size;
        out[k].strides[nd - 1] = in[k]->strides[d];
      } else {
        out[k].sizes[nd] = size;
        out[k].strides[nd] = in[k]->strides[d];
      }
    }
    if (!merge) ++nd;
  }
  for (int k = 0; k < kOps; ++k) out[k].ndim = nd;
}

template <int kOps, typename Run>
void for_each_run(const Layout* const (&layouts_in)[kOps], Run&& run) {
  for (int d = 0; d < layouts_in[0]->ndim; ++d)
    if (layouts_in[0]->sizes[d] == 0) return;
  Layout layouts[kOps];
  coalesce(layouts_in, layouts);
  const Layout& shape = layouts[0];
  const int nd = shape.ndim;
  int64_t base[kOps] = {};
  int64_t inner_stride[kOps] = {};
  if (nd == 0) {
    run(base, int64_t{1}, inner_stride);
    return;
  }
  const int64_t inner = shape.sizes[nd - 1];
  for (int k = 0; k < kOps; ++k) inner_stride[k] = layouts[k].strides[nd - 1];
  int64_t counter[kMaxDims] = {};
  while (true) {
    run(base, inner, inner_stride);
    // Advance the outer counter (dims nd-2 .. 0) like an odometer.
    int d = nd - 2;
    for (; d >= 0; --d) {
      if (++counter[d] < shape.sizes[d]) {
        for (int k = 0; k < kOps; ++k) base[k] += layouts[k].strides[d];
        break;
      }
      for (int k = 0; k < kOps; ++k) base[k] -= layouts[k].strides[d] * (shape.sizes[d] - 1);
      counter[d] = 0;
    }
    if (d < 0) return;
  }
}

}  // namespace gg::kernels::cpu
