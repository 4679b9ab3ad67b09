// The BoB's generic kernels (bwd_bwd.cuh has the math and the two-pass schedule; GenericTraits).
#include "kernels/cuda/attention/bwd_bwd.cuh"
#include "kernels/cuda/attention/common.cuh"

namespace gg::kernels::cuda {
namespace {

using namespace attn;

// Pass 1 for query rows [i0, i0 + kRows): thread (o, r) owns query i0 + o and keys j0 + r + 8k.
// kGiven (BobStage::kFromRowSums): E and F are the caller's (p.E, p.F), so dP̄ = P∘(G - E) is
// formed per tile and grad_dO needs no -E·O; nothing is stored to E and F.
// Two blocks per SM with f32 accumulators (at most 128 registers, no spills; without the cap one
// block fits), as in pass 2 (docs/kernels.md §4).
template <typename T, bool kGiven = false>
__global__ void __launch_bounds__(GenericTraits::kThreads, GenericTraits::min_blocks<T>(2))
    attention_bob_pass1_generic_kernel(const Params<T> p) {
  using Acc = typename Elem<T>::Acc;
  using C = GenericTraits;
  // ---- prologue
  GenBlock<T> b(p);
  Acc *sQ = b.stage(), *sdO = b.stage(), *sQt = b.stage();                   // own chunks
  Acc *sK = b.stage(), *sV = b.stage(), *sKt = b.stage(), *sVt = b.stage();  // other chunks
  Acc *sC1 = b.tile(), *sP = b.tile(), *sPdP = b.tile(), *sPG = b.tile();   // coefficient tiles
  Acc* sdS = b.tile();                                                        // [query][key]
  const bool has_Qt = p.Qt != nullptr, has_Kt = p.Kt != nullptr, has_Vt = p.Vt != nullptr;
  const bool has_G = has_Qt || has_Kt, has_H = has_Vt;
  const GenThread th = b.th;
  const int i0 = b.r0, i = i0 + th.o;
  const int c0 = b.c0;
  const int64_t head = b.qhead;
  const T *Qh = b.Q, *Kh = b.K, *Vh = b.V, *dOh = b.dO, *Qth = b.Qt, *Kth = b.Kt, *Vth = b.Vt;
  const Acc L_i = i < p.N ? p.L[head + i] : Acc(0);
  const Acc D_i = i < p.N ? p.D[head + i] : Acc(0);
  const Acc E_given = kGiven && i < p.N ? p.E[head + i] : Acc(0);
  Acc XA[C::kColsPerThread] = {}, X2[C::kColsPerThread] = {}, X3[C::kColsPerThread] = {},
      Y[C::kColsPerThread] = {};
  Acc e_part = 0, f_part = 0;  // this thread's share of Σ_j P∘G and Σ_j P∘(dP∘G + H)
  const TileRange tiles = gen_tiles<false>(p, i0);

  // ---- main loop over key tiles [j0, j0 + nx)
  for (int kb = tiles.begin; kb < tiles.end; ++kb) {
    const int j0 = kb * C::kOther, nx = min(C::kOther, p.Nk - j0);

    // score tiles: S = Q·Kᵀ, dP = dO·Vᵀ, G = Qt·Kᵀ + Q·Ktᵀ (times s below), H = dO·Vtᵀ
    Acc S[C::kPerThread] = {}, dP[C::kPerThread] = {}, G[C::kPerThread] = {}, Hs[C::kPerThread] = {};
    for (int k0 = 0; k0 < p.d; k0 += C::kChunk) {
      __syncthreads();
      gen_stage(sQ, Qh, i0, k0, p.N, p.d);
      gen_stage(sdO, dOh, i0, k0, p.N, p.d);
      gen_stage(sQt, Qth, i0, k0, p.N, p.d);
      gen_stage(sK, Kh, j0, k0, p.Nk, p.d);
      gen_stage(sV, has_G ? Vh : nullptr, j0, k0, p.Nk, p.d);
      gen_stage(sKt, Kth, j0, k0, p.Nk, p.d);
      gen_stage(sVt, Vth, j0, k0, p.Nk, p.d);
      __syncthreads();
      gen_dot(S, sQ, sK, th);
      if (has_G) gen_dot(dP, sdO, sV, th);
      if (has_Qt) gen_dot(G, sQt, sK, th);
      if (has_Kt) gen_dot(G, sQ, sKt, th);
      if (has_H) gen_dot(Hs, sdO, sVt, th);
    }

    // coefficient tiles and row sums (absent G or H are zero tiles here)
#pragma unroll
    for (int k = 0; k < C::kPerThread; ++k) {
      const int j = j0 + th.r + 8 * k;
      const bool visible = p.sees(i, j);
      const Acc P = visible ? acc_exp(S[k] * p.scale - L_i) : Acc(0);
      const Acc g = G[k] * p.scale;
      const Acc PG = P * g;                       // P∘G: E's terms; dP̄ = P∘G - E·P
      const Acc PdP = P * dP[k];                  // P∘dP: the E·dP part of P̄
      const Acc dS = P * (dP[k] - D_i);           // dS = P∘(dP - D)
      const Acc C1 = dS * g + P * Hs[k];          // P∘((dP - D)∘G + H)
      e_part += PG;                               // E = Σ P∘G
      f_part += dP[k] * PG + P * Hs[k];           // F ∋ Σ P∘dP∘G + Σ P∘H
      const int at = th.o * C::kStride + th.r + 8 * k;
      sC1[at] = C1;
      sP[at] = P;
      sPdP[at] = PdP;
      sPG[at] = kGiven ? PG - P * E_given : PG;  // kGiven: dP̄
      sdS[at] = dS;
    }
    __syncthreads();

    // output products on this block's column slice
    gen_accumulate(XA, sC1, Kh, j0, nx, c0, p.d, th);              // XA += C1·K
    gen_accumulate(X3, sP, Kh, j0, nx, c0, p.d, th);               // X3 += P·K
    if (has_G) {
      gen_accumulate(X2, sPdP, Kh, j0, nx, c0, p.d, th);           // X2 += (P∘dP)·K
      gen_accumulate(Y, sPG, Vh, j0, nx, c0, p.d, th);             // Y  += (P∘G)·V
    }
    if (has_Kt) gen_accumulate(XA, sdS, Kth, j0, nx, c0, p.d, th);  // XA += dS·Kt
    if (has_Vt) gen_accumulate(Y, sP, Vth, j0, nx, c0, p.d, th);    // Y  += P·Vt
  }

  // ---- epilogue: E, F; grad_Q = s·(XA - E·X2 - F·X3), grad_dO = Y - E·O
  const Acc E = kGiven ? E_given : group_sum(e_part);
  // F = Σ P∘(dP∘G + H) - (D + D')·E: D_i is D' = D - dL (dS), D = Σ P∘dP (P̄'s E·dP term)
  const Acc dl_i = p.row_dL(head, i);
  const Acc F = kGiven ? (i < p.N ? p.F[head + i] : Acc(0)) : group_sum(f_part) - (Acc(2) * D_i + dl_i) * E;
  if (i < p.N) {
    const T* Oi = b.O + static_cast<int64_t>(i) * p.d;
    Acc gQ[C::kColsPerThread], gdO[C::kColsPerThread];
#pragma unroll
    for (int k = 0; k < C::kColsPerThread; ++k) {
      const int c = c0 + th.r + 8 * k;
      gQ[k] = p.scale * (XA[k] - E * X2[k] - F * X3[k]);
      gdO[k] = Y[k] - (c < p.d && !kGiven ? E * Elem<T>::to_acc(Oi[c]) : Acc(0));
    }
    gen_store(p.gQ + (head + i) * p.d, gQ, c0, p.d, th);
    gen_store(p.gdO + (head + i) * p.d, gdO, c0, p.d, th);
    if (!kGiven && blockIdx.y == 0 && th.r == 0) {
      p.E[head + i] = E;
      p.F[head + i] = F;
    }
  }
}

// Pass 2 for key rows [j0, j0 + kRows): thread (o, r) owns key j0 + o and queries i0 + r + 8k.
// Two blocks per SM with f32 accumulators, as pass 1.
template <typename T>
__global__ void __launch_bounds__(GenericTraits::kThreads, GenericTraits::min_blocks<T>(2))
    attention_bob_pass2_generic_kernel(const Params<T> p) {
  using Acc = typename Elem<T>::Acc;
  using C = GenericTraits;
  // ---- prologue
  GenBlock<T, true> b(p);
  Acc *sK = b.stage(), *sV = b.stage(), *sKt = b.stage(), *sVt = b.stage();  // own chunks
  Acc *sQ = b.stage(), *sdO = b.stage(), *sQt = b.stage();                   // other chunks
  Acc *sSbar = b.tile(), *sdS = b.tile(), *sdPbar = b.tile();                // [key][query]
  const bool has_Qt = p.Qt != nullptr, has_Kt = p.Kt != nullptr, has_Vt = p.Vt != nullptr;
  const bool has_G = has_Qt || has_Kt, has_H = has_Vt;
  const GenThread th = b.th;
  const int j0 = b.r0, j = j0 + th.o;
  const int c0 = b.c0;
  const T *Kh = b.K, *Vh = b.V, *Kth = b.Kt, *Vth = b.Vt;
  Acc gK[C::kColsPerThread] = {}, gV[C::kColsPerThread] = {};
  const TileRange tiles = gen_tiles<true>(p, j0);

  // ---- main loop over the group's query heads g and their query tiles [i0, i0 + nx)
  for (int g = 0; g < p.group; ++g) {
    const T *Qh = b.group_rows(b.Q, p, g), *dOh = b.group_rows(b.dO, p, g), *Qth = b.group_rows(b.Qt, p, g);
    const int64_t head = b.qhead + static_cast<int64_t>(g) * p.N;  // the row scalars' head
    for (int qt = tiles.begin; qt < tiles.end; ++qt) {
      const int i0 = qt * C::kOther, nx = min(C::kOther, p.N - i0);

      // score tiles, transposed: Sᵀ = K·Qᵀ, dPᵀ = V·dOᵀ, Gᵀ = K·Qtᵀ + Kt·Qᵀ (times s), Hᵀ = Vt·dOᵀ
      Acc S[C::kPerThread] = {}, dP[C::kPerThread] = {}, G[C::kPerThread] = {}, Hs[C::kPerThread] = {};
      for (int k0 = 0; k0 < p.d; k0 += C::kChunk) {
        __syncthreads();
        gen_stage(sK, Kh, j0, k0, p.Nk, p.d);
        gen_stage(sV, has_G ? Vh : nullptr, j0, k0, p.Nk, p.d);
        gen_stage(sKt, Kth, j0, k0, p.Nk, p.d);
        gen_stage(sVt, Vth, j0, k0, p.Nk, p.d);
        gen_stage(sQ, Qh, i0, k0, p.N, p.d);
        gen_stage(sdO, dOh, i0, k0, p.N, p.d);
        gen_stage(sQt, Qth, i0, k0, p.N, p.d);
        __syncthreads();
        gen_dot(S, sK, sQ, th);
        if (has_G) gen_dot(dP, sV, sdO, th);
        if (has_Qt) gen_dot(G, sK, sQt, th);
        if (has_Kt) gen_dot(G, sKt, sQ, th);
        if (has_H) gen_dot(Hs, sVt, sdO, th);
      }

      // coefficient tiles with the query rows' D, E, F (absent G or H are zero tiles here)
#pragma unroll
      for (int k = 0; k < C::kPerThread; ++k) {
        const int i = i0 + th.r + 8 * k;
        Acc Sbar = 0, dS = 0, dPbar = 0;
        if (p.sees(i, j)) {
          const Acc L = p.L[head + i], D = p.D[head + i], E = p.E[head + i], F = p.F[head + i];
          const Acc P = acc_exp(S[k] * p.scale - L);
          const Acc g = G[k] * p.scale;
          const Acc Pbar = (dP[k] - D) * g - dP[k] * E + Hs[k];  // P̄ = (dP - D)∘G - dP∘E + H
          Sbar = P * (Pbar - F);                                  // undoes P = softmax(S)
          dS = P * (dP[k] - D);                                   // undoes dS = P∘(dP - D) in P
          dPbar = P * (g - E);                                    // undoes it in dP
        }
        const int at = th.o * C::kStride + th.r + 8 * k;
        sSbar[at] = Sbar;
        sdS[at] = dS;
        sdPbar[at] = dPbar;
      }
      __syncthreads();

      gen_accumulate(gK, sSbar, Qh, i0, nx, c0, p.d, th);              // gK += S̄ᵀ·Q
      if (has_Qt) gen_accumulate(gK, sdS, Qth, i0, nx, c0, p.d, th);   // gK += dSᵀ·Qt
      if (has_G) gen_accumulate(gV, sdPbar, dOh, i0, nx, c0, p.d, th);  // gV += dP̄ᵀ·dO
    }
  }

  // ---- epilogue: grad_K = s·(S̄ᵀ·Q + dSᵀ·Qt), grad_V (0 without G); summed over the group
  if (j < p.Nk) {
#pragma unroll
    for (int k = 0; k < C::kColsPerThread; ++k) gK[k] *= p.scale;
    gen_store(p.gK + (b.khead + j) * p.d, gK, c0, p.d, th);
    gen_store(p.gV + (b.khead + j) * p.d, gV, c0, p.d, th);
  }
}
}  // namespace

namespace attn {

template <typename T>
void launch_bob_generic(const Params<T>& p, BobStage stage) {
  launch_D(p);
  const auto pass1 = static_switch([](auto kGiven) { return attention_bob_pass1_generic_kernel<T, kGiven>; },
                                   stage == BobStage::kFromRowSums);
  launch_generic(pass1, p, GenericTraits::kBobPass1Smem);
  if (stage == BobStage::kRowSums) return;
  launch_generic(attention_bob_pass2_generic_kernel<T>, p, GenericTraits::kBobPass2Smem, /*key_side=*/true);
}

template void launch_bob_generic<double>(const Params<double>&, BobStage);
template void launch_bob_generic<float>(const Params<float>&, BobStage);
template void launch_bob_generic<__nv_bfloat16>(const Params<__nv_bfloat16>&, BobStage);
template void launch_bob_generic<__half>(const Params<__half>&, BobStage);
}  // namespace attn
}  // namespace gg::kernels::cuda
