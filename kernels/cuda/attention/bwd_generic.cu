// The backward's generic kernels (bwd.cuh has the math and the passes; GenericTraits).
#include "kernels/cuda/attention/bwd.cuh"
#include "kernels/cuda/attention/common.cuh"

namespace gg::kernels::cuda {
namespace {

using namespace attn;

// dK, dV for key rows [j0, j0 + kRows) of key/value head bh: thread (o, r) owns key j0 + o and
// queries i0 + r + 8k of each query head of the group in turn, summing over them in registers.
template <typename T>
__global__ void __launch_bounds__(GenericTraits::kThreads, 1) attention_bwd_dkdv_generic_kernel(const Params<T> p) {
  using Acc = typename Elem<T>::Acc;
  using C = GenericTraits;
  // ---- prologue
  GenBlock<T, true> b(p);
  Acc *sK = b.stage(), *sV = b.stage();   // own chunks
  Acc *sQ = b.stage(), *sdO = b.stage();  // other chunks
  Acc* sP = b.tile();                     // Pᵀ tile  [key][query]
  Acc* sdS = b.tile();                    // dSᵀ tile [key][query]
  const GenThread th = b.th;
  const int j0 = b.r0, j = j0 + th.o;
  const int c0 = b.c0;
  const T *Kh = b.K, *Vh = b.V;
  Acc dK[C::kColsPerThread] = {}, dV[C::kColsPerThread] = {};
  const TileRange tiles = gen_tiles<true>(p, j0);  // query tiles that see some key of the block

  // ---- main loop over the group's query heads g and their query tiles [i0, i0 + nx)
  for (int g = 0; g < p.group; ++g) {
    const T *Qh = b.group_rows(b.Q, p, g), *dOh = b.group_rows(b.dO, p, g);
    const Acc* Lh = p.L + b.qhead + static_cast<int64_t>(g) * p.N;
    const Acc* Dh = p.D + b.qhead + static_cast<int64_t>(g) * p.N;
    for (int qt = tiles.begin; qt < tiles.end; ++qt) {
      const int i0 = qt * C::kOther, nx = min(C::kOther, p.N - i0);
      Acc st[C::kPerThread] = {}, dpt[C::kPerThread] = {};  // Sᵀ = K·Qᵀ, dPᵀ = V·dOᵀ
      for (int k0 = 0; k0 < p.d; k0 += C::kChunk) {
        __syncthreads();
        gen_stage(sK, Kh, j0, k0, p.Nk, p.d);
        gen_stage(sV, Vh, j0, k0, p.Nk, p.d);
        gen_stage(sQ, Qh, i0, k0, p.N, p.d);
        gen_stage(sdO, dOh, i0, k0, p.N, p.d);
        __syncthreads();
        gen_dot(st, sK, sQ, th);
        gen_dot(dpt, sV, sdO, th);
      }
#pragma unroll
      for (int k = 0; k < C::kPerThread; ++k) {
        const int i = i0 + th.r + 8 * k;
        const bool visible = p.sees(i, j);
        const Acc P = visible ? acc_exp(st[k] * p.scale - Lh[i]) : Acc(0);  // undoes P = softmax(S)
        const Acc dS = visible ? P * (dpt[k] - Dh[i]) : Acc(0);              // dS = P∘(dP - D)
        sP[th.o * C::kStride + th.r + 8 * k] = P;
        sdS[th.o * C::kStride + th.r + 8 * k] = dS;
      }
      __syncthreads();
      gen_accumulate(dV, sP, dOh, i0, nx, c0, p.d, th);  // dV += Pᵀ·dO
      gen_accumulate(dK, sdS, Qh, i0, nx, c0, p.d, th);  // dK += dSᵀ·Q
    }
  }

  // ---- epilogue: dK = s·Σ dSᵀ·Q
  if (j < p.Nk) {
#pragma unroll
    for (int k = 0; k < C::kColsPerThread; ++k) dK[k] *= p.scale;
    gen_store(p.dK + (b.khead + j) * p.d, dK, c0, p.d, th);
    gen_store(p.dV + (b.khead + j) * p.d, dV, c0, p.d, th);
  }
}

// dQ for query rows [i0, i0 + kRows): thread (o, r) owns query i0 + o and keys j0 + r + 8k.
template <typename T>
__global__ void __launch_bounds__(GenericTraits::kThreads, 1) attention_bwd_dq_generic_kernel(const Params<T> p) {
  using Acc = typename Elem<T>::Acc;
  using C = GenericTraits;
  // ---- prologue
  GenBlock<T> b(p);
  Acc *sQ = b.stage(), *sdO = b.stage();  // own chunks
  Acc *sK = b.stage(), *sV = b.stage();   // other chunks
  Acc* sdS = b.tile();                    // dS tile [query][key]
  const GenThread th = b.th;
  const int i0 = b.r0, i = i0 + th.o;
  const int c0 = b.c0;
  const T *Qh = b.Q, *Kh = b.K, *Vh = b.V, *dOh = b.dO;
  const Acc L_i = i < p.N ? p.L[b.qhead + i] : Acc(0);
  const Acc D_i = i < p.N ? p.D[b.qhead + i] : Acc(0);
  Acc dQ[C::kColsPerThread] = {};
  const TileRange tiles = gen_tiles<false>(p, i0);

  // ---- main loop over key tiles [j0, j0 + nx)
  for (int kb = tiles.begin; kb < tiles.end; ++kb) {
    const int j0 = kb * C::kOther, nx = min(C::kOther, p.Nk - j0);
    Acc s[C::kPerThread] = {}, dp[C::kPerThread] = {};  // S = Q·Kᵀ, dP = dO·Vᵀ
    for (int k0 = 0; k0 < p.d; k0 += C::kChunk) {
      __syncthreads();
      gen_stage(sQ, Qh, i0, k0, p.N, p.d);
      gen_stage(sdO, dOh, i0, k0, p.N, p.d);
      gen_stage(sK, Kh, j0, k0, p.Nk, p.d);
      gen_stage(sV, Vh, j0, k0, p.Nk, p.d);
      __syncthreads();
      gen_dot(s, sQ, sK, th);
      gen_dot(dp, sdO, sV, th);
    }
#pragma unroll
    for (int k = 0; k < C::kPerThread; ++k) {
      const int j = j0 + th.r + 8 * k;
      const bool visible = p.sees(i, j);
      const Acc P = visible ? acc_exp(s[k] * p.scale - L_i) : Acc(0);
      sdS[th.o * C::kStride + th.r + 8 * k] = visible ? P * (dp[k] - D_i) : Acc(0);
    }
    __syncthreads();
    gen_accumulate(dQ, sdS, Kh, j0, nx, c0, p.d, th);  // undoes S = s·Q·Kᵀ: dQ += dS·K
  }

  // ---- epilogue: dQ = s·Σ dS·K
  if (i < p.N) {
#pragma unroll
    for (int k = 0; k < C::kColsPerThread; ++k) dQ[k] *= p.scale;
    gen_store(p.dQ + (b.qhead + i) * p.d, dQ, c0, p.d, th);
  }
}
}  // namespace

namespace attn {

template <typename T>
void launch_bwd_generic(const Params<T>& p) {
  launch_generic(attention_bwd_dkdv_generic_kernel<T>, p, GenericTraits::kBwdDkdvSmem, /*key_side=*/true);
  launch_generic(attention_bwd_dq_generic_kernel<T>, p, GenericTraits::kBwdDqSmem);
}

template void launch_bwd_generic<double>(const Params<double>&);
template void launch_bwd_generic<float>(const Params<float>&);
template void launch_bwd_generic<__nv_bfloat16>(const Params<__nv_bfloat16>&);
template void launch_bwd_generic<__half>(const Params<__half>&);
}  // namespace attn
}  // namespace gg::kernels::cuda
