// attention_bwd_bwd: backward-over-backward (BoB) of softmax attention on the GPU.
//
// BoB differentiates  ℒ = <Qt, dQ> + <Kt, dK> + <Vt, dV>  with respect to Q, K, V and dO, where
// (dQ, dK, dV) is the first backward and Qt, Kt, Vt are their cotangents. O and L are saved
// values: no gradient flows into them. Math (one head), as kernels/cpu/attention_bwd_bwd.cpp:
//   P = exp(s·Q·Kᵀ - L) (masked: 0),  dP = dO·Vᵀ,  D = rowsum(dO∘O),  dS = P∘(dP - D)
//   G = s·(Qt·Kᵀ + Q·Ktᵀ)          ℒ's weight on dS
//   H = dO·Vtᵀ                     ℒ's weight on P
//   E = Σ_j P∘G,   F = Σ_j P∘(dP∘G + H) - 2·D∘E      (row scalars)
//   P̄ = (dP - D)∘G - dP∘E + H,   S̄ = P∘(P̄ - F),   dP̄ = P∘(G - E)
//   grad_Q  = s·(S̄·K + dS·Kt)        grad_K  = s·(S̄ᵀ·Q + dSᵀ·Qt)
//   grad_V  = dP̄ᵀ·dO                 grad_dO = dP̄·V + P·Vt
// An absent cotangent (nullptr) drops its terms (runtime, warp-uniform branches: its tile
// products are never issued): no Qt and no Kt means G = 0 (E = 0, dP̄ = 0, grad_V = 0, dP never
// formed); no Vt means H = 0. All absent: every output is 0 (a memset).
//
// Shapes: Q, O, dO, Qt, grad_Q, grad_dO are (B, H, N, d), K, V, Kt, Vt, grad_K, grad_V
// (B, Hkv, Nk, d) contiguous; L, D, E, F are (B, H, N), Acc (f32 for bf16/f16/f32, f64 for f64);
// D, E, F are stream-ordered scratch. Every pass 2 (and the fused BoB's sweep) sums grad_K, grad_V
// over the group of query heads in registers.
//
// Schedule (sm_80 and generic kernels): the two-pass schedule of docs/attention.md (section 4), no atomics,
// no N x N buffer, bitwise deterministic. The outputs depend on E and F only affinely, so a query block
// accumulates pieces and combines them once its sweep ends:
//   grad_Q_i  = s·(XA_i - E_i·X2_i - F_i·X3_i)
//       XA = [P∘((dP - D)∘G + H)]·K + dS·Kt,   X2 = (P∘dP)·K,   X3 = P·K
//   grad_dO_i = Y_i - E_i·O_i,   Y = (P∘G)·V + P·Vt                   (using P·V = O)
//   0. D = rowsum(dO∘O) - dL: launch_row_dot (16-bit, d = 32/64/128: d / 8 lanes per row).
//   1. Query-parallel, one block per (b, h, query block [, column slice]) sweeping the key blocks:
//      score tiles S, dP, G (2 products), H; output products C1·K, dS·Kt (into XA), (P∘dP)·K,
//      P·K, (P∘G)·V, P·Vt (into Y): 5 + 6 = 11 N²·d products. Writes E, F, grad_Q, grad_dO.
//      Precision: XA - E·X2 - F·X3 and Y - E·O cancel (exactly, for a row that sees a single key:
//      its grad_Q is 0), so on the tensor-core path the coefficient tiles of C1·K, (P∘dP)·K, P·K
//      and (P∘G)·V enter as hi + lo bf16/f16 pairs (to_a_frag_split): 4 extra mma products
//      sharing their B fragments, 15 in pass 1. With single-rounded tiles the cancellation
//      left errors of ~2^-8 of the output family's scale in such rows.
//   2. Key-parallel, one block per (b, h, key block) sweeping the query blocks with the rows'
//      L, D, E, F: score tiles Sᵀ, dPᵀ, Gᵀ (2), Hᵀ; outputs S̄ᵀ·Q, dSᵀ·Qt (grad_K), dP̄ᵀ·dO
//      (grad_V): 5 + 3 = 8 products. 19 in all (38·N²·d flops per head; causal halves it), 23 as
//      issued on tensor cores (the 4 split products).
// sm_80 kernels (mma.sync; bf16/f16, d in {32, 64, 128}; Sm80Traits): 4 warps x 16 own rows; the// One file per path (traits.cuh: choose_path, and the tile constants of each kernel):
//   bwd_bwd_sm80.cu     mma.sync; bf16/f16, d in {32, 64, 128} (Sm80Traits)
//   bwd_bwd_sm90.cu     warp-specialised, wgmma and TMA; bf16/f16, d in {64, 128}, "E and F first"
//                       and the fused BoB (BobQuerySm90Traits, BobKeySm90Traits)
//   bwd_bwd_generic.cu  scalar FMA: f64, exact f32, other head dims (GenericTraits)
// This header holds what they share and their launchers; the entry point, attention_bwd_bwd, is
// in attention.cu.
#pragma once
#include "kernels/cuda/attention/common.cuh"

namespace gg::kernels::cuda::attn {

// One entry of the coefficient tiles of pass 2 and of the E/F-first pass 1, in place, from
// P = exp(S - L) and the row's D, E, F: S <- S̄ = P∘(P̄ - F), G <- dP̄ = P∘(G·s - E),
// dP <- dS = P∘(dP - D), where P̄ = (dP - D)∘G·s - dP∘E + H. With u = G·s - E the same P̄ is
// (dP - D)∘u + H - D·E (substitute G·s = u + E): 8 floating-point instructions instead of 10.
__device__ __forceinline__ void coef_entry(float P, float scale, float D, float E, float F, float& S, float& dP,
                                           float& G, float H) {
  const float u = fmaf(G, scale, -E), dd = dP - D;
  S = P * (fmaf(dd, u, H) - fmaf(D, E, F));
  G = P * u;
  dP = P * dd;
}

// D = rowsum(dO∘O), for the paths whose pass 0 does not form it
template <typename T>
void launch_D(const Params<T>& p) {
  launch_row_dot<T>(p.dO, p.O, p.D, p.BH * p.N, p.d, p.dL);
}

// The launchers, each in its path's file, instantiated for the dtypes and head dims that
// choose_path sends it. p.D is scratch for D; p.E, p.F scratch (kWhole) or the caller's (the
// stages). stage (kernels/params.h): kWhole, every output (p.gQ, p.gK, p.gV,
// grad_dO); kRowSums, E and F alone (the query pass that forms them; its other outputs are
// scratch); kFromRowSums, the outputs from the caller's E and F.
template <typename T>
void launch_bob_generic(const Params<T>& p, BobStage stage);
template <typename T, int kD>
void launch_bob_sm80(const Params<T>& p, BobStage stage);
template <typename T, int kD>
void launch_bob_sm90(const Params<T>& p, BobStage stage);

}  // namespace gg::kernels::cuda::attn
