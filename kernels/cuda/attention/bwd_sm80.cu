// The backward's sm_80 kernels (mma.sync; bf16/f16, d in {32, 64, 128}; Sm80Traits): passes 2
// and 3 of bwd.cuh.
#include "kernels/cuda/attention/bwd.cuh"
#include "kernels/cuda/attention/common.cuh"
#include "kernels/cuda/attention/sweeps.cuh"

namespace gg::kernels::cuda {
namespace {

using namespace attn;

// dK, dV for key rows [j0, j0 + kBlockM); warp w owns keys [jw, jw + 16). kOpts: the general mask
// and shapes; a block of a grouped key/value head sweeps the query tiles of each query head of
// its group in turn (one pipeline over all of them) and sums in its accumulators.
template <typename T, int kD, bool kOpts>
__global__ void __launch_bounds__(Sm80Traits<kD>::kThreads, 1) attention_bwd_dkdv_tc_kernel(const Params<T> p) {
  using Cfg = Sm80Traits<kD>;
  constexpr int kBM = Cfg::kBlockM, kBN = Cfg::kBlockN, kStride = Cfg::kStride;
  extern __shared__ __align__(1024) unsigned char smem_raw[];
  T* sK = reinterpret_cast<T*>(smem_raw);      // own   [kBM][kStride]
  T* sV = sK + Cfg::kOwnElems;                 // own   [kBM][kStride]
  T* sQ = sV + Cfg::kOwnElems;                 // other [kStages][kBN][kStride]
  T* sdO = sQ + Cfg::kStages * Cfg::kTileElems;  // other [kStages][kBN][kStride]
  float* sL = reinterpret_cast<float*>(sdO + Cfg::kStages * Cfg::kTileElems);  // [kStages][kBN]
  float* sD = sL + Cfg::kStages * kBN;         // [kStages][kBN]

  // ---- prologue: own key rows (the pipeline adds the first query tile)
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const Sm80KeyBlock<kOpts, kBM, kBN, Params<T>> blk(p, warp);
  const int nk = blk.nk, j0 = blk.j0, jw = blk.jw;
  const int64_t head = blk.head;
  const float sl2 = p.scale * kLog2e;

  auto load_tile = [&](int t, int stage) {
    const int64_t qh = blk.query_head(p, t);
    const int r0 = blk.tile(t) * kBN;
    load_rows_async<T, kD, kBN>(sQ + stage * Cfg::kTileElems, p.Q + qh * kD, r0, p.N);
    load_rows_async<T, kD, kBN>(sdO + stage * Cfg::kTileElems, p.dO + qh * kD, r0, p.N);
    load_scalars_async<Cfg::kThreads>(sL + stage * kBN, p.L + qh, r0, kBN, p.N);
    load_scalars_async<Cfg::kThreads>(sD + stage * kBN, p.D + qh, r0, kBN, p.N);
  };
  load_rows_async<T, kD, kBM>(sK, p.K + head * kD, j0, nk);
  load_rows_async<T, kD, kBM>(sV, p.V + head * kD, j0, nk);

  float dK[kD / 8][4], dV[kD / 8][4];
  zero(dK);
  zero(dV);

  // ---- main loop over query tiles [i0, i0 + kBN), in sub-tiles of 16 queries
  sm80_pipeline(0, blk.steps, load_tile, [&](int t, int stage) {
    const int i0 = blk.tile(t) * kBN;
    const T* sQs = sQ + stage * Cfg::kTileElems;
    const T* sdOs = sdO + stage * Cfg::kTileElems;
    const float* sLs = sL + stage * kBN;
    const float* sDs = sD + stage * kBN;
    if (jw >= nk) return;
    sm80_sub_tiles<kBN>(blk, p, i0, [&](int q, int) {
      // Sᵀ = K·Qᵀ, dPᵀ = V·dOᵀ (16 keys x 16 queries)
      float st[2][4], dpt[2][4];
      zero(st);
      zero(dpt);
      mma_scores<T, kD>(st, sK + 16 * warp * kStride, sQs + 16 * q * kStride, lane);
      mma_scores<T, kD>(dpt, sV + 16 * warp * kStride, sdOs + 16 * q * kStride, lane);

      // Pᵀ = exp(Sᵀ - L) (0 where masked), dSᵀ = Pᵀ∘(dPᵀ - D), in place
#pragma unroll
      for (int n = 0; n < 2; ++n)
#pragma unroll
        for (int e = 0; e < 4; ++e) {
          const int li = 16 * q + frag_col(lane, n, e);  // query within the tile
          const int key = jw + frag_row(lane, e);
          const float P = blk.sees(p, i0 + li, key) ? exp2f(st[n][e] * sl2 - sLs[li] * kLog2e) : 0.f;
          st[n][e] = P;
          dpt[n][e] = P * (dpt[n][e] - sDs[li]);
        }

      uint32_t a[4];
      to_a_frag<T>(a, st);
      mma_accumulate<T, kD, kD>(dV, a, sdOs + 16 * q * kStride, lane);  // dV += Pᵀ·dO
      to_a_frag<T>(a, dpt);
      mma_accumulate<T, kD, kD>(dK, a, sQs + 16 * q * kStride, lane);   // dK += dSᵀ·Q
    });
  });

  // ---- epilogue: dK = s·Σ dSᵀ·Q, dV
  const float one[2] = {1.f, 1.f}, scale[2] = {p.scale, p.scale};
  store_acc<T, kD>(p.dK + (head + jw) * kD, kD, dK, scale, jw, nk, lane);
  store_acc<T, kD>(p.dV + (head + jw) * kD, kD, dV, one, jw, nk, lane);
}

// dQ for query rows [i0, i0 + kBlockM); warp w owns queries [iw, iw + 16). kOpts: the general
// mask and shapes (Params::sees), as the forward.
template <typename T, int kD, bool kOpts>
__global__ void __launch_bounds__(Sm80Traits<kD>::kThreads, 1) attention_bwd_dq_tc_kernel(const Params<T> p) {
  using Cfg = Sm80Traits<kD>;
  constexpr int kBM = Cfg::kBlockM, kBN = Cfg::kBlockN, kStride = Cfg::kStride;
  extern __shared__ __align__(1024) unsigned char smem_raw[];
  T* sQ = reinterpret_cast<T*>(smem_raw);      // own   [kBM][kStride]
  T* sdO = sQ + Cfg::kOwnElems;                // own   [kBM][kStride]
  T* sK = sdO + Cfg::kOwnElems;                // other [kStages][kBN][kStride]
  T* sV = sK + Cfg::kStages * Cfg::kTileElems;  // other [kStages][kBN][kStride]

  // ---- prologue: own query rows and their L, D
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const Sm80QueryBlock<kOpts, kBM, kBN, Params<T>> blk(p, warp);
  const int i0 = blk.i0, iw = blk.iw, nk = blk.nk;
  const int64_t head = blk.head;
  const T* Kh = p.K + blk.khead * kD;
  const T* Vh = p.V + blk.khead * kD;
  const float sl2 = p.scale * kLog2e;
  float L2[2], D[2];  // L·log2e and D of own rows g, g + 8
  row_scalars(p, head, iw, lane, L2, D);

  load_rows_async<T, kD, kBM>(sQ, p.Q + head * kD, i0, p.N);
  load_rows_async<T, kD, kBM>(sdO, p.dO + head * kD, i0, p.N);
  auto load_tile = [&](int kb, int stage) {
    load_rows_async<T, kD, kBN>(sK + stage * Cfg::kTileElems, Kh, kb * kBN, nk);
    load_rows_async<T, kD, kBN>(sV + stage * Cfg::kTileElems, Vh, kb * kBN, nk);
  };

  float dQ[kD / 8][4];
  zero(dQ);

  // ---- main loop over key tiles [j0, j0 + kBN), in sub-tiles of keys [js, js + 16)
  sm80_pipeline(blk.begin, blk.end, load_tile, [&](int kb, int stage) {
    const T* sKs = sK + stage * Cfg::kTileElems;
    const T* sVs = sV + stage * Cfg::kTileElems;
    if (iw >= p.N) return;
    sm80_sub_tiles<kBN>(blk, p, kb * kBN, [&](int q, int js) {
      // S = Q·Kᵀ, dP = dO·Vᵀ (16 queries x 16 keys)
      float s[2][4], dp[2][4];
      zero(s);
      zero(dp);
      mma_scores<T, kD>(s, sQ + 16 * warp * kStride, sKs + 16 * q * kStride, lane);
      mma_scores<T, kD>(dp, sdO + 16 * warp * kStride, sVs + 16 * q * kStride, lane);

      // dS = P∘(dP - D), P = exp(S - L), 0 where masked
#pragma unroll
      for (int n = 0; n < 2; ++n)
#pragma unroll
        for (int e = 0; e < 4; ++e) {
          const int key = js + frag_col(lane, n, e), row = iw + frag_row(lane, e);
          const float P = blk.sees(p, row, key) ? exp2f(s[n][e] * sl2 - L2[e / 2]) : 0.f;
          dp[n][e] = P * (dp[n][e] - D[e / 2]);
        }

      uint32_t a[4];
      to_a_frag<T>(a, dp);
      mma_accumulate<T, kD, kD>(dQ, a, sKs + 16 * q * kStride, lane);  // dQ += dS·K
    });
  });

  // ---- epilogue: dQ = s·Σ dS·K
  const float scale[2] = {p.scale, p.scale};
  store_acc<T, kD>(p.dQ + (head + iw) * kD, kD, dQ, scale, iw, p.N, lane);
}
}  // namespace

namespace attn {

template <typename T, int kD>
void launch_bwd_sm80(const Params<T>& p) {
  using Cfg = Sm80Traits<kD>;
  {
    const size_t smem = Cfg::template smem_bytes<T>(/*own=*/2, /*other=*/2, /*scalars=*/2);  // K, V; Q, dO; L, D
    auto kernel = static_switch([](auto kOpts) { return attention_bwd_dkdv_tc_kernel<T, kD, kOpts>; }, p.opts);
    set_smem(kernel, smem);
    kernel<<<grid_x(p.BHkv(), cdiv(p.Nk, Cfg::kBlockM)), Cfg::kThreads, smem, cuda_stream()>>>(p);
    CUDA_CHECK_LAUNCH();
  }
  {
    const size_t smem = Cfg::template smem_bytes<T>(/*own=*/2, /*other=*/2);  // Q, dO; K, V
    auto kernel = static_switch([](auto kOpts) { return attention_bwd_dq_tc_kernel<T, kD, kOpts>; }, p.opts);
    set_smem(kernel, smem);
    kernel<<<grid_x(p.BH, cdiv(p.N, Cfg::kBlockM)), Cfg::kThreads, smem, cuda_stream()>>>(p);
    CUDA_CHECK_LAUNCH();
  }
}

template void launch_bwd_sm80<__nv_bfloat16, 32>(const Params<__nv_bfloat16>&);
template void launch_bwd_sm80<__nv_bfloat16, 64>(const Params<__nv_bfloat16>&);
template void launch_bwd_sm80<__nv_bfloat16, 128>(const Params<__nv_bfloat16>&);
template void launch_bwd_sm80<__half, 32>(const Params<__half>&);
template void launch_bwd_sm80<__half, 64>(const Params<__half>&);
template void launch_bwd_sm80<__half, 128>(const Params<__half>&);
}  // namespace attn
}  // namespace gg::kernels::cuda
