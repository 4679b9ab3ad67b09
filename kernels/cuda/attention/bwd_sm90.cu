// The backward's sm_90a kernels (bwd.cuh has the math and the passes).
// above. The sm_90a kernels (warp-specialised, BwdSm90Traits) run them with warpgroup MMAs:
//   d = 128  passes 2 and 3 on the key and query sweeps of sweeps.cuh (blocks of 128
//            rows, tiles of 64), their consumers taking turns (ping-pong);
//   d = 64   one fused key sweep: dK, dV and dQ, 5 products per tile instead of 7, each key block
//            adding its part of dQ into an f32 buffer (in a fixed order, or atomically with
//            set_attention_deterministic(false); below, FusedDqPart).
// Non-causal sm_90a key sweeps split their last partial wave (TailSplitRun).
#include "kernels/cuda/attention/bwd.cuh"
#include "kernels/cuda/attention/common.cuh"
#include "kernels/cuda/attention/hopper.cuh"
#include "kernels/cuda/attention/mask.h"
#include "kernels/cuda/attention/sweeps.cuh"

namespace gg::kernels::cuda {
namespace {

using namespace attn;

// The two sweeps of the backward as row loops over the warp-specialised sweeps of
// sweeps.cuh: dK dV on a key sweep (own K, V; query tiles Q, dO with L, D), dQ on a
// query sweep (own Q, dO; key tiles K, V); at d = 64 the fused key sweep instead.

// What the backward's sweeps copy: V (own V rows of dK dV; V tiles of dQ), no cotangents, no E, F.
[[maybe_unused]] __host__ __device__ constexpr Present bwd_present() { return {true, false, false, false, false}; }

// Pᵀ = exp(Sᵀ - L) (0 where masked), dSᵀ = Pᵀ∘(dPᵀ - D), in place, for the query tile t of rows
// [i0, i0 + kBN) against the warpgroup's keys [j0, j0 + 64) (this warp's from jw).
template <int kBN, bool kOpts, typename T>
__device__ __forceinline__ void dkdv_coef(float (&st)[kBN / 8][4], float (&dpt)[kBN / 8][4], const Params<T>& p,
                                          const QueryTiles& t, int i0, int j0, int jw, float sl2, int lane) {
  for_key_tile_entries<kBN, kOpts>(st, p, t, i0, j0, jw, sl2, lane, [&](int j, int e, float P, int li) {
    st[j][e] = P;
    dpt[j][e] = P * (dpt[j][e] - t.D[li]);
  });
}

// dS = P∘(dP - D) in place (dp), P = exp(S - L), 0 where masked, for the key tile of keys
// [j0, j0 + kBN) against the warpgroup's queries [i0, i0 + 64) (this warp's from iw; L2 = L·log2e).
template <int kBN, bool kOpts, typename T>
__device__ __forceinline__ void dq_coef(const float (&s)[kBN / 8][4], float (&dp)[kBN / 8][4], const Params<T>& p,
                                        int j0, int i0, int iw, const float (&L2)[2], const float (&D)[2], float sl2,
                                        int lane) {
  for_query_tile_entries<kBN, kOpts>(s, p, j0, i0, iw, L2, sl2, lane,
                              [&](int j, int e, float P) { dp[j][e] = P * (dp[j][e] - D[e / 2]); });
}

// The products of the two row loops, each issued and committed (not waited for):
// Sᵀ = K·Qᵀ, dPᵀ = V·dOᵀ of the query tile t (64 keys x kBN queries), own: OwnKeyTiles / OwnKeyFrags
template <typename T, int kD, int kBN, typename Own>
__device__ __forceinline__ void issue_dkdv_scores(float (&st)[kBN / 8][4], float (&dpt)[kBN / 8][4], const Own& own,
                                                  const QueryTiles& t) {
  wgmma_fence();
  wgmma_fence_regs(st);
  wgmma_fence_regs(dpt);
  own_score<T, kD, kBN, false, kBN>(st, own.K, t.Q);
  own_score<T, kD, kBN, false, kBN>(dpt, own.V, t.dO);
  wgmma_commit();
}
// dV += Pᵀ·dO, dK += dSᵀ·Q of the query tile t (pa, dsa: Pᵀ and dSᵀ as A fragments)
template <typename T, int kD, int kBN>
__device__ __forceinline__ void issue_dkdv_outputs(float (&dK)[kD / 8][4], float (&dV)[kD / 8][4],
                                                   const uint32_t (&pa)[kBN / 16][4], const uint32_t (&dsa)[kBN / 16][4],
                                                   const QueryTiles& t) {
  wgmma_fence();
  wgmma_coef_product<T, kD, kBN>(dV, pa, t.dO);
  wgmma_coef_product<T, kD, kBN>(dK, dsa, t.Q);
  wgmma_commit();
}
// S = Q·Kᵀ, dP = dO·Vᵀ of the key tile t (64 queries x kBN keys)
template <typename T, int kD, int kBN>
__device__ __forceinline__ void issue_dq_scores(float (&s)[kBN / 8][4], float (&dp)[kBN / 8][4], const OwnTiles& own,
                                                const KeyTiles& t) {
  wgmma_fence();
  wgmma_fence_regs(s);
  wgmma_fence_regs(dp);
  wgmma_score_product<T, kD, kBN>(s, own.Q, t.K);
  wgmma_score_product<T, kD, kBN>(dp, own.dO, t.V);
  wgmma_commit();
}
// dQ += dS·K of the key tile t
template <typename T, int kD, int kBN>
__device__ __forceinline__ void issue_dq_outputs(float (&dQ)[kD / 8][4], const uint32_t (&dsa)[kBN / 16][4],
                                                 const KeyTiles& t) {
  wgmma_fence();
  wgmma_coef_product<T, kD, kBN>(dQ, dsa, t.K);
  wgmma_commit();
}

// dK, dV of one warpgroup (thread tid of 128) owning key rows [j0, j0 + 64), over the steps
// [q_begin, num_q_tiles) of the sweep; own: the own rows (OwnKeyTiles or OwnKeyFrags). kOpts: the
// general mask (the sweep's steps run over the group's query heads).
template <typename T, int kD, bool kOpts, typename Sweep, typename Own>
__device__ __forceinline__ void dkdv_rows(Sweep& sw, const Own& own, const Params<T>& p, int64_t head, int j0,
                                          int q_begin, int num_q_tiles, int tid, const TailSplit& split) {
  constexpr int kBN = BwdSm90Traits::kBlockN;
  const int warp = tid / 32, lane = tid % 32;
  const int jw = j0 + 16 * warp;
  const float sl2 = p.scale * kLog2e;
  float dK[kD / 8][4], dV[kD / 8][4];
  zero(dK);
  zero(dV);

  for (int qt = q_begin; qt < num_q_tiles; ++qt) {
    sw.begin_tile(qt);
    const int i0 = sw.tile(qt) * kBN;
    const QueryTiles t = sw.tiles(qt);
    if (keys_see_query_tile<kBN, kOpts>(p, i0, j0)) {
      // Sᵀ = K·Qᵀ, dPᵀ = V·dOᵀ (64 keys x kBN queries; 16 x kBN for this warp)
      float st[kBN / 8][4], dpt[kBN / 8][4];
      sw.turn_begin();
      issue_dkdv_scores<T, kD, kBN>(st, dpt, own, t);
      sw.turn_end();
      wgmma_wait<0>();
      wgmma_fence_regs(st);
      wgmma_fence_regs(dpt);

      dkdv_coef<kBN, kOpts>(st, dpt, p, t, i0, j0, jw, sl2, lane);
      uint32_t pa[kBN / 16][4], dsa[kBN / 16][4];
      tile_to_a_frags<T, kBN>(pa, st);
      tile_to_a_frags<T, kBN>(dsa, dpt);

      // dV += Pᵀ·dO, dK += dSᵀ·Q
      wgmma_fence_regs(dV);
      wgmma_fence_regs(dK);
      sw.turn_begin();
      issue_dkdv_outputs<T, kD, kBN>(dK, dV, pa, dsa, t);
      sw.turn_end();
      wgmma_wait<0>();
      wgmma_fence_regs(dV);
      wgmma_fence_regs(dK);
    } else {
      sw.skip_turns(2);
    }
    sw.end_tile(qt);
  }

  key_rows_out<kOpts>(p, split, p.dK, p.dV, head, jw, dK, dV, p.scale, lane);  // stored, or a piece's into the scratch
}

// dK, dV and the block's parts of dQ (dq: FusedDqPart) of the fused backward (d = 64): the keys
// [j0, j0 + 64) of one consumer, own K and V in shared memory, the row loop pipelined (a tile's
// score products issued before the previous tile's output products are waited for).
template <typename T, int kD, bool kOpts, typename Sweep, typename Own, typename DqPart>
__device__ __forceinline__ void dkdv_rows_pipelined(Sweep& sw, const Own& own, const Params<T>& p, int64_t head,
                                                    int j0, int q_begin, int num_q_tiles, int tid,
                                                    DqPart&& dq, const TailSplit& split) {
  constexpr int kBN = BwdSm90Traits::kBlockN;
  const int warp = tid / 32, lane = tid % 32;
  const int jw = j0 + 16 * warp;
  const float sl2 = p.scale * kLog2e;
  // causal: both consumers compute every tile from the block's first, a tile before a consumer's
  // keys giving dSᵀ = 0 there, so that the owner's dSᵀ tile is always whole
  const int first = q_begin;
  float dK[kD / 8][4], dV[kD / 8][4];
  zero(dK);
  zero(dV);
  float st[kBN / 8][4], dpt[kBN / 8][4];
  uint32_t pa[kBN / 16][4], dsa[kBN / 16][4];
  auto late = [&](int qt) { dq.late(qt); };  // the dQ product as a late group (pipelined_tiles)
  auto fence_late = [&] { dq.fence(); };
  pipelined_tiles(
      sw, q_begin, first, num_q_tiles, num_q_tiles,
      [&](int qt) { issue_dkdv_scores<T, kD, kBN>(st, dpt, own, sw.tiles(qt)); },
      [&](int qt) { issue_dkdv_outputs<T, kD, kBN>(dK, dV, pa, dsa, sw.tiles(qt)); },
      [&] {
        wgmma_fence_regs(st);
        wgmma_fence_regs(dpt);
      },
      [&] {
        wgmma_fence_regs(dK);
        wgmma_fence_regs(dV);
      },
      [&](int qt) { dkdv_coef<kBN, kOpts>(st, dpt, p, sw.tiles(qt), sw.tile(qt) * kBN, j0, jw, sl2, lane); },
      [&](int qt) {
        tile_to_a_frags<T, kBN>(pa, st);
        tile_to_a_frags<T, kBN>(dsa, dpt);
        dq.frags(qt, dsa);
      },
      [&](int qt) { dq.done(qt); }, late, fence_late);

  key_rows_out<kOpts>(p, split, p.dK, p.dV, head, jw, dK, dV, p.scale, lane);  // stored, or a piece's into the scratch
}

// dQ (d = 128): the queries [i0, i0 + 64) of one consumer, the row loop pipelined. kOpts: the
// general mask; the sweep's tile kb is key tile sw.k0 + kb.
template <typename T, int kD, bool kOpts, typename Sweep>
__device__ __forceinline__ void dq_rows_pipelined(Sweep& sw, const Params<T>& p, int64_t head, int i0,
                                                  int num_k_tiles, int tid) {
  constexpr int kBN = BwdSm90Traits::kBlockN;
  const int warp = tid / 32, lane = tid % 32;
  const int iw = i0 + 16 * warp;
  const float sl2 = p.scale * kLog2e;
  float L2[2], D[2];  // L·log2e and D of own rows g, g + 8
  row_scalars(p, head, iw, lane, L2, D);
  // causal: tiles whose keys all follow the last own query add nothing
  int first = 0, end = p.causal ? max(1, min(num_k_tiles, cdiv(i0 + 64, kBN))) : num_k_tiles;
  if constexpr (kOpts) {  // the tiles with keys some own row sees (at least one)
    end = max(1, min(num_k_tiles, cdiv(p.key_hi(min(i0 + 63, p.N - 1)), kBN) - sw.k0));
    first = min(end - 1, max(0, p.key_lo(i0) / kBN - sw.k0));
  }
  float dQ[kD / 8][4];
  zero(dQ);
  float s[kBN / 8][4], dp[kBN / 8][4];
  uint32_t dsa[kBN / 16][4];
  pipelined_tiles(
      sw, 0, first, end, num_k_tiles, [&](int kb) { issue_dq_scores<T, kD, kBN>(s, dp, sw.own, sw.tiles(kb)); },
      [&](int kb) { issue_dq_outputs<T, kD, kBN>(dQ, dsa, sw.tiles(kb)); },
      [&] {
        wgmma_fence_regs(s);
        wgmma_fence_regs(dp);
      },
      [&] { wgmma_fence_regs(dQ); },
      [&](int kb) { dq_coef<kBN, kOpts>(s, dp, p, (sw.k0 + kb) * kBN, i0, iw, L2, D, sl2, lane); },
      [&](int) { tile_to_a_frags<T, kBN>(dsa, dp); }, [](int) {});

  const float scale[2] = {p.scale, p.scale};
  store_acc<T, kD>(p.dQ + (head + iw) * kD, kD, dQ, scale, iw, p.N, lane);
}

// ---- the fused backward (d = 64): dK, dV and dQ in one key sweep, 5
// products per tile instead of the 4 + 3 of the two sweeps (the dQ sweep recomputes S and dP).
// The dQ of a query tile is a sum over every key block, so the blocks add their parts into an f32
// buffer by atomic additions: deterministic (the default), in turns, in a fixed order
// (order_additions, sweeps.cuh; a warp of the producer waits for each turn), so that dQ
// is bitwise reproducible; with set_attention_deterministic(false) in any order, with no waiting.
// dK and dV are summed as the two-sweep backward sums them.
//
// Per query tile t of 64 queries, one consumer of the block (the owner, t's parity) computes the
// block's part of dQ as dQᵀ (64 x 64) = Kᵀ (64 x 128 keys) · dSᵀ (128 keys x 64 queries), both
// MN-major in shared memory: both consumers store their dSᵀ rows (64 keys each) in the owner's
// dSᵀ tile, the owner issues the product as a late group (pipelined_tiles) and adds the result to
// the buffer (16-byte atomic additions, 16 KB per tile and block: half of what each consumer
// adding its own 64 keys sends, no faster with the L2 busier: docs/kernels.md §7). Named
// barriers (1, 2: ping-pong; 7 + w: the own rows' copy; 9 + w, 11 + w: ordered additions):
//   3 + o  the dSᵀ tile of owner o is complete (owner syncs, the other arrives; 256 threads)
//   5 + o  owner o's product of tile t - 2 is done, its dSᵀ tile may be rewritten (the reverse)
// The f32 buffer holds each tile's 64 x 64 values in the accumulator's register order
// (acc_index in sweeps.cuh), so that a warp's additions cover 512 contiguous bytes;
// rows_from_acc_kernel reorders and scales them.
// Shared memory after the key sweep's: the block's K and V rows (128 x 64 each; K is also the A
// operand Kᵀ of the dQ products, read MN-major) and the two owners' dSᵀ tiles.
struct FusedBwdSmem : SmemAfterSweep<FusedBwdSmem> {
  static constexpr size_t kOwnElems = kSweepBlock * 64;  // K, V (bf16/f16)
  static constexpr size_t kDsElems = kSweepBlock * 64;   // one owner's dSᵀ tile
  static constexpr size_t kBytes = (2 * kOwnElems + 2 * kDsElems) * 2;
};
// The block's parts of dQ for consumer w (extra: the shared memory of FusedBwdSmem; dq_acc: the
// f32 buffer, cdiv(N, 64) tiles per head): dkdv_rows_pipelined calls frags(t) with the consumer's
// dSᵀ A fragments of tile t, issues late(t) after its output products, and calls done(t) once
// they are complete.
// kOpts: step qt of the sweep adds to tile band.tile(qt) of query head band.query_head(qt).
template <typename T, bool kOrdered, bool kOpts = false>
struct FusedDqPart {
  T *sK, *ds;  // [128 keys x 64], swizzled (V follows); [owner][128 keys x 64 queries], swizzled
  float *dq_acc, *dq_head;
  int w, warp, lane, q_begin, num_q_tiles, tiles;
  KeyBand band;
  float dQt[8][4];
  __device__ FusedDqPart(unsigned char* extra, float* dq_acc_, const Params<T>& p, int64_t head, int q_begin_,
                         int num_q_tiles_, int tid, const KeyBand& band_ = {})
      : sK(reinterpret_cast<T*>(extra)),
        ds(sK + 2 * FusedBwdSmem::kOwnElems),
        dq_acc(dq_acc_),
        dq_head(dq_acc_ + (head / p.N) * static_cast<int64_t>(cdiv(p.N, 64)) * 4096),
        w(warpgroup_index() - 1),
        warp(tid / 32),
        lane(tid % 32),
        q_begin(q_begin_),
        num_q_tiles(num_q_tiles_),
        tiles(cdiv(p.N, 64)),
        band(band_) {
    zero(dQt);
  }
  __device__ int owner(int qt) const { return (qt - q_begin) & 1; }
  // This consumer's dSᵀ rows into the owner's tile, once the owner's product of qt - 2 is done.
  __device__ void frags(int qt, const uint32_t (&dsa)[4][4]) {
    const int o = owner(qt), g = lane / 4, c = 2 * (lane % 4);
    if (o != w && qt - q_begin >= 2) named_bar_sync(5 + o, 256);
    T* dst = ds + o * FusedBwdSmem::kDsElems;
#pragma unroll
    for (int q = 0; q < 4; ++q)
#pragma unroll
      for (int r = 0; r < 4; ++r) {
        const int row = 64 * w + 16 * warp + g + 8 * (r & 1), col = 16 * q + c + 8 * (r >> 1);
        *reinterpret_cast<uint32_t*>(dst + swz_offset<128>(row, col)) = dsa[q][r];
      }
    fence_proxy_async();
    if (o == w)
      named_bar_sync(3 + o, 256);  // and the other consumer's
    else
      named_bar_arrive(3 + o, 256);
  }
  // The owner's dQᵀ = Kᵀ · dSᵀ over the block's 128 keys; the other consumer commits an empty group.
  __device__ void late(int qt) {
    if (owner(qt) == w) {
      const uint64_t dk = make_desc_sw128(sK), dd = make_desc_sw128(ds + w * FusedBwdSmem::kDsElems);
      wgmma_fence();
#pragma unroll
      for (int q = 0; q < 8; ++q) wgmma_ss_mn<T, 64>(dQt, dk + mn_major_step(q, 0, 128), dd + mn_major_step(q, 0, 128), true);
    }
    wgmma_commit();
  }
  __device__ void fence() { wgmma_fence_regs(dQt); }
  // The owner adds its part to the buffer and lets the other consumer rewrite the dSᵀ tile.
  __device__ void done(int qt) {
    if (owner(qt) != w) return;
    float* dst = kOpts ? dq_acc + (band.query_head(qt) * tiles + band.tile(qt)) * 4096
                       : dq_head + static_cast<int64_t>(qt) * 4096;
    ordered_add_begin(kOrdered, w);  // kOrdered: the additions take turns (order_additions)
    add_acc_tile<64>(dst, dQt, warp, lane);
    ordered_add_end(kOrdered, w);
    zero(dQt);
    if (qt + 2 < num_q_tiles) named_bar_arrive(5 + w, 256);
  }
};

// The dK dV sweep (d = 128): HopperKeySweepWs with Q and dO only (no Qt), the consumers' own K and
// V rows after it (KeyOwnSmem128: their fragments would not fit beside the accumulators).
struct KeyOwnSmem128 : SmemAfterSweep<KeyOwnSmem128> {
  static constexpr size_t kBytes = 2 * 2 * 64 * 128 * 2;  // [consumer][K, V][64 x 128] (bf16/f16)
};
template <typename T>
using DkdvSweep128 = HopperKeySweepWs<T, 128, BwdSm90Traits::kBlockN, BwdSm90Traits::kStages, /*kTileN=*/2>;
// The dQ sweep (d = 128): HopperQuerySweepWs with own Q, dO and K, V tiles only.
template <typename T>
using DqSweep128 = HopperQuerySweepWs<T, 128, BwdSm90Traits::kBlockN, BwdSm90Traits::kStages, /*kOwnN=*/2,
                                    /*kTileN=*/2>;

// dK dV (d = 128): blocks of 128 keys. The row loop is not pipelined (dkdv_rows): a second set of
// score tiles beside the 64 x 128 accumulators dK, dV would not fit in the consumers' 240
// registers (ptxas serialises the wgmma), so the consumers' turns (ping-pong) are what overlaps
// one's tensor-core products with the other's elementwise work.
// kOpts (every sm_90a kernel of the backward and the BoB): grouped heads, Nq != Nk and windows
// (the sweeps' general mask and bands; key sweeps over key/value heads, split in their last wave
// only where every band is alike: key_units_differ).
template <typename T, bool kOpts>
__global__ void __launch_bounds__(BwdSm90Traits::kThreads, 1)
    attention_bwd_dkdv_ws_kernel(const Params<T> p, const __grid_constant__ SweepMaps maps,
                                 const __grid_constant__ TailSplit split) {
#if defined(GG_WGMMA_AVAILABLE)
  using Cfg = BwdSm90Traits;
  constexpr int kD = 128;
  extern __shared__ __align__(1024) unsigned char smem_raw[];
  T* const own_smem = reinterpret_cast<T*>(smem_raw + KeyOwnSmem128::offset<DkdvSweep128<T>>());
  KeyBand band{};
  const SweepUnit unit = key_sweep_unit<kOpts, Cfg::kBlockN>(p, split, band);
  key_sweep_ws_block<T, kD, Cfg::kBlockN, Cfg::kStages, Cfg::kProducerRegs, Cfg::kConsumerRegs,
                     /*kOwnInSmem=*/2, /*kTileN=*/2, kOpts>(
      smem_raw, p, maps, unit, band, [](const Params<T>&) { return bwd_present(); },
      [&](auto& sw, const auto& own, int64_t head, int j0, int q_begin, int n, int tid) {
        dkdv_rows<T, kD, kOpts>(sw, own, p, head, j0, q_begin, n, tid, split);
      },
      own_smem);
#else
  __trap();  // launched only where sm_90a code was built and the device is 9.x
#endif
}

// dQ (d = 128): blocks of 128 queries, own rows copied once by the producer.
template <typename T, bool kOpts>
__global__ void __launch_bounds__(BwdSm90Traits::kThreads, 1)
    attention_bwd_dq_ws_kernel(const Params<T> p, const __grid_constant__ SweepMaps maps) {
#if defined(GG_WGMMA_AVAILABLE)
  using Cfg = BwdSm90Traits;
  extern __shared__ __align__(1024) unsigned char smem_raw[];
  query_sweep_ws_block<T, 128, Cfg::kBlockN, Cfg::kStages, Cfg::kProducerRegs, Cfg::kConsumerRegs,
                       /*kOwnN=*/2, /*kTileN=*/2, kOpts>(
      smem_raw, p, maps, [](const Params<T>&) { return bwd_present(); },
      [&](auto& sw, int64_t head, int i0, int n, int tid) { dq_rows_pipelined<T, 128, kOpts>(sw, p, head, i0, n, tid); });
#else
  __trap();  // launched only where sm_90a code was built and the device is 9.x
#endif
}

// The fused backward (d = 64): blocks of 128 keys, a producer and two consumer warpgroups, the
// shared memory of FusedBwdSmem after the key sweep's; kOrdered: deterministic (p.add_order set).
template <typename T, bool kOrdered, bool kOpts>
__global__ void __launch_bounds__(BwdSm90Traits::kThreads, 1)
    attention_bwd_fused_ws_kernel(const Params<T> p, const __grid_constant__ SweepMaps maps, float* dq_acc,
                                  const __grid_constant__ TailSplit split) {
#if defined(GG_WGMMA_AVAILABLE)
  using Cfg = BwdSm90Traits;
  using Sweep = HopperKeySweepWs<T, 64, Cfg::kBlockN, Cfg::kStages>;
  extern __shared__ __align__(1024) unsigned char smem_raw[];
  unsigned char* extra = smem_raw + FusedBwdSmem::offset<Sweep>();
  KeyBand band{};
  const SweepUnit unit = key_sweep_unit<kOpts, Cfg::kBlockN>(p, split, band);
  const int segment = kOpts && kOrdered ? add_segment(p, unit.blk) : 0;  // of the ordered additions
  float* const segment_acc = dq_acc + segment * p.add_floats;
  key_sweep_ws_block<T, 64, Cfg::kBlockN, Cfg::kStages, Cfg::kProducerRegs, Cfg::kConsumerRegs,
                     /*kOwnInSmem=*/2, /*kTileN=*/3, kOpts>(
      smem_raw, p, maps, unit, band, [](const Params<T>&) { return bwd_present(); },
      [&](auto& sw, const auto& own, int64_t head, int j0, int q_begin, int n, int tid) {
        dkdv_rows_pipelined<T, 64, kOpts>(
            sw, own, p, head, j0, q_begin, n, tid,
            FusedDqPart<T, kOrdered, kOpts>(extra, segment_acc, p, head, q_begin, n, tid, band), split);
      },
      reinterpret_cast<T*>(extra), [&](int warp, int lane) {
        // deterministic: the owners' additions of each tile of dQ in turn (owner: the step's parity)
        if constexpr (kOrdered) {
          if (warp != 2) return;
          const int tiles = cdiv(p.N, 64);
          if constexpr (kOpts)
            order_additions<false>(
                [&, counters = p.add_order + segment * p.add_counters](int t) {
                  return counters + band.query_head(t) * tiles + band.tile(t);
                },
                [&](int t) { return band_position<Cfg::kBlockN>(p, unit.blk, cdiv(p.Nk, kSweepBlock), band.tile(t)); },
                band.lo, band.hi, [&](int t) { return (t - band.lo) & 1; }, lane);
          else
            order_additions<false>(
                [counters = p.add_order + unit.bh * tiles](int t) { return counters + t; },
                [&](int t) { return ordered_add_position(unit.blk, cdiv(p.N, kSweepBlock), t, Cfg::kBlockN, p.causal); },
                unit.t_begin, unit.t_end, [&](int t) { return (t - unit.t_begin) & 1; }, lane);
        }
      });
#else
  __trap();  // launched only where sm_90a code was built and the device is 9.x
#endif
}
}  // namespace

namespace attn {

// d = 64: the fused sweep, then dQ from its f32 buffer.
template <typename T>
void launch_bwd_sm90_fused(const Params<T>& p) {
  using Cfg = BwdSm90Traits;
  constexpr int kBN = Cfg::kBlockN;
  const bool det = p.deterministic;
  using Sweep = HopperKeySweepWs<T, 64, kBN, Cfg::kStages>;
  const int tiles = cdiv(p.N, 64);  // of dQ, per query head
  // deterministic: dQ's additions in a fixed order (a counter per tile; general masks: in
  // segments, ordered_add_segments), the split's rows per piece
  Params<T> q = p;
  const int segments = plan_add_segments(q, det, static_cast<int64_t>(p.BH) * tiles * 4096, p.BH * tiles);
  Scratch acc(segments * q.add_floats * sizeof(float));
  CUDA_CHECK(cudaMemsetAsync(acc.as<float>(), 0, acc.bytes(), cuda_stream()));
  Scratch order(det ? segments * static_cast<size_t>(q.add_counters) * sizeof(int) : 0);
  if (det) {
    q.add_order = order.as<int>();
    CUDA_CHECK(cudaMemsetAsync(q.add_order, 0, order.bytes(), cuda_stream()));
  }
  const size_t smem = FusedBwdSmem::total<Sweep>();
  auto kernel = static_switch(
      [](auto kOrdered, auto kOpts) { return attention_bwd_fused_ws_kernel<T, kOrdered, kOpts>; }, det, p.opts);
  set_smem(kernel, smem);
  const TailSplitRun tail = TailSplitRun::for_key_sweep(p, kBN, /*ordered=*/det, 64);
  kernel<<<tail.split().blocks(), Cfg::kThreads, smem, cuda_stream()>>>(
      q, with_ping_pong(make_sweep_maps(p, 64, kBN, 0), Cfg::kPingPongFused), acc.as<float>(), tail.split());
  CUDA_CHECK_LAUNCH();
  tail.finish(p, p.dK, p.dV, p.scale);
  rows_from_acc_kernel<T, 64, /*kOutputs=*/1>
      <<<grid_x(p.BH, tiles), 256, 0, cuda_stream()>>>(acc.as<float>(), p.dQ, nullptr, p.N, p.scale, 1.f, segments,
                                                        q.add_floats);
  CUDA_CHECK_LAUNCH();
}

// d = 128: the dK dV sweep (its last wave split, each piece storing its own rows), then dQ.
template <typename T>
void launch_bwd_sm90_two_sweeps(const Params<T>& p) {
  using Cfg = BwdSm90Traits;
  const SweepMaps maps = make_sweep_maps(p, 128, Cfg::kBlockN, Cfg::kBlockN);  // dK dV: query tiles; dQ: key tiles
  {
    constexpr size_t smem = KeyOwnSmem128::total<DkdvSweep128<T>>();
    auto kernel = static_switch([](auto kOpts) { return attention_bwd_dkdv_ws_kernel<T, kOpts>; }, p.opts);
    set_smem(kernel, smem);
    const TailSplitRun tail = TailSplitRun::for_key_sweep(p, Cfg::kBlockN, /*ordered=*/true, 128);
    kernel<<<tail.split().blocks(), Cfg::kThreads, smem, cuda_stream()>>>(
        p, with_ping_pong(maps, Cfg::kPingPongDkdv), tail.split());
    CUDA_CHECK_LAUNCH();
    tail.finish(p, p.dK, p.dV, p.scale);
  }
  {
    constexpr size_t smem = DqSweep128<T>::kSmem;
    auto kernel = static_switch([](auto kOpts) { return attention_bwd_dq_ws_kernel<T, kOpts>; }, p.opts);
    set_smem(kernel, smem);
    kernel<<<grid_x(p.BH, cdiv(p.N, Cfg::kBlockM)), Cfg::kThreads, smem, cuda_stream()>>>(
        p, with_ping_pong(maps, Cfg::kPingPongDq));
    CUDA_CHECK_LAUNCH();
  }
}

template <typename T, int kD>
void launch_bwd_sm90(const Params<T>& p) {
  if constexpr (kD == 64) launch_bwd_sm90_fused<T>(p);
  else launch_bwd_sm90_two_sweeps<T>(p);
}

template void launch_bwd_sm90<__nv_bfloat16, 64>(const Params<__nv_bfloat16>&);
template void launch_bwd_sm90<__nv_bfloat16, 128>(const Params<__nv_bfloat16>&);
template void launch_bwd_sm90<__half, 64>(const Params<__half>&);
template void launch_bwd_sm90<__half, 128>(const Params<__half>&);
}  // namespace attn
}  // namespace gg::kernels::cuda
