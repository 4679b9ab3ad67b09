// The BoB's sm_80 kernels (bwd_bwd.cuh has the math and the two-pass schedule):
// other side's rows double-buffered by cp.async; per warp, 16x16 sub-tiles of every score product
// by mma, coefficient tiles built in registers and fed straight back as mma A operands. Pass 1
// holds four f32 accumulators of 16 x kBobCols per warp; at d = 128 the columns are split in two
// slices over grid.y (the score tiles are recomputed per slice).
// sm_90a kernels (warp-specialised, bf16/f16, d in {64, 128}; BobQuerySm90Traits,
#include "kernels/cuda/attention/bwd_bwd.cuh"
#include "kernels/cuda/attention/common.cuh"
#include "kernels/cuda/attention/sweeps.cuh"

namespace gg::kernels::cuda {
namespace {

using namespace attn;

// One entry of the split pass 1 (the sm_80 kernel), in place, from P = exp(S - L):
// S <- P, dP <- P∘dP, G <- P∘G·s, Hs <- C1 = P∘((dP - D)∘G·s + H), dS = P∘(dP - D); the row sums
// e += P∘G·s and f += P∘(dP∘G·s + H) (E and F, before the epilogue's -(2·D + dL)·E).
__device__ __forceinline__ void split_pass1_entry(float P, float scale, float D, float& S, float& dP, float& G,
                                                  float& Hs, float& dS, float& e, float& f) {
  const float g = G * scale;
  const float PG = P * g;
  const float ds = P * (dP - D);
  e += PG;
  f += dP * PG + P * Hs;
  Hs = ds * g + P * Hs;
  dS = ds;
  dP = P * dP;
  G = PG;
  S = P;
}

// The score tiles of one 16 x 16 sub-tile of both passes, each an mma product a·bᵀ of an operand
// pair: S, dP, G = Qt·Kᵀ + Q·Ktᵀ (unscaled: the pairs g_qt and g_kt) and H, those of absent
// cotangents left zero. Pass 1 passes query rows as a (the tiles), pass 2 key rows (the tiles
// transposed).
template <typename T>
struct Operands {
  const T *a, *b;
};
template <typename T, int kD>
__device__ __forceinline__ void score_tiles(float (&S)[2][4], float (&dP)[2][4], float (&G)[2][4], float (&Hs)[2][4],
                                            Operands<T> s, Operands<T> dp, Operands<T> g_qt, Operands<T> g_kt,
                                            Operands<T> h, bool has_G, bool has_Qt, bool has_Kt, bool has_H, int lane) {
  zero(S);
  zero(dP);
  zero(G);
  zero(Hs);
  mma_scores<T, kD>(S, s.a, s.b, lane);
  if (has_G) mma_scores<T, kD>(dP, dp.a, dp.b, lane);
  if (has_Qt) mma_scores<T, kD>(G, g_qt.a, g_qt.b, lane);
  if (has_Kt) mma_scores<T, kD>(G, g_kt.a, g_kt.b, lane);
  if (has_H) mma_scores<T, kD>(Hs, h.a, h.b, lane);
}

// The sm_80 pass 1's epilogue: E and F of this warp's rows from the per-thread partial sums
// (written by the blocks of the first column slice), then grad_Q = s·(XA - E·X2 - F·X3) and
// grad_dO = Y - E·O on columns [c0, c0 + kCols).
template <typename T, int kD, int kCols, bool kGiven>
__device__ __forceinline__ void bob_pass1_epilogue(const Params<T>& p, const float (&XA)[kCols / 8][4],
                                                   const float (&X2)[kCols / 8][4], const float (&X3)[kCols / 8][4],
                                                   const float (&Y)[kCols / 8][4], const float (&e_part)[2],
                                                   const float (&f_part)[2], const float (&D)[2], int64_t head, int iw,
                                                   int c0, int lane) {
#pragma unroll
  for (int h = 0; h < 2; ++h) {
    const int row = iw + frag_row(lane, 2 * h);
    float E, F;
    if constexpr (kGiven) {  // the caller's (BobStage::kFromRowSums)
      E = row < p.N ? p.E[head + row] : 0.f;
      F = row < p.N ? p.F[head + row] : 0.f;
    } else {
      E = quad_sum(e_part[h]);
      const float dl = p.row_dL(head, row);  // D[h] is D - dL
      F = quad_sum(f_part[h]) - (2.f * D[h] + dl) * E;
    }
    if (row >= p.N) continue;
    if (!kGiven && blockIdx.y == 0 && lane % 4 == 0) {
      p.E[head + row] = E;
      p.F[head + row] = F;
    }
    const int64_t at = (head + row) * kD + c0;
#pragma unroll
    for (int j = 0; j < kCols / 8; ++j) {
      const int c = frag_col(lane, j, 0);
      float gq[2], gdo[2];
#pragma unroll
      for (int u = 0; u < 2; ++u) {
        const int e = 2 * h + u;
        gq[u] = p.scale * (XA[j][e] - E * X2[j][e] - F * X3[j][e]);
        gdo[u] = kGiven ? Y[j][e] : Y[j][e] - E * Elem<T>::to_acc(p.O[at + c + u]);  // kGiven: E in Y
      }
      *reinterpret_cast<uint32_t*>(p.gQ + at + c) = Elem<T>::pack(gq[0], gq[1]);
      *reinterpret_cast<uint32_t*>(p.gdO + at + c) = Elem<T>::pack(gdo[0], gdo[1]);
    }
  }
}

// Pass 1 for query rows [i0, i0 + kBlockM), output columns [c0, c0 + kCols); warp w owns
// queries [iw, iw + 16). kOpts: the general mask and shapes (Params::sees). kGiven: as for the
// generic pass 1, E and F are the caller's.
template <typename T, int kD, bool kOpts, bool kGiven = false>
__global__ void __launch_bounds__(Sm80Traits<kD>::kThreads, 1) attention_bob_pass1_tc_kernel(const Params<T> p) {
  using Cfg = Sm80Traits<kD>;
  constexpr int kBM = Cfg::kBlockM, kBN = Cfg::kBlockN, kStride = Cfg::kStride, kCols = Cfg::kBobCols;
  extern __shared__ __align__(1024) unsigned char smem_raw[];
  T* sQ = reinterpret_cast<T*>(smem_raw);      // own   [kBM][kStride]
  T* sdO = sQ + Cfg::kOwnElems;
  T* sQt = sdO + Cfg::kOwnElems;
  T* sK = sQt + Cfg::kOwnElems;                // other [kStages][kBN][kStride]
  T* sV = sK + Cfg::kStages * Cfg::kTileElems;
  T* sKt = sV + Cfg::kStages * Cfg::kTileElems;
  T* sVt = sKt + Cfg::kStages * Cfg::kTileElems;

  // ---- prologue: own query rows and their L, D; first key tile
  const bool has_Qt = p.Qt != nullptr, has_Kt = p.Kt != nullptr, has_Vt = p.Vt != nullptr;
  const bool has_G = has_Qt || has_Kt, has_H = has_Vt;
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const Sm80QueryBlock<kOpts, kBM, kBN, Params<T>> blk(p, warp);
  const int i0 = blk.i0, iw = blk.iw, nk = blk.nk;
  const int c0 = blockIdx.y * kCols;
  const int64_t head = blk.head;
  const int64_t hd = head * kD;
  const int64_t kd = blk.khead * kD;  // the key/value head's rows
  const T* Kh = p.K + kd;
  const T* Vh = has_G ? p.V + kd : nullptr;
  const T* Kth = has_Kt ? p.Kt + kd : nullptr;
  const T* Vth = has_Vt ? p.Vt + kd : nullptr;
  const float sl2 = p.scale * kLog2e;
  float L2[2], D[2];  // L·log2e and D of own rows g, g + 8
  row_scalars(p, head, iw, lane, L2, D);
  float E_given[2] = {0.f, 0.f};
  if constexpr (kGiven)
    for (int h = 0; h < 2; ++h) {
      const int row = iw + frag_row(lane, 2 * h);
      E_given[h] = row < p.N ? p.E[head + row] : 0.f;
    }

  auto load_tile = [&](int kb, int stage) {
    load_rows_async<T, kD, kBN>(sK + stage * Cfg::kTileElems, Kh, kb * kBN, nk);
    load_rows_async<T, kD, kBN>(sV + stage * Cfg::kTileElems, Vh, kb * kBN, nk);
    load_rows_async<T, kD, kBN>(sKt + stage * Cfg::kTileElems, Kth, kb * kBN, nk);
    load_rows_async<T, kD, kBN>(sVt + stage * Cfg::kTileElems, Vth, kb * kBN, nk);
  };
  load_rows_async<T, kD, kBM>(sQ, p.Q + hd, i0, p.N);
  load_rows_async<T, kD, kBM>(sdO, p.dO + hd, i0, p.N);
  load_rows_async<T, kD, kBM>(sQt, has_Qt ? p.Qt + hd : nullptr, i0, p.N);

  float XA[kCols / 8][4], X2[kCols / 8][4], X3[kCols / 8][4], Y[kCols / 8][4];
  zero(XA);
  zero(X2);
  zero(X3);
  zero(Y);
  float e_part[2] = {0.f, 0.f}, f_part[2] = {0.f, 0.f};  // this thread's share of E, F's sums
  const T* sQw = sQ + 16 * warp * kStride;
  const T* sdOw = sdO + 16 * warp * kStride;
  const T* sQtw = sQt + 16 * warp * kStride;

  // ---- main loop over key tiles [j0, j0 + kBN), in sub-tiles of keys [js, js + 16)
  sm80_pipeline(blk.begin, blk.end, load_tile, [&](int kb, int stage) {
    const T* sKs = sK + stage * Cfg::kTileElems;
    const T* sVs = sV + stage * Cfg::kTileElems;
    const T* sKts = sKt + stage * Cfg::kTileElems;
    const T* sVts = sVt + stage * Cfg::kTileElems;
    if (iw >= p.N) return;
    sm80_sub_tiles<kBN>(blk, p, kb * kBN, [&](int q, int js) {
      const int sub = 16 * q * kStride;

      // score tiles (16 queries x 16 keys): S, dP, G (unscaled), H
      float S[2][4], dP[2][4], G[2][4], Hs[2][4], dS[2][4];
      score_tiles<T, kD>(S, dP, G, Hs, {sQw, sKs + sub}, {sdOw, sVs + sub}, {sQtw, sKs + sub}, {sQw, sKts + sub},
                         {sdOw, sVts + sub}, has_G, has_Qt, has_Kt, has_H, lane);

      // coefficient tiles, in place: S <- P, dP <- P∘dP, G <- P∘G, Hs <- C1; and dS
#pragma unroll
      for (int n = 0; n < 2; ++n)
#pragma unroll
        for (int e = 0; e < 4; ++e) {
          const int h = e / 2;
          const int key = js + frag_col(lane, n, e), row = iw + frag_row(lane, e);
          const float P = blk.sees(p, row, key) ? exp2f(S[n][e] * sl2 - L2[h]) : 0.f;
          split_pass1_entry(P, p.scale, D[h], S[n][e], dP[n][e], G[n][e], Hs[n][e], dS[n][e], e_part[h], f_part[h]);
          if constexpr (kGiven) G[n][e] -= P * E_given[h];  // dP̄ = P∘(G - E)
        }

      // output products on columns [c0, c0 + kCols) of the key rows. XA, X2, X3 and the
      // (P∘G)·V part of Y cancel in the epilogue (exactly, for a row that sees one key), so
      // their coefficient tiles go in as hi + lo pairs: ~2^-16 instead of 2^-8 relative.
      const T* sKc = sKs + sub + c0;
      uint32_t a[4], lo[4];
      to_a_frag_split<T>(a, lo, Hs);
      mma_accumulate_split<T, kD, kCols>(XA, a, lo, sKc, lane);             // XA += C1·K
      to_a_frag_split<T>(a, lo, S);
      mma_accumulate_split<T, kD, kCols>(X3, a, lo, sKc, lane);             // X3 += P·K
      if (has_Vt) mma_accumulate<T, kD, kCols>(Y, a, sVts + sub + c0, lane);  // Y += P·Vt
      if (has_G) {
        to_a_frag_split<T>(a, lo, dP);
        mma_accumulate_split<T, kD, kCols>(X2, a, lo, sKc, lane);           // X2 += (P∘dP)·K
        to_a_frag_split<T>(a, lo, G);
        mma_accumulate_split<T, kD, kCols>(Y, a, lo, sVs + sub + c0, lane);  // Y += (P∘G)·V
      }
      if (has_Kt) {
        to_a_frag<T>(a, dS);
        mma_accumulate<T, kD, kCols>(XA, a, sKts + sub + c0, lane);        // XA += dS·Kt
      }
    });
  });

  bob_pass1_epilogue<T, kD, kCols, kGiven>(p, XA, X2, X3, Y, e_part, f_part, D, head, iw, c0, lane);
}

// Pass 2 for key rows [j0, j0 + kBlockM); warp w owns keys [jw, jw + 16). kOpts: the general mask
// and shapes; a grouped key/value head's block sweeps its group's query heads in turn.
template <typename T, int kD, bool kOpts>
__global__ void __launch_bounds__(Sm80Traits<kD>::kThreads, 1) attention_bob_pass2_tc_kernel(const Params<T> p) {
  using Cfg = Sm80Traits<kD>;
  constexpr int kBM = Cfg::kBlockM, kBN = Cfg::kBlockN, kStride = Cfg::kStride;
  extern __shared__ __align__(1024) unsigned char smem_raw[];
  T* sK = reinterpret_cast<T*>(smem_raw);      // own   [kBM][kStride]
  T* sV = sK + Cfg::kOwnElems;
  T* sKt = sV + Cfg::kOwnElems;
  T* sVt = sKt + Cfg::kOwnElems;
  T* sQ = sVt + Cfg::kOwnElems;                // other [kStages][kBN][kStride]
  T* sdO = sQ + Cfg::kStages * Cfg::kTileElems;
  T* sQt = sdO + Cfg::kStages * Cfg::kTileElems;
  float* sL = reinterpret_cast<float*>(sQt + Cfg::kStages * Cfg::kTileElems);  // [kStages][kBN] each
  float* sD = sL + Cfg::kStages * kBN;
  float* sE = sD + Cfg::kStages * kBN;
  float* sF = sE + Cfg::kStages * kBN;

  // ---- prologue: own key rows; first query tile
  const bool has_Qt = p.Qt != nullptr, has_Kt = p.Kt != nullptr, has_Vt = p.Vt != nullptr;
  const bool has_G = has_Qt || has_Kt, has_H = has_Vt;
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const Sm80KeyBlock<kOpts, kBM, kBN, Params<T>> blk(p, warp);
  const int nk = blk.nk, j0 = blk.j0, jw = blk.jw;
  const int64_t hd = blk.head * kD;  // the key/value head's rows
  const float sl2 = p.scale * kLog2e;

  auto load_tile = [&](int t, int stage) {
    const int64_t qh = blk.query_head(p, t);
    const int r0 = blk.tile(t) * kBN;
    load_rows_async<T, kD, kBN>(sQ + stage * Cfg::kTileElems, p.Q + qh * kD, r0, p.N);
    load_rows_async<T, kD, kBN>(sdO + stage * Cfg::kTileElems, p.dO + qh * kD, r0, p.N);
    load_rows_async<T, kD, kBN>(sQt + stage * Cfg::kTileElems, has_Qt ? p.Qt + qh * kD : nullptr, r0, p.N);
    load_scalars_async<Cfg::kThreads>(sL + stage * kBN, p.L + qh, r0, kBN, p.N);
    load_scalars_async<Cfg::kThreads>(sD + stage * kBN, p.D + qh, r0, kBN, p.N);
    load_scalars_async<Cfg::kThreads>(sE + stage * kBN, p.E + qh, r0, kBN, p.N);
    load_scalars_async<Cfg::kThreads>(sF + stage * kBN, p.F + qh, r0, kBN, p.N);
  };
  load_rows_async<T, kD, kBM>(sK, p.K + hd, j0, nk);
  load_rows_async<T, kD, kBM>(sV, has_G ? p.V + hd : nullptr, j0, nk);
  load_rows_async<T, kD, kBM>(sKt, has_Kt ? p.Kt + hd : nullptr, j0, nk);
  load_rows_async<T, kD, kBM>(sVt, has_Vt ? p.Vt + hd : nullptr, j0, nk);

  float gK[kD / 8][4], gV[kD / 8][4];
  zero(gK);
  zero(gV);
  const T* sKw = sK + 16 * warp * kStride;
  const T* sVw = sV + 16 * warp * kStride;
  const T* sKtw = sKt + 16 * warp * kStride;
  const T* sVtw = sVt + 16 * warp * kStride;

  // ---- main loop over query tiles [i0, i0 + kBN), in sub-tiles of queries [is, is + 16)
  sm80_pipeline(0, blk.steps, load_tile, [&](int t, int stage) {
    const int i0 = blk.tile(t) * kBN;
    const T* sQs = sQ + stage * Cfg::kTileElems;
    const T* sdOs = sdO + stage * Cfg::kTileElems;
    const T* sQts = sQt + stage * Cfg::kTileElems;
    const float* sLs = sL + stage * kBN;
    const float* sDs = sD + stage * kBN;
    const float* sEs = sE + stage * kBN;
    const float* sFs = sF + stage * kBN;
    if (jw >= nk) return;
    sm80_sub_tiles<kBN>(blk, p, i0, [&](int q, int) {
      const int sub = 16 * q * kStride;

      // score tiles, transposed (16 keys x 16 queries): Sᵀ, dPᵀ, Gᵀ (unscaled), Hᵀ
      float S[2][4], dP[2][4], G[2][4], Hs[2][4];
      score_tiles<T, kD>(S, dP, G, Hs, {sKw, sQs + sub}, {sVw, sdOs + sub}, {sKw, sQts + sub}, {sKtw, sQs + sub},
                         {sVtw, sdOs + sub}, has_G, has_Qt, has_Kt, has_H, lane);

      // coefficient tiles, in place: S <- S̄ᵀ, dP <- dSᵀ, G <- dP̄ᵀ
#pragma unroll
      for (int n = 0; n < 2; ++n)
#pragma unroll
        for (int e = 0; e < 4; ++e) {
          const int li = 16 * q + frag_col(lane, n, e);  // query within the tile
          const int key = jw + frag_row(lane, e);
          const float P = blk.sees(p, i0 + li, key) ? exp2f(S[n][e] * sl2 - sLs[li] * kLog2e) : 0.f;
          coef_entry(P, p.scale, sDs[li], sEs[li], sFs[li], S[n][e], dP[n][e], G[n][e], Hs[n][e]);
        }

      uint32_t a[4];
      to_a_frag<T>(a, S);
      mma_accumulate<T, kD, kD>(gK, a, sQs + sub, lane);     // gK += S̄ᵀ·Q
      if (has_Qt) {
        to_a_frag<T>(a, dP);
        mma_accumulate<T, kD, kD>(gK, a, sQts + sub, lane);  // gK += dSᵀ·Qt
      }
      if (has_G) {
        to_a_frag<T>(a, G);
        mma_accumulate<T, kD, kD>(gV, a, sdOs + sub, lane);  // gV += dP̄ᵀ·dO
      }
    });
  });

  // ---- epilogue: grad_K = s·(S̄ᵀ·Q + dSᵀ·Qt), grad_V
  const float one[2] = {1.f, 1.f}, scale[2] = {p.scale, p.scale};
  store_acc<T, kD>(p.gK + (blk.head + jw) * kD, kD, gK, scale, jw, nk, lane);
  store_acc<T, kD>(p.gV + (blk.head + jw) * kD, kD, gV, one, jw, nk, lane);
}
}  // namespace

namespace attn {

// stage (kernels/params.h): kRowSums runs pass 1 alone (its outputs are scratch), kFromRowSums
// runs pass 1 with the caller's E and F, then pass 2.
template <typename T, int kD>
void launch_bob_sm80(const Params<T>& p, BobStage stage) {
  launch_D(p);
  using Cfg = Sm80Traits<kD>;
  {
    const size_t smem = Cfg::template smem_bytes<T>(/*own=*/3, /*other=*/4);  // Q, dO, Qt; K, V, Kt, Vt
    auto kernel = static_switch(
        [](auto kOpts, auto kGiven) { return attention_bob_pass1_tc_kernel<T, kD, kOpts, kGiven>; }, p.opts,
        stage == BobStage::kFromRowSums);
    set_smem(kernel, smem);
    const dim3 grid(grid_x(p.BH, cdiv(p.N, Cfg::kBlockM)), kD / Cfg::kBobCols);
    kernel<<<grid, Cfg::kThreads, smem, cuda_stream()>>>(p);
    CUDA_CHECK_LAUNCH();
  }
  if (stage == BobStage::kRowSums) return;
  {
    const size_t smem = Cfg::template smem_bytes<T>(/*own=*/4, /*other=*/3, /*scalars=*/4);  // K, V, Kt, Vt; Q, dO, Qt; L, D, E, F
    auto kernel = static_switch([](auto kOpts) { return attention_bob_pass2_tc_kernel<T, kD, kOpts>; }, p.opts);
    set_smem(kernel, smem);
    kernel<<<grid_x(p.BHkv(), cdiv(p.Nk, Cfg::kBlockM)), Cfg::kThreads, smem, cuda_stream()>>>(p);
    CUDA_CHECK_LAUNCH();
  }
}

template void launch_bob_sm80<__nv_bfloat16, 32>(const Params<__nv_bfloat16>&, BobStage);
template void launch_bob_sm80<__nv_bfloat16, 64>(const Params<__nv_bfloat16>&, BobStage);
template void launch_bob_sm80<__nv_bfloat16, 128>(const Params<__nv_bfloat16>&, BobStage);
template void launch_bob_sm80<__half, 32>(const Params<__half>&, BobStage);
template void launch_bob_sm80<__half, 64>(const Params<__half>&, BobStage);
template void launch_bob_sm80<__half, 128>(const Params<__half>&, BobStage);
}  // namespace attn
}  // namespace gg::kernels::cuda
