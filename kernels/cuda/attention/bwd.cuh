// attention_bwd: softmax attention backward on the GPU (FlashAttention-2 schedule; sm_90a, d = 64: an f32 dQ buffer).
//
// Math (one head), forward lines on the left, what undoes them on the right
// (as kernels/cpu/attention_bwd.cpp):
//   S = s·Q·Kᵀ (masked)        P = exp(S - L)          recomputed from the saved L
//   O = P·V                    dV = Pᵀ·dO,  dP = dO·Vᵀ
//   P = softmax_rows(S)        D = rowsum(dO∘O) = Σ_j P∘dP,  dS = P∘(dP - D)
//   S = s·Q·Kᵀ                 dQ = s·dS·K,  dK = s·dSᵀ·Q
//
// Shapes: Q, O, dO, dQ are (B, H, N, d), K, V, dK, dV (B, Hkv, Nk, d) contiguous; L and D are
// (B, H, N), Acc (f32 for bf16/f16/f32, f64 for f64). D is stream-ordered scratch. Every dK, dV
// kernel sums a key/value head's gradients over its group of query heads in registers (no atomics,
// no expanded copies).
//
// Launches, per path (traits.cuh: choose_path; tile constants there):
//   1. D = rowsum(dO∘O): row_dot_vec_kernel (16-bit, d = 32 / 64 / 128: 16-byte loads, d / 8 lanes
//      per row) or row_dot_kernel (one warp per row), common.cuh.
//   2. dK, dV: key-parallel; one block per (b, h, key block) sweeps the query blocks (causal: from
//      the first that sees the key block) and recomputes, per 16x16 sub-tile and warp,
//        Sᵀ  = K·Qᵀ           mma   → Pᵀ = exp2(Sᵀ·s·log2e - L·log2e), 0 where masked
//        dPᵀ = V·dOᵀ          mma   → dSᵀ = Pᵀ∘(dPᵀ - D)
//        dV += Pᵀ·dO          mma (Pᵀ as the A operand straight from registers)
//        dK += dSᵀ·Q          mma
//   3. dQ: query-parallel; one block per (b, h, query block) sweeps the key blocks:
//        S = Q·Kᵀ, dP = dO·Vᵀ (mma) → dS;  dQ += dS·K (mma)
//   Products: 4 in pass 2 + 3 in pass 3 = 7 N²·d products (14·N²·d flops per head; the dQ sweep
//   recomputes S and dP instead of adding dQ atomically). Causal halves all of it. Every output
//   element is written by one thread, summing in a fixed order.
// The sm_80 (mma.sync, Sm80Traits) and generic (GenericTraits) kernels run passes 2 and 3 as// One file per path (traits.cuh: choose_path, and the tile constants of each kernel):
//   bwd_sm80.cu     mma.sync; bf16/f16, d in {32, 64, 128} (Sm80Traits)
//   bwd_sm90.cu     warp-specialised, wgmma and TMA; bf16/f16, d in {64, 128} (BwdSm90Traits)
//   bwd_generic.cu  scalar FMA: f64, exact f32, other head dims (GenericTraits)
// The entry point, attention_bwd (attention.cu), forms D and calls one of the launchers below.
#pragma once
#include "kernels/cuda/attention/common.cuh"

namespace gg::kernels::cuda::attn {

// The launchers (p.D: D - dL, formed; outputs p.dQ, p.dK, p.dV), each in its path's file,
// instantiated for the dtypes and head dims that choose_path sends it.
template <typename T>
void launch_bwd_generic(const Params<T>& p);
template <typename T, int kD>
void launch_bwd_sm80(const Params<T>& p);
template <typename T, int kD>
void launch_bwd_sm90(const Params<T>& p);

}  // namespace gg::kernels::cuda::attn
