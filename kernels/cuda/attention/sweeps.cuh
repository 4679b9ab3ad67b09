// Sweeps of the sm_90a backward and BoB kernels: how a warpgroup that owns 64 rows gets the other
// side's tiles, separated from what it computes with them (the row loops in bwd_sm90.cu and
// bwd_bwd_sm90.cu).
//
//   query sweep  own query rows Q, dO (, Qt); sweeps key tiles K (, V, Kt, Vt)    dQ, BoB passes 0, 1
//   key sweep    own key rows K (, V, Kt, Vt); sweeps query tiles Q, dO (, Qt) and
//                their row scalars L, D (, E, F)                                   dK dV, BoB pass 2
//
// Both are warp-specialised: blocks of two consumer warpgroups and one producer warpgroup whose
// threads copy the tiles by bulk tensor copies (TMA) into a ring of mbarrier-guarded stages; the
// consumers share every tile. A row loop sees:
//   begin_tile(t) / end_tile(t)  around the use of tile t (wait for it / release it)
//   tiles(t)                     descriptors (and row scalars) of tile t
//   own                          the own rows' descriptors (where they are in shared memory)
//   turn_begin() / turn_end()    around the issue of a group of tensor-core products (PingPong,
//   skip_turns(n)                tma.cuh; no-ops where the kernel runs without turns); a tile or
//                                sub-tile that a warpgroup skips still takes its turns
// Which optional tensors a sweep copies is a Present value chosen by the caller. Also here: the
// tail split (TailSplitRun), the ordered additions of the fused sweeps, and the block bodies
// (query_sweep_ws_block, key_sweep_ws_block) around a row loop.
#pragma once
#include "kernels/cuda/attention/mask.h"
#include "kernels/cuda/attention/plan.h"
#include "kernels/cuda/attention/testing.h"
#include "kernels/cuda/attention/common.cuh"
#include "kernels/cuda/attention/hopper.cuh"
#include "kernels/cuda/kernels.h"
#include "kernels/cuda/tma.cuh"

namespace gg::kernels::cuda::attn {

// Own rows per block of every warp-specialised sweep: two consumer warpgroups of 64 rows
// (SweepSm90Traits).
constexpr int kSweepBlock = SweepSm90Traits::kBlock;
static_assert(kSweepBlock == kKeyBlockRows, "the launch plans (plan.h) count key blocks of the sweeps' height");

// The optional tensors a sweep copies: V (query sweep: V tiles; key sweep: own V rows), Qt, Kt,
// Vt, and the row scalars E and F (key sweep).
struct Present {
  bool V, Qt, Kt, Vt, EF;
};

struct OwnTiles {
  uint64_t Q, dO, Qt;  // descriptors of the own query rows
};
struct KeyTiles {
  uint64_t K, V, Kt, Vt;  // descriptors of one key tile
};
struct OwnKeyTiles {
  uint64_t K, V, Kt, Vt;  // descriptors of the own key rows
};
struct QueryTiles {
  uint64_t Q, dO, Qt;  // descriptors of one query tile
  const float *L, *D, *E, *F;  // its row scalars in shared memory
};

// The own rows of one warp as register A operands (load_a_frags), for score products whose other
// side is few columns wide (wgmma_score_product_rs). Query rows: Q, dO, Qt (where present).
template <int kD>
struct OwnFrags {
  uint32_t Q[kD / 16][4], dO[kD / 16][4], Qt[kD / 16][4];
  template <typename T>
  __device__ void load(const Params<T>& p, int64_t hd, int iw, int lane) {
    load_a_frags<T, kD>(Q, p.Q + hd, iw, p.N, lane);
    load_a_frags<T, kD>(dO, p.dO + hd, iw, p.N, lane);
    if (p.Qt != nullptr) load_a_frags<T, kD>(Qt, p.Qt + hd, iw, p.N, lane);
  }
};
// Key rows: K, and V, Kt, Vt where present.
template <int kD>
struct OwnKeyFrags {
  uint32_t K[kD / 16][4], V[kD / 16][4], Kt[kD / 16][4], Vt[kD / 16][4];
  // nk: the keys of the head (rows at or past it are zero)
  template <typename T>
  __device__ void load(const Params<T>& p, const Present& c, int64_t hd, int jw, int nk, int lane) {
    load_a_frags<T, kD>(K, p.K + hd, jw, nk, lane);
    if (c.V) load_a_frags<T, kD>(V, p.V + hd, jw, nk, lane);
    if (c.Kt) load_a_frags<T, kD>(Kt, p.Kt + hd, jw, nk, lane);
    if (c.Vt) load_a_frags<T, kD>(Vt, p.Vt + hd, jw, nk, lane);
  }
};

// One score product of the own rows (a descriptor: from shared memory; fragments: registers).
template <typename T, int kD, int kN, bool kAcc, int kRowsB>
__device__ __forceinline__ void own_score(float (&s)[kN / 8][4], uint64_t own, uint64_t b) {
  wgmma_score_product<T, kD, kN, kAcc, kRowsB>(s, own, b);
}
template <typename T, int kD, int kN, bool kAcc, int kRowsB>
__device__ __forceinline__ void own_score(float (&s)[kN / 8][4], const uint32_t (&own)[kD / 16][4], uint64_t b) {
  wgmma_score_product_rs<T, kD, kN, kAcc, kRowsB>(s, own, b);
}

// L·log2e and D of this thread's own query rows (iw + g, iw + g + 8; head: (b, h) · N); 0 past N.
// kReadD = false: D is 0 (a pass that forms D itself, before p.D is written).
template <bool kReadD = true, typename T>
__device__ __forceinline__ void row_scalars(const Params<T>& p, int64_t head, int iw, int lane, float (&L2)[2],
                                            float (&D)[2]) {
#pragma unroll
  for (int h = 0; h < 2; ++h) {
    const int row = iw + frag_row(lane, 2 * h);
    L2[h] = row < p.N ? p.L[head + row] * kLog2e : 0.f;
    D[h] = kReadD && row < p.N ? p.D[head + row] : 0.f;
  }
}

// The entries of a transposed score tile Sᵀ (64 keys [j0, j0 + 64) x the kBN queries [i0, i0 + kBN)
// of the query tile t; this warp's keys from jw) of a key-side row loop: f(j, e, P, li) for each,
// P = exp(S - L) (0 where masked), li the query within the tile. kOpts: the general mask
// (MaskBand::queries_of of the thread's keys).
template <int kBN, bool kOpts = false, typename T, typename F>
__device__ __forceinline__ void for_key_tile_entries(const float (&st)[kBN / 8][4], const Params<T>& p,
                                                     const QueryTiles& t, int i0, int j0, int jw, float sl2, int lane,
                                                     F&& f) {
  const bool masked = kOpts ? i0 + kBN > p.N || i0 < p.query_lo(j0 + 63) || i0 + kBN > p.query_hi(j0)
                            : i0 + kBN > p.N || (p.causal && j0 + 64 - 1 > i0);
  with_mask(masked, [&](auto tag) {
    constexpr bool kMasked = decltype(tag)::value;
    MaskBand::Range seen_by[2] = {};  // kOpts, masked: the queries that see the thread's two keys
    if constexpr (kOpts && kMasked)
      for (int h = 0; h < 2; ++h) seen_by[h] = p.mask().queries_of(jw + frag_row(lane, 2 * h));
#pragma unroll
    for (int j = 0; j < kBN / 8; ++j)
#pragma unroll
      for (int e = 0; e < 4; ++e) {
        const int li = frag_col(lane, j, e);  // query within the tile
        const int key = jw + frag_row(lane, e);
        const bool visible = !kMasked || (kOpts ? seen_by[e / 2].holds(i0 + li)
                                                : i0 + li < p.N && (!p.causal || key <= i0 + li));
        const float P = visible ? fast_exp2(st[j][e] * sl2 - t.L[li] * kLog2e) : 0.f;
        f(j, e, P, li);
      }
  });
}

// The entries of a score tile S (this warp's query rows from iw, of the warpgroup's 64 from i0 x
// the kN keys [js, js + kN)) of a query-side row loop: f(n, e, P) for each, P = exp(S - L) (0
// where masked; L2: L·log2e of the thread's rows g, g + 8). kOpts: the general mask
// (MaskBand::keys_of of the thread's rows).
template <int kN, bool kOpts = false, typename T, typename F>
__device__ __forceinline__ void for_query_tile_entries(const float (&s)[kN / 8][4], const Params<T>& p, int js, int i0,
                                                       int iw, const float (&L2)[2], float sl2, int lane, F&& f) {
  const bool masked = kOpts ? js < p.key_lo(i0 + 63) || js + kN > p.key_hi(i0)
                            : js + kN > p.N || (p.causal && js + kN - 1 > i0);
  with_mask(masked, [&](auto tag) {
    constexpr bool kMasked = decltype(tag)::value;
    MaskBand::Range seen[2] = {};  // kOpts, masked: the keys the thread's two rows see
    if constexpr (kOpts && kMasked)
      for (int h = 0; h < 2; ++h) seen[h] = p.mask().keys_of(iw + frag_row(lane, 2 * h));
#pragma unroll
    for (int n = 0; n < kN / 8; ++n)
#pragma unroll
      for (int e = 0; e < 4; ++e) {
        const int key = js + frag_col(lane, n, e), row = iw + frag_row(lane, e);
        const bool visible = !kMasked || (kOpts ? seen[e / 2].holds(key) : key < p.N && (!p.causal || key <= row));
        const float P = visible ? fast_exp2(s[n][e] * sl2 - L2[e / 2]) : 0.f;
        f(n, e, P);
      }
  });
}

// Bump allocation of swizzled tiles in dynamic shared memory (every size a multiple of 1024 bytes).
struct Carve {
  unsigned char* at;
  template <typename U>
  __device__ U* take(size_t n) {
    U* p = reinterpret_cast<U*>(at);
    at += n * sizeof(U);
    return p;
  }
};

// ------------------------------------------------------------------------ query sweeps

// The tensor maps of the warp-specialised sweeps (make_sweep_maps below).
struct SweepMaps {
  CUtensorMap Q, dO, Qt, K, V, Kt, Vt;
  int ping_pong;  // the consumers take turns (PingPong; set per kernel by with_ping_pong)
};
// maps for a launch of a kernel whose consumers take turns (on) or not (the traits say which).
inline SweepMaps with_ping_pong(SweepMaps maps, bool on) {
  maps.ping_pong = on;
  return maps;
}

// Warp-specialised query sweep: a block of 128 query rows [i0, i0 + 128) and three warpgroups.
// Warpgroup 0 is the producer: one thread copies the own rows once and the key tiles into a ring
// of kStages stages, refilling a stage once both consumers have released it ("empty" barrier,
// 256 arrivals); warpgroups 1 and 2 each own 64 of the rows. Both consumers read the same key
// tiles (half the loads per product of two 64-row blocks), and no consumer instruction is a load
// or a block barrier. Shared memory holds kOwnN own tensors (2: Q, dO; 3: and Qt) and kTileN
// tensors per stage (2: K, V; 4: and Kt, Vt): a Present with more traps.
template <typename T, int kD, int kBN, int kStages, int kOwnN = 3, int kTileN = 4>
struct HopperQuerySweepWs : PingPong {
  static_assert((kOwnN == 2 || kOwnN == 3) && (kTileN == 2 || kTileN == 4), "carved tensors");
  static constexpr int kOwnElems = 64 * kD, kTileElems = kBN * kD;
  // Q, dO (, Qt) of both consumers; K, V (, Kt, Vt) x kStages; 1 + 2·kStages barriers
  static constexpr size_t kSmem =
      (2 * kOwnN * kOwnElems + kTileN * kStages * kTileElems) * sizeof(T) + 8 * (1 + 2 * kStages);
  static_assert(kSmem <= 227 * 1024, "shared memory");
  const Present c;
  OwnTiles own;
  int k0 = 0;  // the key tile that the sweep's tile 0 is (the band of a general mask)
  T *sQ, *sdO, *sQt, *sK, *sV, *sKt, *sVt;  // an uncarved tensor's pointer aliases sQ or sK
  uint64_t *own_bar, *full, *empty;

  __device__ HopperQuerySweepWs(unsigned char* smem, const Present& c_) : c(c_) {
    if ((c.Qt && kOwnN < 3) || ((c.Kt || c.Vt) && kTileN < 4)) __trap();
    Carve cv{smem};
    sQ = cv.take<T>(2 * kOwnElems);  // [2 consumers][64 x kD] each of sQ, sdO, sQt
    sdO = cv.take<T>(2 * kOwnElems);
    sQt = kOwnN == 3 ? cv.take<T>(2 * kOwnElems) : sQ;
    sK = cv.take<T>(kStages * kTileElems);  // [kStages][kBN x kD] each of sK, sV, sKt, sVt
    sV = cv.take<T>(kStages * kTileElems);
    sKt = kTileN == 4 ? cv.take<T>(kStages * kTileElems) : sK;
    sVt = kTileN == 4 ? cv.take<T>(kStages * kTileElems) : sK;
    own_bar = cv.take<uint64_t>(1);
    full = cv.take<uint64_t>(kStages);
    empty = cv.take<uint64_t>(kStages);
  }
  // By one thread, followed by a block barrier.
  __device__ void init_barriers() {
    mbar_init(own_bar, 1);
    for (int s = 0; s < kStages; ++s) {
      mbar_init(&full[s], 1);
      mbar_init(&empty[s], 256);
    }
    mbar_fence_init();
  }
  // The producer thread: own rows of both consumers (query head bh), then key tiles
  // [first, first + num_k_tiles) of key/value head kvh.
  __device__ void produce(const SweepMaps& m, int i0, int bh, int kvh, int first, int num_k_tiles) {
    mbar_expect_tx(own_bar, (c.Qt ? 3 : 2) * 2 * kOwnElems * sizeof(T));
    for (int w = 0; w < 2; ++w)
      for (int h = 0; h < kD / 64; ++h) {
        const int off = w * kOwnElems + h * 64 * 64;
        tma_load_3d(sQ + off, &m.Q, own_bar, 64 * h, i0 + 64 * w, bh);
        tma_load_3d(sdO + off, &m.dO, own_bar, 64 * h, i0 + 64 * w, bh);
        if (c.Qt) tma_load_3d(sQt + off, &m.Qt, own_bar, 64 * h, i0 + 64 * w, bh);
      }
    const uint32_t tile_bytes = (1 + int(c.V) + int(c.Kt) + int(c.Vt)) * kTileElems * sizeof(T);
    for (int kb = 0; kb < num_k_tiles; ++kb) {
      const int s = kb % kStages;
      if (kb >= kStages) mbar_wait(&empty[s], ((kb / kStages) - 1) & 1);  // its previous tile released
      mbar_expect_tx(&full[s], tile_bytes);
      for (int h = 0; h < kD / 64; ++h) {
        const int off = s * kTileElems + h * kBN * 64;
        tma_load_3d(sK + off, &m.K, &full[s], 64 * h, (first + kb) * kBN, kvh);
        if (c.V) tma_load_3d(sV + off, &m.V, &full[s], 64 * h, (first + kb) * kBN, kvh);
        if (c.Kt) tma_load_3d(sKt + off, &m.Kt, &full[s], 64 * h, (first + kb) * kBN, kvh);
        if (c.Vt) tma_load_3d(sVt + off, &m.Vt, &full[s], 64 * h, (first + kb) * kBN, kvh);
      }
    }
  }
  // Consumer w (0 or 1): its own rows' descriptors, once they have landed.
  __device__ void consume_as(int w) {
    own = {make_desc_sw128(sQ + w * kOwnElems), make_desc_sw128(sdO + w * kOwnElems),
           make_desc_sw128(sQt + w * kOwnElems)};
    mbar_wait(own_bar, 0);
  }
  __device__ void begin_tile(int kb) { mbar_wait(&full[kb % kStages], (kb / kStages) & 1); }
  __device__ void end_tile(int kb) { mbar_arrive(&empty[kb % kStages]); }
  __device__ KeyTiles tiles(int kb) const {
    const int off = (kb % kStages) * kTileElems;
    return {make_desc_sw128(sK + off), make_desc_sw128(sV + off), make_desc_sw128(sKt + off),
            make_desc_sw128(sVt + off)};
  }
};

// Boxes of query_rows rows for Q, dO, Qt ((BH, N, d)) and key_rows rows for K, V, Kt, Vt ((BHkv,
// Nk, d)) (0: that group unused, not encoded); absent tensors map Q's or K's memory (never read).
template <typename T>
SweepMaps make_sweep_maps(const Params<T>& p, int d, int query_rows, int key_rows) {
  SweepMaps m{};
  auto map = [&](const T* x, int rows) { return make_tensor_map(x != nullptr ? x : p.Q, p.BH, p.N, d, rows); };
  auto kmap = [&](const T* x, int rows) { return make_tensor_map(x != nullptr ? x : p.K, p.BHkv(), p.Nk, d, rows); };
  if (query_rows > 0) {
    m.Q = map(p.Q, query_rows);
    m.dO = map(p.dO, query_rows);
    m.Qt = map(p.Qt, query_rows);
  }
  if (key_rows > 0) {
    m.K = kmap(p.K, key_rows);
    m.V = kmap(p.V, key_rows);
    m.Kt = kmap(p.Kt, key_rows);
    m.Vt = kmap(p.Vt, key_rows);
  }
  return m;
}

// ------------------------------------------------------------------------ key sweeps

// ---- the band of a key block under a general mask (the kOpts key sweeps): the query tiles of kBN
// rows [q_begin, q_begin + nb) that see some key of [j0, j0 + 128), swept for each query head of
// the group (steps = group·nb). A block whose keys no query sees sweeps one tile, all of it
// masked, so that every block has a step and the bands [q_begin, q_begin + nb) of a head's blocks
// grow with the block at both ends (band_add_position relies on it). The block sweeps the steps
// [lo, hi): all of them, or a piece's run (key_unit). Two orders:
//   head-major (masks without a right bound): step s is tile s - m·nb of group member
//     m = (s - q_begin) / nb; key blocks launch from the last, whose band is the longest.
//   longest first (a right bound: causal, window_right): key blocks launch from block 0, whose
//     band is the longest, and each sweeps its band tile-major from the last tile down: step s
//     is member g0 + r % gp of tile q_begin + nb - 1 - r / gp, r = s - lo, for the gp members
//     from g0 of its piece. Every block then reaches a tile of the sequence's end at the same
//     step, so the fused sweeps' ordered additions (block 0 first) do not wait on a block that
//     is further behind; launched the other way round, the longest blocks ran last, alone
//     (docs/kernels.md §1).
// The divisions are multiply-highs (DivBy).
struct KeyBand {
  int q_begin, nb, steps;
  int64_t qh0;  // the group's first query head
  int lo, hi;
  bool longest_first;
  // step s: r = s - base, q = r / by.d, rem = r - q·by.d; head-major (by.d = nb, base = q_begin):
  // member q, tile q_begin + rem; longest first (by.d = gp, base = lo): member m0 + rem, tile
  // t0 - q (m0 = g0, t0 = q_begin + nb - 1)
  int base, m0, t0;
  DivBy by;
  __device__ int member(int s) const {
    const int r = s - base, q = static_cast<int>(by.div(static_cast<uint32_t>(r)));
    return longest_first ? m0 + r - q * static_cast<int>(by.d) : q;
  }
  __device__ int tile(int s) const {
    const int r = s - base, q = static_cast<int>(by.div(static_cast<uint32_t>(r)));
    return longest_first ? t0 - q : q_begin + r - q * static_cast<int>(by.d);
  }
  __device__ int64_t query_head(int s) const { return qh0 + member(s); }
};
// The band of the key block from j0: its first query tile and tile count (nb); the same band as
// plan.h's key_block_band, which the host's plans use.
template <typename T>
__host__ __device__ __forceinline__ int2 key_band_tiles(const Params<T>& p, int j0, int kBN) {
  const int lo = p.query_lo(j0), hi = p.query_hi((j0 + kSweepBlock < p.Nk ? j0 + kSweepBlock : p.Nk) - 1);
  const int q_begin = lo / kBN;
  return make_int2(q_begin, hi > lo ? cdiv(hi, kBN) - q_begin : 1);
}
template <int kBN, typename T>
__device__ __forceinline__ KeyBand key_band(const Params<T>& p, int64_t bh_kv, int j0) {
  const int2 band = key_band_tiles(p, j0, kBN);
  const int q_begin = band.x, nb = band.y;
  return {q_begin, nb, p.group * nb, p.first_query_head(bh_kv), q_begin, q_begin + p.group * nb, false,
          q_begin, 0, q_begin, DivBy(static_cast<uint32_t>(nb))};
}

// Warp-specialised key sweep: blocks of 128 key rows [j0, j0 + 128); warpgroup 0 produces,
// warpgroups 1 and 2 own 64 keys each (their own rows: key_sweep_ws_block).
// In the producer, one thread copies the query tiles into a ring of kStages stages by bulk tensor
// copies, and one warp copies their row scalars (plain loads and stores: a row's scalars are 4
// bytes and need not be 16-byte aligned); a stage is full after the copy engine's bytes and the
// warp's 32 arrivals, empty after the consumers' 256 arrivals. A stage holds kTileN tensors (2: Q,
// dO; 3: and Qt): a Present with Qt where kTileN = 2 traps.
// The sweep's steps are numbered from q_begin. Plain (kOpts = false): step s is query tile s of
// the query head the key block belongs to. kOpts (grouped heads, Nq != Nk, windows): step s is
// tile band.tile(s) of query head band.query_head(s) (KeyBand).
template <typename T, int kD, int kBN, int kStages, int kTileN = 3, bool kOpts = false>
struct HopperKeySweepWs : PingPong {
  static_assert(kBN % 32 == 0, "whole rounds of the scalar warp");
  static_assert(kTileN == 2 || kTileN == 3, "carved tensors");
  static constexpr int kTileElems = kBN * kD;
  // Q, dO (, Qt) x kStages; L, D, E, F x kStages; 2·kStages barriers
  static constexpr size_t kSmem =
      kTileN * kStages * kTileElems * sizeof(T) + 4 * kStages * kBN * sizeof(float) + 16 * kStages;
  static_assert(kSmem <= 227 * 1024, "shared memory");
  const Present c;
  const int q_begin;
  KeyBand band{};  // kOpts: the block's band
  T *sQ, *sdO, *sQt;  // sQt aliases sQ where not carved
  float* sS;  // [kStages][4][kBN]: L, D, E, F
  uint64_t *full, *empty;

  __device__ HopperKeySweepWs(unsigned char* smem, const Present& c_, int q_begin_) : c(c_), q_begin(q_begin_) {
    if (c.Qt && kTileN < 3) __trap();
    Carve cv{smem};
    sQ = cv.take<T>(kStages * kTileElems);
    sdO = cv.take<T>(kStages * kTileElems);
    sQt = kTileN == 3 ? cv.take<T>(kStages * kTileElems) : sQ;
    sS = cv.take<float>(4 * kStages * kBN);
    full = cv.take<uint64_t>(kStages);
    empty = cv.take<uint64_t>(kStages);
  }
  __device__ void init_barriers() {
    for (int s = 0; s < kStages; ++s) {
      mbar_init(&full[s], 1 + 32);
      mbar_init(&empty[s], 256);
    }
    mbar_fence_init();
  }
  __device__ int stage(int qt) const { return (qt - q_begin) % kStages; }
  __device__ uint32_t round(int qt) const { return (qt - q_begin) / kStages; }
  // The query tile of step qt, and the query head (index) it belongs to (bh: the plain case's).
  __device__ int tile(int qt) const { return kOpts ? band.tile(qt) : qt; }
  __device__ int64_t query_head(int qt, int64_t bh) const { return kOpts ? band.query_head(qt) : bh; }
  // Thread 0 of the producer: the steps [q_begin, num_q_tiles) (plain: query tiles of head bh).
  __device__ void produce_tiles(const SweepMaps& m, int bh, int num_q_tiles) {
    const uint32_t bytes = (2 + int(c.Qt)) * kTileElems * sizeof(T);
    for (int qt = q_begin; qt < num_q_tiles; ++qt) {
      const int s = stage(qt);
      if (round(qt) > 0) mbar_wait(&empty[s], (round(qt) - 1) & 1);
      mbar_expect_tx(&full[s], bytes);
      for (int h = 0; h < kD / 64; ++h) {
        const int off = s * kTileElems + h * kBN * 64;
        const int row = tile(qt) * kBN, qh = static_cast<int>(query_head(qt, bh));
        tma_load_3d(sQ + off, &m.Q, &full[s], 64 * h, row, qh);
        tma_load_3d(sdO + off, &m.dO, &full[s], 64 * h, row, qh);
        if (c.Qt) tma_load_3d(sQt + off, &m.Qt, &full[s], 64 * h, row, qh);
      }
    }
  }
  // One warp of the producer: the tiles' row scalars (0 past N); head: the plain case's first row.
  __device__ void produce_scalars(const Params<T>& p, int64_t head, int num_q_tiles, int lane) {
    for (int qt = q_begin; qt < num_q_tiles; ++qt) {
      const int s = stage(qt);
      if (round(qt) > 0) mbar_wait(&empty[s], (round(qt) - 1) & 1);
      float* d = sS + s * 4 * kBN;
      if constexpr (kOpts) head = query_head(qt, 0) * p.N;
      for (int r = lane; r < kBN; r += 32) {
        const int i = tile(qt) * kBN + r;
        const bool ok = i < p.N;
        d[r] = ok ? p.L[head + i] : 0.f;
        d[kBN + r] = ok ? p.D[head + i] : 0.f;
        if (c.EF) {
          d[2 * kBN + r] = ok ? p.E[head + i] : 0.f;
          d[3 * kBN + r] = ok ? p.F[head + i] : 0.f;
        }
      }
      mbar_arrive(&full[s]);  // release: the stores above are visible to threads that wait on it
    }
  }
  __device__ void begin_tile(int qt) { mbar_wait(&full[stage(qt)], round(qt) & 1); }
  __device__ void end_tile(int qt) { mbar_arrive(&empty[stage(qt)]); }
  __device__ QueryTiles tiles(int qt) const {
    const int s = stage(qt);
    const float* sc = sS + s * 4 * kBN;
    return {make_desc_sw128(sQ + s * kTileElems), make_desc_sw128(sdO + s * kTileElems),
            make_desc_sw128(sQt + s * kTileElems), sc, sc + kBN, sc + 2 * kBN, sc + 3 * kBN};
  }
};

// Shared memory that a fused kernel keeps beside its sweep's (own rows, exchanged tiles):
// Layout::kBytes bytes from the first 1024-byte boundary after the sweep's (the swizzled tiles need
// that alignment). A layout derives from it: struct FusedXSmem : SmemAfterSweep<FusedXSmem>.
template <typename Layout>
struct SmemAfterSweep {
  template <typename Sweep>
  __host__ __device__ static constexpr size_t offset() { return (Sweep::kSmem + 1023) / 1024 * 1024; }
  template <typename Sweep>
  __host__ __device__ static constexpr size_t total() { return offset<Sweep>() + Layout::kBytes; }
};

// ---- whether a consumer of a key sweep, owning keys [j0, j0 + 64), has work in the query tile of
// kBN queries from i0: some of its keys see a query of the tile. Not where the queries all precede
// j0 (causal), nor (kOpts) where the tile lies outside the keys' band. A tile without work only
// takes its turns.
template <int kBN, bool kOpts, typename T>
__device__ __forceinline__ bool keys_see_query_tile(const Params<T>& p, int i0, int j0) {
  return kOpts ? i0 + kBN > p.query_lo(j0) && i0 < p.query_hi(j0 + 63) : !(p.causal && i0 + kBN <= j0);
}

// ---- pipelined row loops of the warp-specialised backward kernels (bwd_sm90.cu: the fused
// backward and the d = 128 dQ sweep; their rings have three stages, so a consumer can hold tile t + 1 before
// releasing tile t): per tile, the score products of tile t + 1 are issued together with the
// output products of tile t, in one ping-pong turn, and the elementwise work of tile t + 1 runs
// while the output products are on the tensor cores. Tiles a warpgroup skips (causal) are still
// taken and released, with their turn.

// The tile loop of those two: tiles [lo, hi) of the sweep are taken and released in order; those
// in [first, end) (not empty) are computed, the others only take their turn. The callables:
// scores(t) / outputs(t) issue and commit tile t's score / output products; fence_scores() and
// fence_acc() fence the score and accumulator registers; coefficients(t) is tile t's elementwise
// work on its scores, to_frags(t) turns them into the A fragments of the output products, done(t)
// runs once tile t's output products are complete (and the tile released). With a late group
// (late(t) issues and commits one more group after outputs(t), reading no register A fragments and
// no part of the tile; fence_late() fences its accumulators), to_frags(t + 1) runs while it is on
// the tensor cores and done(t) once it is complete too.
struct NoLateGroup {
  __device__ void operator()(int) const {}
  __device__ void operator()() const {}
};
template <typename Sweep, typename Scores, typename Outputs, typename FenceScores, typename FenceAcc,
          typename Coefficients, typename ToFrags, typename Done, typename Late = NoLateGroup,
          typename FenceLate = NoLateGroup>
__device__ __forceinline__ void pipelined_tiles(Sweep& sw, int lo, int first, int end, int hi, Scores&& scores,
                                                Outputs&& outputs, FenceScores&& fence_scores, FenceAcc&& fence_acc,
                                                Coefficients&& coefficients, ToFrags&& to_frags, Done&& done,
                                                Late&& late = {}, FenceLate&& fence_late = {}) {
  constexpr bool kLate = !std::is_same_v<std::decay_t<Late>, NoLateGroup>;
  for (int t = lo; t < first; ++t) {
    sw.begin_tile(t);
    sw.skip_turns(1);
    sw.end_tile(t);
  }
  sw.begin_tile(first);
  sw.turn_begin();
  scores(first);
  sw.turn_end();
  wgmma_wait<0>();
  fence_scores();
  coefficients(first);
  to_frags(first);
  for (int t = first; t + 1 < end; ++t) {
    sw.begin_tile(t + 1);
    fence_acc();
    fence_late();
    sw.turn_begin();
    scores(t + 1);
    outputs(t);
    late(t);
    sw.turn_end();
    wgmma_wait<kLate ? 2 : 1>();  // the scores of t + 1 (groups complete in order)
    fence_scores();
    coefficients(t + 1);
    wgmma_wait<kLate ? 1 : 0>();
    fence_acc();
    sw.end_tile(t);
    to_frags(t + 1);
    if constexpr (kLate) {
      wgmma_wait<0>();
      fence_late();
    }
    done(t);
  }
  fence_acc();
  fence_late();
  sw.turn_begin();
  outputs(end - 1);
  late(end - 1);
  sw.turn_end();
  wgmma_wait<0>();
  fence_acc();
  fence_late();
  sw.end_tile(end - 1);
  done(end - 1);
  for (int t = end; t < hi; ++t) {
    sw.begin_tile(t);
    sw.skip_turns(1);
    sw.end_tile(t);
  }
}

// ---- outputs added across blocks (the fused backward and fused BoB): the blocks of a head
// add their parts of a tile of kRows rows x 64 columns of an output into an f32 buffer. A part is
// a wgmma accumulator holding the tile transposed (64 columns x kRows rows: d[j][e] is column
// 16·warp + lane/4 + 8·(e/2), row 8·j + 2·(lane%4) + e%2); the buffer keeps it in that register
// order, so that a warp's 16-byte additions cover 512 contiguous bytes, and rows_from_acc_kernel
// puts it back into rows.

// Position in a tile of the f32 buffer of the value d[j][e] of lane `lane` of warp `warp`.
__host__ __device__ constexpr int acc_index(int j, int warp, int lane, int e) {
  return ((j * 4 + warp) * 32 + lane) * 4 + e;
}
// Position in a buffer tile (kRows = 32) of the value at row q, column c: the inverse of acc_index.
__host__ __device__ constexpr int acc_index_of(int q, int c) {
  return acc_index(q / 8, c / 16, 4 * (c % 8) + (q % 8) / 2, q % 2 + 2 * ((c % 16) / 8));
}
// Compile-time check: acc_index_of(row, column) of every value d[j][e] of a 32-row part, with the
// row and column that rows_from_acc_kernel reads it back as, is that value's acc_index.
constexpr bool acc_index_of_inverts_acc_index() {
  for (int j = 0; j < 4; ++j)
    for (int warp = 0; warp < 4; ++warp)
      for (int lane = 0; lane < 32; ++lane)
        for (int e = 0; e < 4; ++e) {
          const int q = 8 * j + 2 * (lane % 4) + e % 2, c = 16 * warp + lane / 4 + 8 * (e / 2);
          if (acc_index_of(q, c) != acc_index(j, warp, lane, e)) return false;
        }
  return true;
}
static_assert(acc_index_of_inverts_acc_index(), "acc_index_of must invert acc_index");
// Adds this thread's values of the accumulator d to the buffer tile at dst.
template <int kRows>
__device__ __forceinline__ void add_acc_tile(float* dst, const float (&d)[kRows / 8][4], int warp, int lane) {
#pragma unroll
  for (int j = 0; j < kRows / 8; ++j)
    atomicAdd(reinterpret_cast<float4*>(dst + acc_index(j, warp, lane, 0)), make_float4(d[j][0], d[j][1], d[j][2], d[j][3]));
}

// A counter between blocks: one load with acquire semantics, one increment with release semantics
// (GPU scope).
__device__ __forceinline__ int load_acquire(const int* counter) {
  int v;
  asm volatile("ld.acquire.gpu.global.b32 %0, [%1];" : "=r"(v) : "l"(counter) : "memory");
  return v;
}
__device__ __forceinline__ void release_increment(int* counter) {
  asm volatile("red.release.gpu.global.add.s32 [%0], 1;" ::"l"(counter) : "memory");
}
// Spins (one thread) until *counter >= target, by acquire loads with a pause of kSleepNs between.
template <int kSleepNs>
__device__ __forceinline__ void spin_until_at_least(const int* counter, int target) {
  while (load_acquire(counter) < target) __nanosleep(kSleepNs);
}

// ---- ordered additions (the fused sweeps in deterministic mode, p.add_order set): the blocks that
// add parts to one buffer tile take turns, in the order their key units are launched within the
// head (rank = per_head - 1 - blk, sweep_unit; causal: counted from the first unit that reaches the
// tile), so that each tile's sum is formed in the same order in every run. A counter per (head,
// output, tile) holds how many parts are in. For each tile, one warp of the producer warpgroup
// waits until the counter reaches its block's position, lets the adding consumer c go (named
// barrier kOrderReady + c), waits for its additions (kOrderAdded + c) and counts them in by an
// increment with release semantics (as a split-K semaphore releases after a block barrier). The
// waiting happens in the producer, off the consumers' path: in steady state each block runs a
// tile or so behind the one before. kEarly (the fused BoB): between the consumer's additions to
// tile t and to tile t + 1 the warp only passes two barriers: it loads tile t + 1's counter before
// it waits for tile t's additions (the load's latency overlaps them) and lets the consumer go on to
// tile t + 1 before it releases tile t (whose fence waits for tile t's additions to complete).
// In the fused backward (one warp for two consumers taking alternate tiles) kEarly measured
// slower (docs/kernels.md §7, "early hand-over"). Blocks of lower index start first (the
// hardware scheduler starts them in index order), so a block never waits on one that has not
// started.
constexpr int kOrderReady = 9, kOrderAdded = 11;  // + consumer: named barriers of 160 threads

// The consumer side, around its additions to one tile (no-ops when unordered).
__device__ __forceinline__ void ordered_add_begin(bool ordered, int c) {
  if (ordered) named_bar_sync(kOrderReady + c, 160);
}
__device__ __forceinline__ void ordered_add_end(bool ordered, int c) {
  if (ordered) named_bar_arrive(kOrderAdded + c, 160);
}
// The producer side: a whole warp; the sweep's steps [lo, hi), each adding one part of kBN rows to
// a buffer tile; counter(t): that tile's counter, position(t): the block's place among the
// tile's adders (ordered_add_position, band_position); consumer(t) adds step t's part.
// The arrival at kOrderReady for step t + 1 comes after the wait at kOrderAdded for step t, so the
// consumer has passed step t's kOrderReady phase by then (a named barrier must not be arrived at
// twice in one phase).
// Each step's counter and position are formed once, while the previous step's additions run (the
// warp's round per step is the additions' critical path).
template <bool kEarly, typename Counter, typename Position, typename Consumer>
__device__ __forceinline__ void order_additions(Counter&& counter, Position&& position, int lo, int hi,
                                                Consumer&& consumer, int lane) {
  if (lo >= hi) return;
  if constexpr (!kEarly) {
    int* ctr = counter(lo);
    int pos = position(lo);
    for (int t = lo; t < hi; ++t) {
      const int c = consumer(t);
      if (lane == 0) spin_until_at_least<32>(ctr, pos);
      __syncwarp();
      named_bar_arrive(kOrderReady + c, 160);
      // step t + 1's counter and position, formed while step t's additions run
      const bool next = t + 1 < hi;
      int* const ctr_next = next ? counter(t + 1) : ctr;
      const int pos_next = next ? position(t + 1) : 0;
      named_bar_sync(kOrderAdded + c, 160);
      if (lane == 0) release_increment(ctr);
      __syncwarp();
      ctr = ctr_next;
      pos = pos_next;
    }
    return;
  }
  int* ctr = counter(lo);
  if (lane == 0) spin_until_at_least<32>(ctr, position(lo));
  __syncwarp();
  named_bar_arrive(kOrderReady + consumer(lo), 160);
  int seen = 0;  // lane 0: step t + 1's counter, loaded while step t's additions run
  for (int t = lo; t < hi; ++t) {
    const bool next = t + 1 < hi;
    int* const ctr_next = next ? counter(t + 1) : ctr;
    const int pos_next = next ? position(t + 1) : 0;
    if (lane == 0 && next) seen = load_acquire(ctr_next);
    named_bar_sync(kOrderAdded + consumer(t), 160);
    if (next) {
      if (lane == 0) {
        const int pos = pos_next;
        if (seen < pos) spin_until_at_least<32>(ctr_next, pos);
      }
      __syncwarp();
      named_bar_arrive(kOrderReady + consumer(t + 1), 160);
    }
    if (lane == 0) release_increment(ctr);
    __syncwarp();
    ctr = ctr_next;
  }
}

// The ordered additions' position of key block blk (of per_head) for query tile t of its band
// (attention/mask.h: band_add_position) among the adders of its segment (plan.h:
// ordered_add_segments): the adders of a tile are consecutive blocks, so each segment's are every
// S-th of them, in order.
template <int kBN, typename T>
__device__ __forceinline__ int band_position(const Params<T>& p, int blk, int per_head, int t) {
  return band_add_position(blk, per_head, t, kBN, p.right() >= 0, p.wl, p.Nk - p.N) >> p.add_segments_log2;
}
// Key block blk's segment of the ordered additions (0 where there is one).
template <typename T>
__device__ __forceinline__ int add_segment(const Params<T>& p, int blk) {
  return blk & ((1 << p.add_segments_log2) - 1);
}

// out_o = scale_o · the f32 buffer of output o < kOutputs (per head, the cdiv(N, kRows) tiles of
// output 0, then those of output 1), one block per (head, output, tile): the tile's values in
// register order are put back into rows in shared memory, then written row by row. With segments
// > 1 the buffer is the sum of that many, segment_floats apart, added in their order.
template <typename T, int kRows, int kOutputs>
__global__ void __launch_bounds__(256) rows_from_acc_kernel(const float* acc, T* out0, T* out1, int N, float scale0,
                                                            float scale1, int segments, int64_t segment_floats) {
  __shared__ float s[kRows][65];  // [row][column]
  const int tiles = cdiv(N, kRows), qt = static_cast<int>(blockIdx.x % tiles);
  const int64_t g = blockIdx.x / tiles, bh = g / kOutputs;
  const bool second = kOutputs == 2 && g % 2 == 1;
  T* const out = second ? out1 : out0;
  const float scale = second ? scale1 : scale0;
  const float4* a = reinterpret_cast<const float4*>(acc + static_cast<int64_t>(blockIdx.x) * kRows * 64);
  for (int f = threadIdx.x; f < kRows * 16; f += 256) {
    float4 v = a[f];
    for (int seg = 1; seg < segments; ++seg) {
      const float4 w = a[f + seg * (segment_floats / 4)];
      v.x += w.x, v.y += w.y, v.z += w.z, v.w += w.w;
    }
    const int j = f / 128, warp = (f / 32) % 4, lane = f % 32;
    const int q = 8 * j + 2 * (lane % 4), col = 16 * warp + lane / 4;  // d[j][e]: row q + e % 2, column col + 8·(e / 2)
    s[q][col] = v.x;
    s[q + 1][col] = v.y;
    s[q][col + 8] = v.z;
    s[q + 1][col + 8] = v.w;
  }
  __syncthreads();
  for (int f = threadIdx.x; f < kRows * 32; f += 256) {
    const int q = f / 32, col = 2 * (f % 32), i = qt * kRows + q;
    if (i >= N) continue;
    *reinterpret_cast<uint32_t*>(out + (bh * N + i) * 64 + col) = Elem<T>::pack(scale * s[q][col], scale * s[q][col + 1]);
  }
}

// ---- a kernel launched with programmatic dependent launch (cudaLaunchAttributeProgrammatic-
// StreamSerialization) may start before the kernel ahead of it in the stream has finished: once
// every block of that kernel has called griddep_launch_dependents. The fused BoB's sweep then waits
// per head on a counter of pass 0's finished blocks (signal_done / wait_done) instead of on the
// whole grid.
__device__ __forceinline__ void griddep_launch_dependents() {
  asm volatile("griddepcontrol.launch_dependents;" ::: "memory");
}
// At the end of a block: once all its threads are done, one release increment of *counter (the
// barrier orders the block's writes before thread 0's release).
__device__ __forceinline__ void signal_done(int* counter) {
  __syncthreads();
  if (threadIdx.x == 0) release_increment(counter);
}
// At the start of a block: all its threads wait until *counter reaches target (acquire).
__device__ __forceinline__ void wait_done(const int* counter, int target) {
  if (threadIdx.x == 0) spin_until_at_least<256>(counter, target);
  __syncthreads();
}

// ---- tail split of the warp-specialised key sweeps, whose blocks take one SM each (non-causal).
// U = BH·cdiv(N, 128) units of 128 keys on S SMs run as U / S full waves and a last one of
// r = U mod S units, during which S - r SMs idle (at N = 16384, H = 16: 2048 units on 132 SMs, a
// last wave of 68). With the split, each of those r units is swept by `pieces` blocks, each over
// its own run of consecutive query tiles; a piece stores its key rows' two outputs into its own
// slot of an f32 scratch (ordered), or adds them into one shared slot (the fused sweeps with
// unordered additions) (key_rows_out), and rows_from_scratch_kernel then writes them out.
// Blocks [0, whole) sweep the whole units [0, whole), as without the split.
struct TailSplit {
  int whole;        // blocks that sweep a whole unit (units [0, whole))
  int pieces;       // blocks per split unit (units whole, whole + 1, ...)
  int split_units;  // r (0: no split)
  int slots;        // 1: pieces add atomically into one slot; pieces: each stores its own (ordered)
  float* scratch;   // [split unit][slot][output][128 key rows][d] f32 (one slot: zeroed first)
  int blocks() const { return whole + split_units * pieces; }
};

// What a block of a sweep sweeps: row block blk (kBlock rows) of head bh, and the other side's
// tiles (kBN rows each) [t_begin, t_end).
struct SweepUnit {
  int64_t bh;
  int blk, t_begin, t_end;
};
// Without a split: block b sweeps unit b (reversed within a head, as block_coord); causal: a key
// sweep's first query tile (a query sweep ends its tiles itself).
template <int kBlock, int kBN>
__device__ __forceinline__ SweepUnit sweep_unit(int N, bool causal) {
  const BlockCoord bc = block_coord(cdiv(N, kBlock));
  return {bc.bh, bc.blk, causal ? bc.blk * kBlock / kBN : 0, cdiv(N, kBN)};
}
// The split unit (counted from ts.whole) and piece that block b >= 0 of a kOpts key sweep runs.
// A last-wave split (ts.whole > 0: every unit sweeps the same steps) goes piece by piece, so that
// the blocks running at once sweep the same steps of their units and share those query rows in
// L2; unit by unit, the pieces running at once would cover every query head of a grouped unit,
// multiplying the DRAM reads (docs/kernels.md §6). A group split (whole = 0, longest first) goes
// unit by unit.
struct SplitPiece {
  int unit, piece;
};
__device__ __forceinline__ SplitPiece split_piece(const TailSplit& ts, int b) {
  if (ts.whole > 0) return {b % ts.split_units, b / ts.split_units};
  return {b / ts.pieces, b % ts.pieces};
}

// The kOpts key sweeps' unit: key block unit.blk of key/value head unit.bh (cdiv(Nk, 128) blocks
// per head, launched in the band's order: KeyBand), and its band (key_band) with the run of steps
// [lo, hi) that this block sweeps: all of them, or, in a piece of a split unit, the piece's share
// (full masks, where every band is alike: a run of the head-major steps; longest first: whole
// members of the group, plan_group_split's pieces dividing it).
template <int kBN, typename T>
__device__ __forceinline__ KeyBand key_unit(const Params<T>& p, const TailSplit& ts, SweepUnit& unit) {
  const int per_head = cdiv(p.Nk, kSweepBlock);
  const int b = static_cast<int>(blockIdx.x) - ts.whole;
  int piece = 0, pieces = 1;
  if (b < 0) {
    const BlockCoord bc = block_coord(per_head);
    unit = {bc.bh, bc.blk, 0, 0};
  } else {
    const SplitPiece sp = split_piece(ts, b);
    const BlockCoord uc = unit_coord(int64_t{ts.whole} + sp.unit, per_head);
    unit = {uc.bh, uc.blk, 0, 0};
    piece = sp.piece;
    pieces = ts.pieces;
  }
  if (p.right() >= 0) unit.blk = per_head - 1 - unit.blk;  // longest first
  KeyBand band = key_band<kBN>(p, unit.bh, unit.blk * kSweepBlock);
  if (p.right() >= 0) {  // longest first: the piece's gp members from m0
    const int gp = p.group / pieces;
    band.longest_first = true;
    band.m0 = piece * gp;
    band.lo = band.q_begin + band.m0 * band.nb;
    band.hi = band.lo + gp * band.nb;
    band.base = band.lo;
    band.t0 = band.q_begin + band.nb - 1;
    band.by = DivBy(static_cast<uint32_t>(gp));
  } else {
    band.lo = band.q_begin + static_cast<int>(int64_t{piece} * band.steps / pieces);
    band.hi = band.q_begin + static_cast<int>(int64_t{piece + 1} * band.steps / pieces);
  }
  return band;
}
// With the split ts (never causal).
template <int kBlock, int kBN>
__device__ __forceinline__ SweepUnit sweep_unit(int N, bool causal, const TailSplit& ts) {
  const int per_head = cdiv(N, kBlock), tiles = cdiv(N, kBN);
  const int b = static_cast<int>(blockIdx.x) - ts.whole;
  if (b < 0) return sweep_unit<kBlock, kBN>(N, causal);
  const BlockCoord uc = unit_coord(int64_t{ts.whole} + b / ts.pieces, per_head);
  const int piece = b % ts.pieces;
  return {uc.bh, uc.blk, static_cast<int>(int64_t{piece} * tiles / ts.pieces),
          static_cast<int>(int64_t{piece + 1} * tiles / ts.pieces)};
}
// A key sweep's unit (blocks of 128 keys): sweep_unit, or (kOpts) key_unit with its band.
template <bool kOpts, int kBN, typename T>
__device__ __forceinline__ SweepUnit key_sweep_unit(const Params<T>& p, const TailSplit& ts, KeyBand& band) {
  if constexpr (kOpts) {
    SweepUnit unit{};
    band = key_unit<kBN>(p, ts, unit);
    return unit;
  } else {
    return sweep_unit<kSweepBlock, kBN>(p.N, p.causal, ts);
  }
}

// Adds (kAdd: float2 atomics, sm_90) or stores this warp's rows of a kCols-column accumulator
// (frag_row layout, rows from r0) to f32 rows of kCols.
template <int kCols, bool kAdd>
__device__ __forceinline__ void put_key_rows(float* rows, const float (&acc)[kCols / 8][4], int r0, int lane) {
#pragma unroll
  for (int h = 0; h < 2; ++h) {
    float* const o = rows + static_cast<int64_t>(r0 + frag_row(lane, 2 * h)) * kCols;
#pragma unroll
    for (int j = 0; j < kCols / 8; ++j) {
      float2* const at = reinterpret_cast<float2*>(o + frag_col(lane, j, 0));
      const float2 v = make_float2(acc[j][2 * h], acc[j][2 * h + 1]);
      if constexpr (kAdd)
        atomicAdd(at, v);
      else
        *at = v;
    }
  }
}

// A consumer's two key-row outputs (its warp's rows from jw): out_a = alpha1·a and out_b = b (the
// backward's dK and dV, the BoB's grad_K and grad_V; K-shaped) stored, or, in a piece of a split
// unit (blocks from ts.whole on), a and b unscaled into the unit's scratch rows (row jw % 128 of
// the unit: units start at multiples of 128 keys), added into its one slot or stored into the
// piece's own (ts.slots), for TailSplitRun::finish to write out.
// kN8: d / 8 (the accumulators' first extent, deduced). kOpts: a general mask's key count Nk.
template <bool kOpts, typename T, int kN8>
__device__ __forceinline__ void key_rows_out(const Params<T>& p, const TailSplit& ts, T* out_a, T* out_b,
                                             int64_t head, int jw, const float (&a)[kN8][4],
                                             const float (&b)[kN8][4], float alpha1, int lane) {
  constexpr int kD = 8 * kN8;
  const int piece = static_cast<int>(blockIdx.x) - ts.whole;
  if (piece >= 0) {
    int slot = ts.slots == 1 ? 0 : piece % ts.pieces, unit = piece / ts.pieces;
    if constexpr (kOpts) {
      const SplitPiece sp = split_piece(ts, piece);
      slot = ts.slots == 1 ? 0 : sp.piece;
      unit = sp.unit;
    }
    float* const s = ts.scratch + (static_cast<int64_t>(unit) * ts.slots + slot) * 2 * kSweepBlock * kD;
    if (ts.slots == 1) {
      put_key_rows<kD, true>(s, a, jw % kSweepBlock, lane);
      put_key_rows<kD, true>(s + kSweepBlock * kD, b, jw % kSweepBlock, lane);
    } else {
      put_key_rows<kD, false>(s, a, jw % kSweepBlock, lane);
      put_key_rows<kD, false>(s + kSweepBlock * kD, b, jw % kSweepBlock, lane);
    }
    return;
  }
  const float one[2] = {1.f, 1.f}, scale[2] = {alpha1, alpha1};
  const int nk = kOpts ? p.Nk : p.N;
  store_acc<T, kD>(out_a + (head + jw) * kD, kD, a, scale, jw, nk, lane);
  store_acc<T, kD>(out_b + (head + jw) * kD, kD, b, one, jw, nk, lane);
}

// The split units' outputs from the scratch (the sum of their slots, in order k = 0, 1, ...):
// kScratchRows rows of one output of one split unit per block (kScratchBlocks blocks per unit), 16
// threads per row, each with kD / 32 column pairs and every slot's loads issued together. (One
// block per (unit, output), each thread going round its rows one after another, waited for a
// memory round trip per slot and row: twice as long.) longest_first: the units' key blocks are
// numbered as the longest-first key sweeps launch them (KeyBand).
constexpr int kScratchRows = 16;
constexpr int kScratchBlocks = 2 * (kSweepBlock / kScratchRows);  // two outputs of kSweepBlock rows
template <typename T, int kD>
__global__ void __launch_bounds__(256) rows_from_scratch_kernel(const float* scratch, T* out1, T* out2, int N,
                                                                int whole, int slots, float scale1,
                                                                bool longest_first) {
  static_assert(kD % 32 == 0 && kScratchRows * 16 == 256, "16 threads per row, 256 per block");
  constexpr int kPairs = kD / 32;  // column pairs per thread: pair q·16 + t of its row
  constexpr int kPerOutput = kScratchBlocks / 2;
  const int su = blockIdx.x / kScratchBlocks, o = (blockIdx.x / kPerOutput) % 2, t = threadIdx.x % 16;
  const int r = (blockIdx.x % kPerOutput) * kScratchRows + threadIdx.x / 16;  // row in the unit
  const BlockCoord uc = unit_coord(int64_t{whole} + su, cdiv(N, kSweepBlock));
  const int row = (longest_first ? cdiv(N, kSweepBlock) - 1 - uc.blk : uc.blk) * kSweepBlock + r;
  if (row >= N) return;
  const float* s = scratch + (int64_t{su} * slots * 2 + o) * kSweepBlock * kD + r * kD;
  float2 v[kPairs];
#pragma unroll
  for (int q = 0; q < kPairs; ++q) v[q] = *reinterpret_cast<const float2*>(s + 2 * (q * 16 + t));
#pragma unroll 4
  for (int k = 1; k < slots; ++k) {
#pragma unroll
    for (int q = 0; q < kPairs; ++q) {
      const float2 w = *reinterpret_cast<const float2*>(s + int64_t{k} * 2 * kSweepBlock * kD + 2 * (q * 16 + t));
      v[q].x += w.x;
      v[q].y += w.y;
    }
  }
  T* const out = (o == 0 ? out1 : out2) + (uc.bh * N + row) * kD;
  const float scale = o == 0 ? scale1 : 1.f;
#pragma unroll
  for (int q = 0; q < kPairs; ++q)
    *reinterpret_cast<uint32_t*>(out + 2 * (q * 16 + t)) = Elem<T>::pack(scale * v[q].x, scale * v[q].y);
}

// The SM count a tail split is planned for: the device's, or the tests' (attention/testing.h,
// testing::ScopedTailSplitSms).
inline int tail_split_sms() {
  const int sms = testing::tail_split_sms_override();
  return sms < 0 ? sm_count() : sms;
}

// The segments of a fused sweep's ordered additions (plan.h: ordered_add_segments; planned for
// tail_split_sms()), set in q for buffers of `floats` floats and `counters` counters per segment:
// one in the any-order mode and for the plain kernels. Returns how many.
template <typename T>
int plan_add_segments(Params<T>& q, bool ordered, int64_t floats, int64_t counters) {
  const int segments = ordered && q.opts ? ordered_add_segments(q.N, q.Nk, q.group, q.wl >= 0, tail_split_sms()) : 1;
  q.add_floats = floats;
  q.add_counters = static_cast<int>(counters);
  q.add_segments_log2 = 0;
  while ((1 << q.add_segments_log2) < segments) ++q.add_segments_log2;
  return segments;
}

// Whether the key sweeps' units (blocks of 128 keys) differ in length: a causal mask or a window.
template <typename T>
bool key_units_differ(const Params<T>& p) {
  return p.causal || p.wl >= 0 || p.wr >= 0;
}

// Host side: the split of `units` units of `tiles` query tiles each (plan_tail_split, plan.h,
// for tail_split_sms()), its scratch for key rows of d (64 or 128) columns, and
// finish() after the sweep. ordered: each piece stores its own slot and finish() sums them in order
// (deterministic); else one zeroed slot that the pieces add into.
class TailSplitRun {
 public:
  TailSplitRun(int64_t units, int tiles, bool causal, bool ordered = false, int d = 64)
      : TailSplitRun(plan_tail_split(units, tiles, causal, tail_split_sms()), ordered, d) {}
  TailSplitRun(const TailSplitPlan& t, bool ordered, int d)
      : ts_{t.whole, t.pieces, t.split_units, ordered ? t.pieces : 1, nullptr},
        d_(d),
        scratch_(static_cast<size_t>(ts_.split_units) * ts_.slots * 2 * kSweepBlock * d * sizeof(float)) {
    if (ts_.split_units > 0) {
      ts_.scratch = scratch_.as<float>();
      if (ts_.slots == 1) CUDA_CHECK(cudaMemsetAsync(ts_.scratch, 0, scratch_.bytes(), cuda_stream()));
    }
  }
  // The split of a key sweep with query tiles of kBN rows (blocks of 128 keys of each key/value
  // head): of its last wave where every unit sweeps the same steps (those of every query head of
  // the group), else, for grouped heads, of every unit where they are few or the longest of them
  // long (plan_group_split).
  template <typename T>
  static TailSplitRun for_key_sweep(const Params<T>& p, int kBN, bool ordered, int d) {
    const int64_t units = p.BHkv() * cdiv(p.Nk, kSweepBlock);
    const int sms = tail_split_sms();
    if (!key_units_differ(p))
      return TailSplitRun(plan_tail_split(units, p.group * cdiv(p.N, kBN), false, sms), ordered, d);
    const double share = p.group > 1 ? longest_key_unit_share(p.N, p.Nk, p.causal, p.wl, p.wr, p.BHkv(), kBN, sms) : 0;
    return TailSplitRun(plan_group_split(units, p.group, sms, share), ordered, d);
  }
  const TailSplit& split() const { return ts_; }
  // The split units' out_a (scaled by scale1) and out_b from the scratch (key_rows_out).
  template <typename T>
  void finish(const Params<T>& p, T* out_a, T* out_b, float scale1) const {
    if (ts_.split_units == 0) return;
    auto kernel = d_ == 128 ? rows_from_scratch_kernel<T, 128> : rows_from_scratch_kernel<T, 64>;
    kernel<<<kScratchBlocks * ts_.split_units, 256, 0, cuda_stream()>>>(ts_.scratch, out_a, out_b, p.Nk, ts_.whole,
                                                                         ts_.slots, scale1, p.opts && p.right() >= 0);
    CUDA_CHECK_LAUNCH();
  }

 private:
  TailSplit ts_;
  int d_;
  Scratch scratch_;
};

// ------------------------------------------------------------------------ kernel bodies
//
// What every sm_90a backward and BoB kernel does around its row loop: block coordinates, the
// sweep, the barrier set-up, the producer's roles and the register hand-over (setmaxnreg). The row loop of one warpgroup is the callable rows;
// present_of(p) says what the sweep copies (evaluated where the sweep is made).

// Warp-specialised, blocks of 128 query rows (384 threads): in each consumer warpgroup,
// rows(sw, head, its first row, num_k_tiles, tid of 128). kOwnN, kTileN: HopperQuerySweepWs.
// kOpts (grouped heads, Nq != Nk, windows): the key tiles of the query head's key/value head that
// some row of the block sees, from tile sw.k0 (at least one: a block whose rows see no key sweeps
// one tile, all of it masked).
template <typename T, int kD, int kBN, int kStages, int kProducerRegs, int kConsumerRegs, int kOwnN = 3,
          int kTileN = 4, bool kOpts = false, typename PresentOf, typename Rows>
__device__ __forceinline__ void query_sweep_ws_block(unsigned char* smem, const Params<T>& p, const SweepMaps& maps,
                                                     PresentOf present_of, Rows&& rows) {
  HopperQuerySweepWs<T, kD, kBN, kStages, kOwnN, kTileN> sw(smem, present_of(p));
  const BlockCoord bc = block_coord(cdiv(p.N, kSweepBlock));
  const int i0 = bc.blk * kSweepBlock;
  int num_k_tiles = p.causal ? cdiv(min(p.N, i0 + kSweepBlock), kBN) : cdiv(p.N, kBN);
  int kvh = static_cast<int>(bc.bh);
  if constexpr (kOpts) {
    const TileRange band = key_tiles<kBN, true>(p, i0, i0 + kSweepBlock);
    sw.k0 = band.begin;
    num_k_tiles = band.end - band.begin;
    kvh = static_cast<int>(p.kv_head(bc.bh));
  }
  if (threadIdx.x == 0) sw.init_barriers();
  __syncthreads();
  const int wg = warpgroup_index();
  if (wg == 0) {
    setmaxnreg_dec<kProducerRegs>();
    if (threadIdx.x == 0) sw.produce(maps, i0, static_cast<int>(bc.bh), kvh, kOpts ? sw.k0 : 0, num_k_tiles);
  } else {
    setmaxnreg_inc<kConsumerRegs>();
    sw.consume_as(wg - 1);
    sw.ping_pong_open(wg - 1, maps.ping_pong != 0);
    rows(sw, bc.bh * p.N, i0 + 64 * (wg - 1), num_k_tiles, static_cast<int>(threadIdx.x % 128));
    sw.ping_pong_close();
  }
}

// Rows [j0, j0 + 64) of K, V (kN = 2) and Kt, Vt (kN = 4) into swizzled tiles of 64 rows (d = 128:
// two 64-column halves, 64·64 elements apart) at s + i·kStride (i = 0 .. kN - 1, in that order), by
// the 128 threads of one warpgroup (tid), made visible to wgmma for this warpgroup (barrier `bar`,
// 128 threads); rows at or past nk (the head's keys) are zero; Kt, Vt only where present.
template <typename T, int kD, int kN, int kStride>
__device__ __forceinline__ void load_own_key_rows(T* s, const Params<T>& p, int64_t hd, int j0, int nk, int tid,
                                                  int bar) {
  constexpr int kVecs = kD / 8;  // 16-byte vectors per row
  for (int v = tid; v < 64 * kVecs; v += 128) {
    const int r = v / kVecs, c = (v % kVecs) * 8;
    const bool ok = j0 + r < nk;
    const int64_t g = hd + static_cast<int64_t>(ok ? j0 + r : 0) * kD + c;
    const int o = swz_offset<64>(r, c);
    cp_async16(s + o, p.K + g, ok);
    cp_async16(s + kStride + o, p.V + g, ok);
    if constexpr (kN == 4) {  // an absent cotangent's tile is left as it is (never read)
      if (p.Kt != nullptr) cp_async16(s + 2 * kStride + o, p.Kt + g, ok);
      if (p.Vt != nullptr) cp_async16(s + 3 * kStride + o, p.Vt + g, ok);
    }
  }
  cp_async_commit();
  cp_async_wait<0>();
  fence_proxy_async();
  named_bar_sync(bar, 128);
}

// Warp-specialised, blocks of 128 key rows (384 threads) sweeping unit (sweep_unit: the key block
// and its query tiles), own rows in registers (OwnKeyFrags, kOwnInSmem = 0), or in shared memory
// at own_smem: OwnKeyTiles of K and V (kOwnInSmem = 2) or K, V, Kt and Vt (4), copied by each
// consumer w for its rows [64·w, 64·w + 64) (load_own_key_rows, barrier 7 + w). At d = 64 each
// tensor is a tile of 128 swizzled rows (the consumers' rows one after the other), in that order;
// at d = 128 consumer w's tensors are 64-row tiles from own_smem + w·kOwnInSmem·64·128. In each
// consumer warpgroup, rows(sw, own, head, its first key, q_begin, num_q_tiles, tid of 128).
// kTileN: HopperKeySweepWs.
// producer_extra(warp, lane) runs in the producer's warps 2 and 3 (idle otherwise).
struct NoProducerExtra {
  __device__ void operator()(int, int) const {}
};
// kOpts (grouped heads, Nq != Nk, windows): unit.bh is a key/value head and band its key block's
// band (key_unit); rows then gets the steps [band.lo, band.hi) of the sweep
// (HopperKeySweepWs::tile, query_head).
template <typename T, int kD, int kBN, int kStages, int kProducerRegs, int kConsumerRegs, int kOwnInSmem = 0,
          int kTileN = 3, bool kOpts = false, typename PresentOf, typename Rows, typename Extra = NoProducerExtra>
__device__ __forceinline__ void key_sweep_ws_block(unsigned char* smem, const Params<T>& p, const SweepMaps& maps,
                                                   const SweepUnit& unit, const KeyBand& band, PresentOf present_of,
                                                   Rows&& rows, T* own_smem = nullptr, Extra&& producer_extra = {}) {
  const int j0 = unit.blk * kSweepBlock;
  const int64_t head = unit.bh * (kOpts ? p.Nk : p.N);
  const int num_q_tiles = kOpts ? band.hi : unit.t_end, q_begin = kOpts ? band.lo : unit.t_begin;
  HopperKeySweepWs<T, kD, kBN, kStages, kTileN, kOpts> sw(smem, present_of(p), q_begin);
  if constexpr (kOpts) sw.band = band;
  if (threadIdx.x == 0) sw.init_barriers();
  __syncthreads();
  const int wg = warpgroup_index();
  if (wg == 0) {
    setmaxnreg_dec<kProducerRegs>();
    if (threadIdx.x == 0) sw.produce_tiles(maps, static_cast<int>(unit.bh), num_q_tiles);
    if (threadIdx.x / 32 == 1) sw.produce_scalars(p, head, num_q_tiles, threadIdx.x % 32);
    if (threadIdx.x / 32 >= 2) producer_extra(static_cast<int>(threadIdx.x) / 32, threadIdx.x % 32);
  } else {
    setmaxnreg_inc<kConsumerRegs>();
    const int tid = threadIdx.x % 128, jc = j0 + 64 * (wg - 1);
    sw.ping_pong_open(wg - 1, maps.ping_pong != 0);
    if constexpr (kOwnInSmem > 0) {
      static_assert((kD == 64 || kD == 128) && (kOwnInSmem == 2 || kOwnInSmem == 4), "own rows in shared memory");
      // tensor i at sK + i·kStride
      constexpr int kStride = kD == 64 ? 128 * 64 : 64 * kD;
      T* const sK = own_smem + (wg - 1) * (kD == 64 ? 64 * 64 : kOwnInSmem * 64 * kD);
      load_own_key_rows<T, kD, kOwnInSmem, kStride>(sK, p, head * kD, jc, kOpts ? p.Nk : p.N, tid, 7 + (wg - 1));
      const OwnKeyTiles own{make_desc_sw128(sK), make_desc_sw128(sK + kStride),
                            kOwnInSmem == 4 ? make_desc_sw128(sK + 2 * kStride) : 0,
                            kOwnInSmem == 4 ? make_desc_sw128(sK + 3 * kStride) : 0};
      rows(sw, own, head, jc, q_begin, num_q_tiles, tid);
    } else {
      OwnKeyFrags<kD> own;
      own.load(p, sw.c, head * kD, jc + 16 * (tid / 32), kOpts ? p.Nk : p.N, tid % 32);
      rows(sw, own, head, jc, q_begin, num_q_tiles, tid);
    }
    sw.ping_pong_close();
  }
}

}  // namespace gg::kernels::cuda::attn
