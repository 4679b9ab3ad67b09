// attention_fwd: softmax attention forward on the GPU (FlashAttention-2 schedule).
//
// Math (one head; b and h are independent), as kernels/cpu/attention_fwd.cpp:
//   S = s·Q·Kᵀ, with S_ij = -inf where causal and j > i (and for keys j >= N)
//   L_i = logsumexp_j S_ij   (natural log; saved for the backward, Acc = f32 for bf16/f16)
//   P = exp(S - L),  O = P·V
//
// Shapes: Q, O are (B, H, N, d), K, V (B, Hkv, Nk, d) contiguous; L is (B, H, N).
//
// Schedule: one block per (b, h, query block); it sweeps the key blocks with an online softmax:
// per query row a running max m, a running sum l = Σ exp(S - m) and an accumulator
// acc = Σ exp(S - m)·V_j, rescaled by exp(m_old - m_new) when the max grows. At the end
// O = acc / l and L = m + log(l). Causal: key blocks after the query block are never loaded;
// the diagonal block is masked entry by entry. In the plain case every row sees key 0; with
// grouped heads, Nq != Nk and windows (every kernel's kOpts instance) key tiles outside a
// block's band are never loaded and a row without keys gets O = 0, L = -inf. Non-finite data as
// on the CPU: NaN, +inf or all -inf scores make the row's O and L NaN (fwd_epilogue).
//// One file per path (traits.cuh: choose_path, and the tile constants of each kernel):
//   fwd_sm80.cu     mma.sync; bf16/f16, d in {32, 64, 128} (Sm80Traits)
//   fwd_sm90.cu     warp-specialised, wgmma and TMA; bf16/f16, d in {64, 128}, scale > 0 (FwdSm90Traits)
//   fwd_generic.cu  scalar FMA: f64, exact f32, other head dims (GenericTraits)
// This header holds what they share and their launchers; the entry point, attention_fwd, is in
// attention.cu.
#pragma once
#include "kernels/cuda/attention/common.cuh"

namespace gg::kernels::cuda::attn {

// Epilogue of the tensor-core forward kernels (mma.sync and Hopper): this warp's rows from iw,
// m in log2 units, l this thread's part of the row sums: O = acc / l and L = (m + log2 l)·ln 2.
// kEmptyRows (masks where a row may see no key): such a row gets O = 0 and L = -inf, whatever its
// accumulator holds (0·V is NaN where V is not finite). A row that sees keys and ends with l = 0
// (every score -inf) or l = NaN (a NaN or +inf score) gets NaN, as the composite's softmax does:
// the running max skips NaN, but exp2(NaN - m) puts it in l.
template <typename T, int kD, bool kEmptyRows = false>
__device__ __forceinline__ void fwd_epilogue(const Params<T>& p, float (&acc)[kD / 8][4], const float (&m)[2],
                                             const float (&l)[2], int64_t head, int iw, int lane) {
  float inv_l[2];
#pragma unroll
  for (int h = 0; h < 2; ++h) {
    const float l_row = quad_sum(l[h]);
    const int row = iw + frag_row(lane, 2 * h);
    const bool no_keys = kEmptyRows && p.mask().keys_of(row).n == 0;
    inv_l[h] = 1.f / l_row;  // l = 0: acc = 0, and 0·inf = NaN
    if (no_keys) {
      inv_l[h] = 0.f;
#pragma unroll
      for (int j = 0; j < kD / 8; ++j) acc[j][2 * h] = acc[j][2 * h + 1] = 0.f;
    }
    if (lane % 4 == 0 && row < p.N)
      p.L_out[head + row] = no_keys ? -INFINITY : l_row > 0.f ? (m[h] + log2f(l_row)) * kLn2 : NAN;
  }
  store_acc<T, kD>(p.O_out + (head + iw) * kD, kD, acc, inv_l, iw, p.N, lane);
}

// The launchers (p.O_out: O, p.L_out: L), each in its path's file, instantiated for the dtypes and
// head dims that choose_path sends it.
template <typename T>
void launch_fwd_generic(const Params<T>& p);
template <typename T, int kD>
void launch_fwd_sm80(const Params<T>& p);
template <typename T, int kD>
void launch_fwd_sm90(const Params<T>& p);

}  // namespace gg::kernels::cuda::attn
