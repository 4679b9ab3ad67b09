// CUDA kernels: the entry points that ops/ dispatches to, the same functions and parameter structs
// as kernels/cpu/kernels.h (less sum_strided, which only the CPU backend has) and
// kernels/cpu/attention.h, run on the library's stream for the current device
// (core/cuda_runtime.h). Rules for this header:
// - it declares entry points only; the attention kernels' internals (launch plans, mask and
//   index arithmetic) are in kernels/cuda/attention/ (plan.h, mask.h), and the hooks with which
//   tests and benchmarks force a kernel path are in kernels/cuda/attention/testing.h; none of
//   those is installed;
// - it includes no CUDA headers, so host code that dispatches here compiles with the plain C++
//   compiler.
#pragma once
#include "../params.h"

namespace gg::kernels::cuda {

void copy_strided(const CopyParams& p);  // both pointers on the device
void fill(const FillParams& p);
void random(const RandomParams& p);      // the same numbers as the CPU kernel for the same seed
void arange(const ArangeParams& p);
void unary(const UnaryParams& p);
void binary(const BinaryParams& p);
void where(const WhereParams& p);
void reduce_last(const ReduceParams& p);
void matmul(const MatmulParams& p);      // cuBLAS; a_offsets/b_offsets are host arrays
void softmax_last(const SoftmaxParams& p);
void index_select(const IndexParams& p);  // idx is a device pointer
void index_add(const IndexParams& p);

// Fused attention (kernels/cuda/attention/attention.cu). L is f32 for bf16/f16 inputs, else the input
// dtype; scratch comes from the stream-ordered allocator.
void attention_fwd(const AttentionArgs& a);
void attention_bwd(const AttentionArgs& a);
void attention_bwd_bwd(const AttentionArgs& a);

// How the fused sweeps add their parts of dQ (grad_Q, grad_dO) and how the tail split's pieces
// combine their rows: deterministic (the default; a fixed order, bitwise reproducible) or in any
// order (atomic additions, as PyTorch's flash and cuDNN backwards add dQ; the cost of the order
// is in docs/kernels.md §5). The public switch is gg::set_attention_deterministic (ops/ops.h),
// which also sets this one.
void set_attention_deterministic(bool deterministic);
bool attention_deterministic();

}  // namespace gg::kernels::cuda
