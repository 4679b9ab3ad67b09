// Runs a kernel on the device that holds the data. Ops (and Tensor::to_vector in core/) call
// these; nothing else calls a backend directly, so adding a backend touches this file and
// kernels/<backend>/ only.
#pragma once
#include <cstddef>

#include "../core/device.h"
#include "../kernels/params.h"

namespace gg::dispatch {

void copy(const kernels::CopyParams& p, Device device);
void fill(const kernels::FillParams& p, Device device);
void random(const kernels::RandomParams& p, Device device);
void arange(const kernels::ArangeParams& p, Device device);
void unary(const kernels::UnaryParams& p, Device device);
void binary(const kernels::BinaryParams& p, Device device);
void where(const kernels::WhereParams& p, Device device);
void reduce_last(const kernels::ReduceParams& p, Device device);
void sum_strided(const kernels::SumStridedParams& p, Device device);  // CPU only
void matmul(const kernels::MatmulParams& p, Device device);
void softmax_last(const kernels::SoftmaxParams& p, Device device);
void index_select(const kernels::IndexParams& p, Device device);
void index_add(const kernels::IndexParams& p, Device device);

// Copies `nbytes` of contiguous data between devices (at least one of them a GPU).
void copy_between_devices(void* dst, Device dst_device, const void* src, Device src_device, size_t nbytes);

void attention_fwd(const kernels::AttentionFwdArgs& a, Device device);
void attention_bwd(const kernels::AttentionBwdArgs& a, Device device);
void attention_bwd_bwd(const kernels::AttentionBobArgs& a, Device device);
// The forward's JVP: O, L and their tangents (CPU only: ops/attention.cpp uses the composite
// formula elsewhere).
void attention_jvp(const kernels::AttentionJvpArgs& a, Device device);

}  // namespace gg::dispatch
