// The forward's generic kernel (fwd.cuh has the math): f64, f32 exact FFMA, bf16/f16 with other d;
// GenericTraits: 32 query rows x 8
//   lanes per block, score dots from staged chunks, P·V from global rows, d split over grid.y.
#include "kernels/cuda/attention/common.cuh"
#include "kernels/cuda/attention/fwd.cuh"

namespace gg::kernels::cuda {
namespace {

using namespace attn;

// Three blocks per SM with f32 accumulators (at most 80 registers; uncapped, two fit): its P·V
// reads global memory and is latency-bound, so more blocks hide more of it (docs/kernels.md §4).
template <typename T>
__global__ void __launch_bounds__(GenericTraits::kThreads, GenericTraits::min_blocks<T>(3))
    attention_fwd_generic_kernel(const Params<T> p) {
  using Acc = typename Elem<T>::Acc;
  using C = GenericTraits;
  // ---- prologue: query rows [i0, i0 + kRows), output columns [c0, c0 + kCols)
  GenBlock<T> b(p);
  Acc* sQ = b.stage();  // [kRows][kStride] a chunk of Q's columns
  Acc* sK = b.stage();  // [kOther][kStride] the same chunk of K
  Acc* sP = b.stage();  // [kRows][kStride] exp(S - m) of the tile
  const GenThread th = b.th;
  const int i0 = b.r0, i = i0 + th.o;  // this thread's query row
  const int c0 = b.c0;
  const T *Qh = b.Q, *Kh = b.K, *Vh = b.V;
  const TileRange tiles = gen_tiles<false>(p, i0);  // key tiles some row of the block sees
  Acc m = neg_inf<Acc>(), l = 0;  // row max and row sum of exp(S - m): uniform over the row group
  Acc acc[C::kColsPerThread] = {};

  // ---- main loop over key tiles [j0, j0 + nx)
  for (int kb = tiles.begin; kb < tiles.end; ++kb) {
    const int j0 = kb * C::kOther, nx = min(C::kOther, p.Nk - j0);

    // S = Q·Kᵀ for this thread's entries (i, j0 + r + 8k)
    Acc s[C::kPerThread] = {};
    for (int k0 = 0; k0 < p.d; k0 += C::kChunk) {
      __syncthreads();  // the staging buffers and sP are free
      gen_stage(sQ, Qh, i0, k0, p.N, p.d);
      gen_stage(sK, Kh, j0, k0, p.Nk, p.d);
      __syncthreads();
      gen_dot(s, sQ, sK, th);
    }

    // online softmax: scale, mask, new max, rescale
    Acc tile_max = neg_inf<Acc>();
#pragma unroll
    for (int k = 0; k < C::kPerThread; ++k) {
      const int j = j0 + th.r + 8 * k;
      s[k] = p.sees(i, j) ? s[k] * p.scale : neg_inf<Acc>();
      tile_max = max(tile_max, s[k]);
    }
    const Acc m_new = max(m, group_max(tile_max));
    const Acc m_use = m_new == neg_inf<Acc>() ? Acc(0) : m_new;  // no key seen yet: exp(-inf - 0) = 0
    const Acc alpha = acc_exp(m - m_use);
    Acc row_sum = 0;
#pragma unroll
    for (int k = 0; k < C::kPerThread; ++k) {
      s[k] = acc_exp(s[k] - m_use);
      row_sum += s[k];
      sP[th.o * C::kStride + th.r + 8 * k] = s[k];
    }
    l = l * alpha + group_sum(row_sum);
    m = m_new;
#pragma unroll
    for (int k = 0; k < C::kColsPerThread; ++k) acc[k] *= alpha;
    __syncthreads();  // sP complete

    // acc += P·V
    gen_accumulate(acc, sP, Vh, j0, nx, c0, p.d, th);
  }

  // ---- epilogue: O = acc / l, L = m + log(l); a row without keys: O = 0, L = -inf; a row with
  // keys and l = 0 (every score -inf) or l = NaN: NaN (fwd_epilogue)
  if (i < p.N) {
    const bool no_keys = p.mask().keys_of(i).n == 0;
    const Acc inv_l = Acc(1) / l;  // l = 0: acc = 0, and 0·inf = NaN
#pragma unroll
    for (int k = 0; k < C::kColsPerThread; ++k) acc[k] = no_keys ? Acc(0) : acc[k] * inv_l;
    gen_store(p.O_out + (b.qhead + i) * p.d, acc, c0, p.d, th);
    if (blockIdx.y == 0 && th.r == 0)
      p.L_out[b.qhead + i] = no_keys ? neg_inf<Acc>() : l > Acc(0) ? m + acc_log(l) : static_cast<Acc>(NAN);
  }
}
}  // namespace

namespace attn {

template <typename T>
void launch_fwd_generic(const Params<T>& p) {
  launch_generic(attention_fwd_generic_kernel<T>, p, GenericTraits::kFwdSmem);
}

template void launch_fwd_generic<double>(const Params<double>&);
template void launch_fwd_generic<float>(const Params<float>&);
template void launch_fwd_generic<__nv_bfloat16>(const Params<__nv_bfloat16>&);
template void launch_fwd_generic<__half>(const Params<__half>&);
}  // namespace attn
}  // namespace gg::kernels::cuda
