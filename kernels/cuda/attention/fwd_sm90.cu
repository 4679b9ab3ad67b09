// The forward's sm_90a kernel (fwd.cuh has the math and the schedule):
// (warp-specialised; bf16/f16, d in {64, 128}, scale > 0; FwdSm90Traits):
//   1 + kC warpgroups per block of 64·kC query rows (kC = 3 at d = 64, 2 at d = 128). Warpgroup 0
//   is the producer: one thread copies Q once and the K and V tiles (128 keys) by TMA into a ring
//   of 3 stages. Each consumer owns 64 query rows and runs, per key tile j,
//     S_{j+1} = Q·K_{j+1}ᵀ   wgmma m64n128k16, A = Q (smem), B = K (smem, K-major)
//     O      += P_j·V_j      wgmma m64n64k16 per 64 columns, A = P (registers), B = V (MN-major)
//   with the softmax of tile j + 1 on the CUDA cores while P_j·V_j runs on the tensor cores. With
//   two consumers they issue their products in turns (ping-pong). Tiles are 128-byte swizzled
//   (common.cuh); the wgmma accumulators have the mma.sync tile layout, so the softmax
//   and the epilogue are shared with the sm_80 kernel. Tail split (non-causal): the units of a
//   last, partial wave are swept in pieces whose partial rows fwd_merge_kernel combines. Windows
//   bounded on both sides: persistent blocks, one per SM, taking units in turn.
#include <algorithm>

#include "kernels/cuda/attention/common.cuh"
#include "kernels/cuda/attention/fwd.cuh"
#include "kernels/cuda/attention/hopper.cuh"
#include "kernels/cuda/attention/plan.h"
#include "kernels/cuda/attention/sweeps.cuh"
#include "kernels/cuda/tma.cuh"

namespace gg::kernels::cuda {
namespace {

using namespace attn;

// Three consumers at d = 64, two taking turns at d = 128 (times: docs/kernels.md §2, Forward).
// The consumers read the same K and V tiles (a half or a third of the loads per flop of 64-row
// blocks), and no consumer instruction is a load or a block barrier; registers move from the
// producer to the consumers with setmaxnreg.

// Online-softmax step of one 16 x kBN score tile (this warp's rows g and g + 8), in place:
// s (raw scores Q·Kᵀ) becomes P = exp2(s·sl2 - m) with keys past N and (causal) after the row
// masked out (softmax_scores; the general mask's overload: the keys the row does not see); m (log2
// units) and l are updated, and alpha is the factor by which the output accumulator must be
// rescaled (rescale_rows). Requires sl2 > 0, so the row maximum can be taken over the raw scores
// and each entry costs one FFMA before its exp2. Tiles with no masked entry (most) run a copy
// without the index arithmetic (with_mask). online_softmax: the statistics, once the hidden
// entries are -inf.
template <int kBN>
__device__ __forceinline__ void online_softmax(float (&s)[kBN / 8][4], float (&m)[2], float (&l)[2],
                                               float (&alpha)[2], float sl2) {
#pragma unroll
  for (int h = 0; h < 2; ++h) {
    float mx = -INFINITY;
#pragma unroll
    for (int j = 0; j < kBN / 8; ++j) mx = fmaxf(mx, fmaxf(s[j][2 * h], s[j][2 * h + 1]));
    const float m_new = fmaxf(m[h], quad_max(mx) * sl2);
    const float m_use = m_new == -INFINITY ? 0.f : m_new;
    alpha[h] = fast_exp2(m[h] - m_use);
    m[h] = m_new;
    float row_sum = 0.f;
#pragma unroll
    for (int j = 0; j < kBN / 8; ++j)
#pragma unroll
      for (int e = 2 * h; e < 2 * h + 2; ++e) {
        s[j][e] = fast_exp2(fmaf(s[j][e], sl2, -m_use));
        row_sum += s[j][e];
      }
    l[h] = l[h] * alpha[h] + row_sum;
  }
}

template <int kBN>
__device__ __forceinline__ void softmax_scores(float (&s)[kBN / 8][4], float (&m)[2], float (&l)[2],
                                               float (&alpha)[2], float sl2, int j0, int iw, int N, bool causal,
                                               int lane) {
  with_mask(j0 + kBN > N || (causal && j0 + kBN - 1 > iw), [&](auto tag) {
    constexpr bool kMasked = decltype(tag)::value;
    if constexpr (kMasked) {
#pragma unroll
      for (int j = 0; j < kBN / 8; ++j)
#pragma unroll
        for (int e = 0; e < 4; ++e) {
          const int key = j0 + frag_col(lane, j, e), row = iw + frag_row(lane, e);
          if (key >= N || (causal && key > row)) s[j][e] = -INFINITY;
        }
    }
    online_softmax<kBN>(s, m, l, alpha, sl2);
  });
}
// The same under the general mask (MaskBand::keys_of of the thread's rows; none past N).
template <int kBN, typename T>
__device__ __forceinline__ void softmax_scores(float (&s)[kBN / 8][4], float (&m)[2], float (&l)[2],
                                               float (&alpha)[2], float sl2, int j0, int iw, const Params<T>& p,
                                               int lane) {
  with_mask(j0 < p.key_lo(iw + 15) || j0 + kBN > p.key_hi(iw), [&](auto tag) {
    constexpr bool kMasked = decltype(tag)::value;
    if constexpr (kMasked) {
      const MaskBand::Range seen[2] = {p.mask().keys_of(iw + frag_row(lane, 0)),
                                       p.mask().keys_of(iw + frag_row(lane, 2))};
#pragma unroll
      for (int j = 0; j < kBN / 8; ++j)
#pragma unroll
        for (int e = 0; e < 4; ++e)
          if (!seen[e / 2].holds(j0 + frag_col(lane, j, e))) s[j][e] = -INFINITY;
    }
    online_softmax<kBN>(s, m, l, alpha, sl2);
  });
}

template <int kD>
__device__ __forceinline__ void rescale_rows(float (&acc)[kD / 8][4], const float (&alpha)[2]) {
#pragma unroll
  for (int j = 0; j < kD / 8; ++j)
#pragma unroll
    for (int e = 0; e < 4; ++e) acc[j][e] *= alpha[e / 2];
}

// Tail split of the forward (non-causal; the fused sweeps' TailSplit and plan_tail_split, with
// blocks of query rows and key tiles): the units of a last, partial wave are each swept by several
// blocks over runs of their key tiles; a piece writes its unnormalised rows (the accumulator, the
// row maximum m in log2 units and the row sum l) to the scratch, kBlockM·(kD + 2) floats per
// piece, pieces of a unit in order, and fwd_merge_kernel combines them: O = Σ acc_k·2^(m_k - M) /
// Σ l_k·2^(m_k - M), L = (M + log2 Σ ...)·ln 2 with M = max m_k. Plain stores and a fixed order:
// deterministic (not bitwise equal to the unsplit kernel, whose sums run in another order).
template <int kBlockM, int kD>
__device__ __forceinline__ void fwd_partial_epilogue(float* piece, const float (&acc)[kD / 8][4], const float (&m)[2],
                                                     const float (&l)[2], int r0, int lane) {
#pragma unroll
  for (int h = 0; h < 2; ++h) {
    const float l_row = quad_sum(l[h]);
    const int r = r0 + frag_row(lane, 2 * h);  // row within the unit
    if (lane % 4 == 0) {
      piece[kBlockM * kD + r] = m[h];
      piece[kBlockM * (kD + 1) + r] = l_row;
    }
#pragma unroll
    for (int j = 0; j < kD / 8; ++j)
      *reinterpret_cast<float2*>(piece + r * kD + frag_col(lane, j, 0)) = make_float2(acc[j][2 * h], acc[j][2 * h + 1]);
  }
}

// kFwdMergeRows rows of a split unit per block (kBlockM / kFwdMergeRows blocks per unit), 16 threads per
// row, each with kD / 32 column pairs: one row per thread and every piece's loads issued together,
// so that the merge waits for about two memory round trips (one block per unit, each thread going
// round its rows one after another, waited for about fifty).
constexpr int kFwdMergeRows = 16;
template <int kBlockM>
constexpr int fwd_merge_blocks(int split_units) {
  return split_units * (kBlockM / kFwdMergeRows);
}
// Rows of the split units (below N) from their pieces' partial rows, summed over the pieces in
// order (k = 0, 1, ...).
template <typename T, int kBlockM, int kD>
__global__ void __launch_bounds__(256) fwd_merge_kernel(const Params<T> p, const float* scratch, int whole,
                                                        int pieces) {
  static_assert(kBlockM % kFwdMergeRows == 0 && kD % 32 == 0, "16 rows per block, 16 threads per row");
  constexpr int kPairs = kD / 32;  // column pairs per thread: pair q·16 + t of its row
  constexpr int64_t kPiece = int64_t{kBlockM} * (kD + 2);
  const int su = blockIdx.x / (kBlockM / kFwdMergeRows), t = threadIdx.x % 16;
  const int r = (blockIdx.x % (kBlockM / kFwdMergeRows)) * kFwdMergeRows + threadIdx.x / 16;  // row in the unit
  const BlockCoord uc = unit_coord(int64_t{whole} + su, cdiv(p.N, kBlockM));
  const int row = uc.blk * kBlockM + r;
  if (row >= p.N) return;
  const float* unit = scratch + su * pieces * kPiece;
  float M = -INFINITY;
#pragma unroll 4
  for (int k = 0; k < pieces; ++k) M = fmaxf(M, unit[k * kPiece + kBlockM * kD + r]);
  float lsum = 0.f, o[kPairs][2] = {};
#pragma unroll 4
  for (int k = 0; k < pieces; ++k) {
    const float* pc = unit + k * kPiece;
    const float w = exp2f(pc[kBlockM * kD + r] - M);
    lsum += w * pc[kBlockM * (kD + 1) + r];
#pragma unroll
    for (int q = 0; q < kPairs; ++q) {
      const float2 v = *reinterpret_cast<const float2*>(pc + r * kD + 2 * (q * 16 + t));
      o[q][0] += w * v.x;
      o[q][1] += w * v.y;
    }
  }
  const int64_t out = (uc.bh * p.N + row) * kD;
#pragma unroll
  for (int q = 0; q < kPairs; ++q)
    *reinterpret_cast<uint32_t*>(p.O_out + out + 2 * (q * 16 + t)) = Elem<T>::pack(o[q][0] / lsum, o[q][1] / lsum);
  if (t == 0) p.L_out[uc.bh * p.N + row] = (M + log2f(lsum)) * kLn2;
}

// kOpts: grouped heads, Nq != Nk or a window: K and V tiles of the query head's key/value head,
// the band of key tiles the block's rows see (no tail split), the general mask, and rows that see
// no key written as O = 0, L = -inf. With three consumers (d = 64, no turns) each consumer takes
// only the tiles its own 64 rows see and lets the others pass. A kOpts launch with fewer blocks
// than units (windows bounded on both sides: every band about as long) is persistent: block b
// takes units b, b + gridDim.x, ..., and the producer loads the next unit's Q and first tiles
// while the consumers finish the last tile and write the rows out.
template <typename T, int kD, bool kOpts>
__global__ void __launch_bounds__(FwdSm90Traits<kD>::kThreads, 1)
    attention_fwd_ws_kernel(const Params<T> p, const __grid_constant__ CUtensorMap tmQ,
                            const __grid_constant__ CUtensorMap tmK, const __grid_constant__ CUtensorMap tmV,
                            bool ping_pong, const __grid_constant__ TailSplit split) {
#if defined(GG_WGMMA_AVAILABLE)
  using Cfg = FwdSm90Traits<kD>;
  constexpr int kC = Cfg::kConsumers, kBN = Cfg::kBlockN, kS = Cfg::kStages;
  extern __shared__ __align__(1024) unsigned char smem_raw[];
  T* sQ = reinterpret_cast<T*>(smem_raw);  // [kC consumers][64 x kD], swizzled
  T* sK = sQ + kC * Cfg::kQElems;          // [kS][kBN x kD]
  T* sV = sK + kS * Cfg::kTileElems;       // [kS][kBN x kD]
  uint64_t* bars = reinterpret_cast<uint64_t*>(sV + kS * Cfg::kTileElems);
  uint64_t* barQ = bars;            // Q landed
  uint64_t* fullK = bars + 1;       // [kS] K tile landed
  uint64_t* fullV = fullK + kS;     // [kS] V tile landed
  uint64_t* emptyK = fullV + kS;    // [kS] every consumer done with the K tile
  uint64_t* emptyV = emptyK + kS;   // [kS] every consumer done with the V tile
  uint64_t* emptyQ = emptyV + kS;   // every consumer done with Q (kOpts: the next unit's may load)

  // The block's unit (rows [i0, i0 + kBlockM) of head bh) and its key tiles [t0, t0 + n_tiles)
  // (split: sweep_unit, never causal). kOpts: unit u of `units`; the band of key tiles the rows
  // see (no row sees a key: one tile, all of it masked).
  const int per_head = cdiv(p.N, Cfg::kBlockM);
  const int64_t units = kOpts ? p.BH * per_head : 1;
  struct Unit {
    int64_t bh;
    int i0, t0, n_tiles;
  };
  auto unit_at = [&](int64_t u) {
    if constexpr (kOpts) {
      const BlockCoord bc = unit_coord(u, per_head);
      const int i0 = bc.blk * Cfg::kBlockM;
      const TileRange band = key_tiles<kBN, true>(p, i0, i0 + Cfg::kBlockM);
      return Unit{bc.bh, i0, band.begin, band.end - band.begin};
    } else {
      const SweepUnit su = p.causal ? sweep_unit<Cfg::kBlockM, kBN>(p.N, false)
                                    : sweep_unit<Cfg::kBlockM, kBN>(p.N, false, split);
      const int i0 = su.blk * Cfg::kBlockM;
      return Unit{su.bh, i0, su.t_begin,
                  p.causal ? cdiv(min(p.N, i0 + Cfg::kBlockM), kBN) : su.t_end - su.t_begin};
    }
  };
  const int64_t first = kOpts ? int64_t{blockIdx.x} : 0, stride = kOpts ? int64_t{gridDim.x} : 1;
  constexpr uint32_t kTileBytes = Cfg::kTileElems * 2;
  if (threadIdx.x == 0) {
    mbar_init(barQ, 1);
    mbar_init(emptyQ, 128 * kC);
    for (int s = 0; s < kS; ++s) {
      mbar_init(&fullK[s], 1);
      mbar_init(&fullV[s], 1);
      mbar_init(&emptyK[s], 128 * kC);  // every consumer thread arrives
      mbar_init(&emptyV[s], 128 * kC);
    }
    mbar_fence_init();
  }
  __syncthreads();

  const int wg = warpgroup_index();
  if (wg == 0) {
    // ---- phase 1 (producer): per unit Q (once the previous unit's is released), then K_j and V_j
    // into ring stage g % kS (g counting the block's tiles) once it is released
    setmaxnreg_dec<Cfg::kProducerRegs>();
    if (threadIdx.x == 0) {
      int g0 = 0, k = 0;
      for (int64_t u = first; u < units; u += stride, ++k) {
        const Unit un = unit_at(u);
        const int bh = static_cast<int>(un.bh);
        const int kvh = kOpts ? static_cast<int>(p.kv_head(un.bh)) : bh;  // the key/value head
        if (k > 0) mbar_wait(emptyQ, (k - 1) & 1);
        mbar_expect_tx(barQ, kC * Cfg::kQElems * 2);
        for (int c = 0; c < kC; ++c)
          for (int h = 0; h < kD / 64; ++h)
            tma_load_3d(sQ + c * Cfg::kQElems + h * 64 * 64, &tmQ, barQ, 64 * h, un.i0 + 64 * c, bh);
        for (int j = 0; j < un.n_tiles; ++j) {
          const int g = g0 + j, s = g % kS;
          if (g >= kS) mbar_wait(&emptyK[s], ((g / kS) - 1) & 1);  // the stage's previous tile released
          mbar_expect_tx(&fullK[s], kTileBytes);
          for (int h = 0; h < kD / 64; ++h)
            tma_load_3d(sK + s * Cfg::kTileElems + h * kBN * 64, &tmK, &fullK[s], 64 * h, (un.t0 + j) * kBN, kvh);
          if (g >= kS) mbar_wait(&emptyV[s], ((g / kS) - 1) & 1);
          mbar_expect_tx(&fullV[s], kTileBytes);
          for (int h = 0; h < kD / 64; ++h)
            tma_load_3d(sV + s * Cfg::kTileElems + h * kBN * 64, &tmV, &fullV[s], 64 * h, (un.t0 + j) * kBN, kvh);
        }
        g0 += un.n_tiles;
      }
    }
  } else {
    // ---- phase 2 (consumers): rows [iw0, iw0 + 64) of this warpgroup; this warp's rows [iw, iw + 16)
    setmaxnreg_inc<Cfg::kConsumerRegs>();
    const int c = wg - 1;
    const int warp = (threadIdx.x % 128) / 32, lane = threadIdx.x % 32;
    const float sl2 = p.scale * kLog2e;
    const uint64_t dQ = make_desc_sw128(sQ + c * Cfg::kQElems);
    PingPong pp;  // turns: the first scores, then per tile the next scores with P·V
    pp.ping_pong_open(c, kC == 2 && ping_pong);  // turns are for two consumers
    int g0 = 0, k = 0;
    for (int64_t u = first; u < units; u += stride, ++k) {
      const Unit un = unit_at(u);
      const int i0 = un.i0, t0 = un.t0, n_tiles = un.n_tiles;
      const int iw = i0 + 64 * c + 16 * warp;
      const int64_t head = un.bh * p.N;
      // this consumer's tiles [ja, jb) of the unit's (kOpts without turns: those its rows see)
      int ja = 0, jb = n_tiles;
      if constexpr (kOpts && !Cfg::kPingPong) {
        const int r0 = i0 + 64 * c;
        const TileRange own = key_tiles<kBN, false>(p, r0, r0 + 64);
        if (r0 < p.N && own.end > own.begin) {
          ja = own.begin - t0;
          jb = own.end - t0;
        }
      }
      // a tile this consumer does not take: released once it has landed
      auto pass = [&](int j) {
        const int g = g0 + j;
        mbar_wait(&fullK[g % kS], (g / kS) & 1);
        mbar_arrive(&emptyK[g % kS]);
        mbar_wait(&fullV[g % kS], (g / kS) & 1);
        mbar_arrive(&emptyV[g % kS]);
      };
      float s[kBN / 8][4];  // scores of the next tile, then its P in place
      auto issue_scores = [&](int j) {  // s = Q·K_jᵀ, issued and committed (not waited)
        const int g = g0 + j;
        mbar_wait(&fullK[g % kS], (g / kS) & 1);
        wgmma_fence();
        wgmma_fence_regs(s);
        const int st = warp_uniform(g % kS);  // the descriptor in uniform registers
        wgmma_score_product<T, kD, kBN>(s, dQ, make_desc_sw128(sK + st * Cfg::kTileElems));
        wgmma_commit();
      };

      // Per tile j: issue S_{j+1} = Q·K_{j+1}ᵀ and O += P_j·V_j (P_j: bf16/f16 A fragments from the
      // previous step), wait for S_{j+1} only, run its softmax while P_j·V_j is still on the tensor
      // cores, then wait for that and rescale O by the new row maxima.
      float m[2] = {-INFINITY, -INFINITY};
      float l[2] = {0.f, 0.f}, alpha[2];
      float acc[kD / 8][4];
      zero(acc);
      uint32_t pa[kBN / 16][4];  // P_j
      for (int j = 0; j < ja; ++j) pass(j);
      mbar_wait(barQ, k & 1);
      pp.turn_begin();
      issue_scores(ja);
      pp.turn_end();
      wgmma_wait<0>();
      wgmma_fence_regs(s);
      mbar_arrive(&emptyK[(g0 + ja) % kS]);
      auto softmax = [&](int j0) {
        if constexpr (kOpts) softmax_scores<kBN>(s, m, l, alpha, sl2, j0, iw, p, lane);
        else softmax_scores<kBN>(s, m, l, alpha, sl2, j0, iw, p.N, p.causal, lane);
      };
      softmax((t0 + ja) * kBN);  // O = 0: nothing to rescale
      tile_to_a_frags<T, kBN>(pa, s);
      auto issue_pv = [&](int j) {  // acc += P_j·V_j, issued and committed
        wgmma_fence();
        const int st = warp_uniform((g0 + j) % kS);
        wgmma_coef_product<T, kD, kBN>(acc, pa, make_desc_sw128(sV + st * Cfg::kTileElems));
        wgmma_commit();
      };
      for (int j = ja; j + 1 < jb; ++j) {
        const int g = g0 + j;
        mbar_wait(&fullV[g % kS], (g / kS) & 1);
        wgmma_fence_regs(acc);
        pp.turn_begin();
        issue_scores(j + 1);
        issue_pv(j);
        pp.turn_end();
        wgmma_wait<1>();  // S_{j+1} landed (groups complete in order); P_j·V_j may still run
        wgmma_fence_regs(s);
        mbar_arrive(&emptyK[(g + 1) % kS]);
        softmax((t0 + j + 1) * kBN);
        wgmma_wait<0>();
        wgmma_fence_regs(acc);
        mbar_arrive(&emptyV[g % kS]);
        rescale_rows<kD>(acc, alpha);
        tile_to_a_frags<T, kBN>(pa, s);
      }
      if constexpr (kOpts) mbar_arrive(emptyQ);  // every score product is complete
      {  // the last tile: P·V alone
        const int g = g0 + jb - 1;
        mbar_wait(&fullV[g % kS], (g / kS) & 1);
        wgmma_fence_regs(acc);
        pp.turn_begin();
        issue_pv(jb - 1);
        pp.turn_end();
        wgmma_wait<0>();
        wgmma_fence_regs(acc);
        mbar_arrive(&emptyV[g % kS]);
      }
      for (int j = jb; j < n_tiles; ++j) pass(j);

      if constexpr (!kOpts) pp.ping_pong_close();
      const int piece = static_cast<int>(blockIdx.x) - split.whole;
      if (!kOpts && piece >= 0)  // a piece of a split unit
        fwd_partial_epilogue<Cfg::kBlockM, kD>(split.scratch + static_cast<int64_t>(piece) * Cfg::kBlockM * (kD + 2),
                                               acc, m, l, iw - i0, lane);
      else
        fwd_epilogue<T, kD, kOpts>(p, acc, m, l, head, iw, lane);
      g0 += n_tiles;
    }
    if constexpr (kOpts) pp.ping_pong_close();
  }
#else
  __trap();  // launched only where sm_90a code was built and the device is 9.x
#endif
}
}  // namespace

namespace attn {

template <typename T, int kD>
void launch_fwd_sm90(const Params<T>& p) {
  using Cfg = FwdSm90Traits<kD>;
  const CUtensorMap tmQ = make_tensor_map(p.Q, p.BH, p.N, kD, 64);
  const CUtensorMap tmK = make_tensor_map(p.K, p.BHkv(), p.Nk, kD, Cfg::kBlockN);
  const CUtensorMap tmV = make_tensor_map(p.V, p.BHkv(), p.Nk, kD, Cfg::kBlockN);
  auto kernel = static_switch([](auto kOpts) { return attention_fwd_ws_kernel<T, kD, kOpts>; }, p.opts);
  set_smem(kernel, Cfg::kSmemBytes);
  // pieces of at least 16 tiles of 128 keys: shorter ones do not pay for the merge kernel and the
  // scratch (docs/kernels.md §6)
  const TailSplitPlan plan = plan_tail_split(grid_x(p.BH, cdiv(p.N, Cfg::kBlockM)), cdiv(p.N, Cfg::kBlockN),
                                             p.causal || p.opts, tail_split_sms(), Cfg::kMinSplitTiles);
  Scratch scratch(static_cast<size_t>(plan.split_units) * plan.pieces * Cfg::kBlockM * (kD + 2) * sizeof(float));
  const TailSplit split{plan.whole, plan.pieces, plan.split_units, plan.pieces, scratch.as<float>()};
  // a window bounded on both sides: bands of about one length, so one block per SM takes units in
  // turn (each block's prologue and epilogue overlap its neighbours' tiles)
  const bool persistent = p.opts && p.wl >= 0 && p.right() >= 0;
  const int blocks = persistent ? static_cast<int>(std::min<int64_t>(split.blocks(), tail_split_sms())) : split.blocks();
  kernel<<<blocks, Cfg::kThreads, Cfg::kSmemBytes, cuda_stream()>>>(
      p, tmQ, tmK, tmV, Cfg::kPingPong, split);  // turns as an argument, not folded in: docs/kernels.md §2
  CUDA_CHECK_LAUNCH();
  if (plan.split_units > 0) {
    fwd_merge_kernel<T, Cfg::kBlockM, kD><<<fwd_merge_blocks<Cfg::kBlockM>(plan.split_units), 256, 0, cuda_stream()>>>(
        p, scratch.as<float>(), plan.whole, plan.pieces);
    CUDA_CHECK_LAUNCH();
  }
}

template void launch_fwd_sm90<__nv_bfloat16, 64>(const Params<__nv_bfloat16>&);
template void launch_fwd_sm90<__nv_bfloat16, 128>(const Params<__nv_bfloat16>&);
template void launch_fwd_sm90<__half, 64>(const Params<__half>&);
template void launch_fwd_sm90<__half, 128>(const Params<__half>&);
}  // namespace attn
}  // namespace gg::kernels::cuda
