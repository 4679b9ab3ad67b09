// The forward's sm_80 kernel (fwd.cuh has the math and the schedule):
// (mma.sync; bf16/f16, d in {32, 64, 128}; Sm80Traits):
//   block = 4 warps x 16 query rows (kBlockM = 64); Q rows stay in shared memory, K/V tiles of
//   kBlockN rows are double-buffered by cp.async. Per warp and key tile:
//     S   = Q·Kᵀ            mma (16 x kBlockN, f32), scaled to log2 units: exp2 replaces exp
//     P   = exp2(S - m)     registers; row max/sum over the quad
//     O  += P·V             mma, P converted in registers to the A operand
//   Products: 2 per key tile (4·N²·d flops per head, halved by causality).
#include "kernels/cuda/attention/common.cuh"
#include "kernels/cuda/attention/fwd.cuh"

namespace gg::kernels::cuda {
namespace {

using namespace attn;

// kOpts: grouped heads, Nq != Nk or a window (Params::sees); false: the plain full or causal case.
template <typename T, int kD, bool kOpts>
__global__ void __launch_bounds__(Sm80Traits<kD>::kThreads, 1) attention_fwd_tc_kernel(const Params<T> p) {
  using Cfg = Sm80Traits<kD>;
  constexpr int kBM = Cfg::kBlockM, kBN = Cfg::kBlockN, kStride = Cfg::kStride;
  extern __shared__ __align__(1024) unsigned char smem_raw[];
  T* sQ = reinterpret_cast<T*>(smem_raw);      // [kBM][kStride]
  T* sK = sQ + Cfg::kOwnElems;                 // [kStages][kBN][kStride]
  T* sV = sK + Cfg::kStages * Cfg::kTileElems;  // [kStages][kBN][kStride]

  // ---- prologue: query rows [i0, i0 + kBM); this warp's rows [iw, iw + 16)
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const Sm80QueryBlock<kOpts, kBM, kBN, Params<T>> blk(p, warp);  // key tiles [begin, end)
  const int i0 = blk.i0, iw = blk.iw, iw_last = blk.iw_last, nk = blk.nk;
  const int64_t head = blk.head;
  const T* Kh = p.K + blk.khead * kD;
  const T* Vh = p.V + blk.khead * kD;
  const float sl2 = p.scale * kLog2e;  // S in log2 units

  load_rows_async<T, kD, kBM>(sQ, p.Q + head * kD, i0, p.N);
  auto load_tile = [&](int kb, int stage) {
    load_rows_async<T, kD, kBN>(sK + stage * Cfg::kTileElems, Kh, kb * kBN, nk);
    load_rows_async<T, kD, kBN>(sV + stage * Cfg::kTileElems, Vh, kb * kBN, nk);
  };

  float m[2] = {-INFINITY, -INFINITY};  // running max (log2 units) of rows g and g + 8
  float l[2] = {0.f, 0.f};              // this thread's part of the running row sums
  float acc[kD / 8][4];
  zero(acc);

  // ---- main loop over key tiles [j0, j0 + kBN)
  sm80_pipeline(blk.begin, blk.end, load_tile, [&](int kb, int stage) {
    const int j0 = kb * kBN;
    const T* sKs = sK + stage * Cfg::kTileElems;
    const T* sVs = sV + stage * Cfg::kTileElems;

    const bool warp_sees = kOpts ? iw < p.N && j0 < p.key_hi(iw_last) && j0 + kBN > p.key_lo(iw)
                                 : iw < p.N && !(p.causal && j0 > iw + 15);
    if (!warp_sees) return;  // no key of the tile is visible to the warp
    // S = Q·Kᵀ: 16 x kBN per warp, as kBN/16 sub-tiles
    float s[kBN / 16][2][4];
#pragma unroll
    for (int q = 0; q < kBN / 16; ++q) {
      zero(s[q]);
      mma_scores<T, kD>(s[q], sQ + 16 * warp * kStride, sKs + 16 * q * kStride, lane);
    }

    // scale to log2 units; mask keys past N and (causal) after the row
    const bool need_mask = kOpts ? j0 + kBN > p.key_hi(iw) || j0 < p.key_lo(iw_last)
                                 : j0 + kBN > p.N || (p.causal && j0 + kBN - 1 > iw);
#pragma unroll
    for (int q = 0; q < kBN / 16; ++q)
#pragma unroll
      for (int n = 0; n < 2; ++n)
#pragma unroll
        for (int e = 0; e < 4; ++e) {
          float v = s[q][n][e] * sl2;
          if (need_mask) {
            const int key = j0 + 16 * q + frag_col(lane, n, e), row = iw + frag_row(lane, e);
            if (!blk.sees(p, row, key)) v = -INFINITY;
          }
          s[q][n][e] = v;
        }

    // online softmax, per own row h (rows g and g + 8)
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      float mx = -INFINITY;
#pragma unroll
      for (int q = 0; q < kBN / 16; ++q)
#pragma unroll
        for (int n = 0; n < 2; ++n) mx = fmaxf(mx, fmaxf(s[q][n][2 * h], s[q][n][2 * h + 1]));
      const float m_new = fmaxf(m[h], quad_max(mx));
      const float m_use = m_new == -INFINITY ? 0.f : m_new;
      const float alpha = exp2f(m[h] - m_use);
      m[h] = m_new;
      float row_sum = 0.f;
#pragma unroll
      for (int q = 0; q < kBN / 16; ++q)
#pragma unroll
        for (int n = 0; n < 2; ++n)
#pragma unroll
          for (int e = 2 * h; e < 2 * h + 2; ++e) {
            s[q][n][e] = exp2f(s[q][n][e] - m_use);
            row_sum += s[q][n][e];
          }
      l[h] = l[h] * alpha + row_sum;
#pragma unroll
      for (int j = 0; j < kD / 8; ++j) {
        acc[j][2 * h] *= alpha;
        acc[j][2 * h + 1] *= alpha;
      }
    }

    // O += P·V
#pragma unroll
    for (int q = 0; q < kBN / 16; ++q) {
      uint32_t a[4];
      to_a_frag<T>(a, s[q]);
      mma_accumulate<T, kD, kD>(acc, a, sVs + 16 * q * kStride, lane);
    }
  });

  fwd_epilogue<T, kD, kOpts>(p, acc, m, l, head, iw, lane);  // O = acc / l, L = (m + log2 l)·ln 2
}

}  // namespace

namespace attn {

template <typename T, int kD>
void launch_fwd_sm80(const Params<T>& p) {
  using Cfg = Sm80Traits<kD>;
  const size_t smem = Cfg::template smem_bytes<T>(/*own=*/1, /*other=*/2);  // Q; K, V
  auto kernel = static_switch([](auto kOpts) { return attention_fwd_tc_kernel<T, kD, kOpts>; }, p.opts);
  set_smem(kernel, smem);
  kernel<<<grid_x(p.BH, cdiv(p.N, Cfg::kBlockM)), Cfg::kThreads, smem, cuda_stream()>>>(p);
  CUDA_CHECK_LAUNCH();
}

template void launch_fwd_sm80<__nv_bfloat16, 32>(const Params<__nv_bfloat16>&);
template void launch_fwd_sm80<__nv_bfloat16, 64>(const Params<__nv_bfloat16>&);
template void launch_fwd_sm80<__nv_bfloat16, 128>(const Params<__nv_bfloat16>&);
template void launch_fwd_sm80<__half, 32>(const Params<__half>&);
template void launch_fwd_sm80<__half, 64>(const Params<__half>&);
template void launch_fwd_sm80<__half, 128>(const Params<__half>&);
}  // namespace attn
}  // namespace gg::kernels::cuda
