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
// dtype; scratch comes from the stream-ordered allocator. The backward and the BoB add the fused
// sweeps' parts of dQ (grad_Q, grad_dO) and the tail split's pieces in a fixed order (bitwise
// reproducible) or atomically in any order, as the args' `deterministic` says (docs/kernels.md §5).
void attention_fwd(const AttentionFwdArgs& a);
void attention_bwd(const AttentionBwdArgs& a);
void attention_bwd_bwd(const AttentionBobArgs& a);

}  // namespace gg::kernels::cuda
