// The BoB's sm_90a kernels (bwd_bwd.cuh has the math):
// BobKeySm90Traits), "E and F first": pass 0 (query-parallel) computes E and F alone; pass 1
// (query-parallel) forms S̄, dS, dP̄ from them exactly as pass 2 does and accumulates grad_Q and
// grad_dO; pass 2 (key-parallel) grad_K and grad_V. With all three cotangents pass 0 also forms
// D and P·Vt (one product fewer in pass 1). At d = 64 with all three cotangents, the fused BoB
// instead: pass 0 (also dS·Kt), then one key sweep for all four outputs, grad_Q and grad_dO added
// into f32 buffers (in a fixed order, or atomically with set_attention_deterministic(false)).
#include "kernels/cuda/attention/bwd_bwd.cuh"
#include "kernels/cuda/attention/common.cuh"
#include "kernels/cuda/attention/hopper.cuh"
#include "kernels/cuda/attention/mask.h"
#include "kernels/cuda/attention/sweeps.cuh"

namespace gg::kernels::cuda {
namespace {

using namespace attn;

// ------------------------------------------------------------------------ sm_90a, shared pieces
//
// A consumer warpgroup owning 64 query rows keeps Q, dO and Qt in shared memory (or, d = 64, in
// registers) and sweeps the key tiles K, V, Kt, Vt; per sub-tile of kSub keys it computes the four
// score tiles S = Q·Kᵀ, dP = dO·Vᵀ, G = Qt·Kᵀ + Q·Ktᵀ (unscaled) and H = dO·Vtᵀ, dropping the
// products of absent cotangents (their tiles are zero). Tiles are 128-byte swizzled; the sweeps
// are sweeps.cuh's (HopperQuerySweepWs, HopperKeySweepWs).

struct Cotangents {
  bool Qt, Kt, Vt, G, H;
  template <typename T>
  __host__ __device__ explicit Cotangents(const Params<T>& p)
      : Qt(p.Qt != nullptr), Kt(p.Kt != nullptr), Vt(p.Vt != nullptr), G(Qt || Kt), H(Vt) {}
  __host__ __device__ bool all() const { return Qt && Kt && Vt; }
};
// All three cotangents present, known at compile time: the row loops of the warp-specialised
// kernels are compiled once more with it (with_cotangents), so that their chains of products have
// no branch between them (a branch ends a chain of wgmma instructions: ptxas then fences and
// waits around each product).
// (Their flags are read only by device code, so the host pass of nvcc finds them unreferenced.)
#pragma nv_diag_suppress 177
struct AllCotangents {
  static constexpr bool Qt = true, Kt = true, Vt = true, G = true, H = true;
  template <typename T>
  __host__ __device__ explicit AllCotangents(const Params<T>&) {}
};
// All three present, the score product H left out (pass 0 with kPV forms P·Vt instead).
struct AllCotangentsNoH {
  static constexpr bool Qt = true, Kt = true, Vt = true, G = true, H = false;
  template <typename T>
  __host__ __device__ explicit AllCotangentsNoH(const Params<T>&) {}
};
#pragma nv_diag_default 177
// f(AllCotangents{p}) when all three cotangents are present, else f(Cotangents{p}).
template <typename T, typename F>
__device__ __forceinline__ void with_cotangents(const Params<T>& p, F&& f) {
  if (Cotangents(p).all())
    f(AllCotangents(p));
  else
    f(Cotangents(p));
}
// What the BoB sweeps copy: V only where G is formed (dP = dO·Vᵀ is used only through G), the
// cotangents present, and the row scalars E and F.
template <typename T>
__host__ __device__ Present bob_present(const Params<T>& p) {
  const Cotangents c(p);
  return {c.G, c.Qt, c.Kt, c.Vt, true};
}
// The score tiles of keys [kSub·q, kSub·q + kSub) of the key tile t, issued and waited for. Those
// keys' rows start kSub·q·128 bytes (kSub·q·8 16-byte units) into each 64-column slab.
template <typename T, int kD, int kBN, int kSub, typename Sweep, typename Own, typename Cot>
__device__ __forceinline__ void query_scores(const Sweep& sw, float (&S)[kSub / 8][4], float (&dP)[kSub / 8][4],
                                             float (&G)[kSub / 8][4], float (&Hs)[kSub / 8][4], const Cot& c,
                                             const Own& own, const KeyTiles& t, int q) {
  const uint64_t at = uint64_t(q) * kSub * 8;
  if (!c.G) {
    zero(dP);
    zero(G);
  }
  if (!c.H) zero(Hs);
  sw.turn_begin();
  wgmma_fence();
  wgmma_fence_regs(S);
  wgmma_fence_regs(dP);
  wgmma_fence_regs(G);
  wgmma_fence_regs(Hs);
  own_score<T, kD, kSub, false, kBN>(S, own.Q, t.K + at);
  if (c.G) own_score<T, kD, kSub, false, kBN>(dP, own.dO, t.V + at);
  if (c.Qt) own_score<T, kD, kSub, false, kBN>(G, own.Qt, t.K + at);
  if (c.Kt) {
    if (c.Qt)
      own_score<T, kD, kSub, true, kBN>(G, own.Q, t.Kt + at);
    else
      own_score<T, kD, kSub, false, kBN>(G, own.Q, t.Kt + at);
  }
  if (c.H) own_score<T, kD, kSub, false, kBN>(Hs, own.dO, t.Vt + at);
  wgmma_commit();
  sw.turn_end();
  wgmma_wait<0>();
  wgmma_fence_regs(S);
  wgmma_fence_regs(dP);
  wgmma_fence_regs(G);
  wgmma_fence_regs(Hs);
}

// ------------------------------------------------------------------------ sm_90a pass 2
//
// Pass 2, key-parallel: a warpgroup owning 64 key rows [j0, j0 + 64) sweeps the query tiles Q, dO,
// Qt (kBN rows) with their row scalars L, D, E, F; per tile: score tiles Sᵀ, dPᵀ, Gᵀ (unscaled), Hᵀ
// (64 keys x kBN queries), coefficient tiles S̄ᵀ, dSᵀ, dP̄ᵀ in place, then grad_K += S̄ᵀ·Q + dSᵀ·Qt
// and grad_V += dP̄ᵀ·dO. Blocks of 128 keys, a producer and two consumer warpgroups
// (HopperKeySweepWs); own rows in registers at d = 64, in shared memory at d = 128.

// The transposed score tiles of a key-side row loop (the own 64 keys x the kBN queries of tile t):
// Sᵀ, dPᵀ, Gᵀ (unscaled), Hᵀ of the cotangents present, issued and committed. vt: the A operand
// of Hᵀ (own.Vt, or a descriptor of the own Vt rows in shared memory).
template <typename T, int kD, int kBN, typename Cot, typename Own, typename Vt>
__device__ __forceinline__ void issue_key_scores(float (&S)[kBN / 8][4], float (&dP)[kBN / 8][4],
                                                 float (&G)[kBN / 8][4], float (&Hs)[kBN / 8][4], const Cot& cot,
                                                 const Own& own, const Vt& vt, const QueryTiles& t) {
  wgmma_fence();
  wgmma_fence_regs(S);
  wgmma_fence_regs(dP);
  wgmma_fence_regs(G);
  wgmma_fence_regs(Hs);
  own_score<T, kD, kBN, false, kBN>(S, own.K, t.Q);
  if (cot.G) own_score<T, kD, kBN, false, kBN>(dP, own.V, t.dO);
  if (cot.Qt) own_score<T, kD, kBN, false, kBN>(G, own.K, t.Qt);
  if (cot.Kt) {
    if (cot.Qt)
      own_score<T, kD, kBN, true, kBN>(G, own.Kt, t.Q);
    else
      own_score<T, kD, kBN, false, kBN>(G, own.Kt, t.Q);
  }
  if (cot.H) own_score<T, kD, kBN, false, kBN>(Hs, vt, t.dO);
  wgmma_commit();
}

// Pass 2 of one warpgroup (thread tid of 128) owning key rows [j0, j0 + 64), over the query tiles
// [q_begin, num_q_tiles) of the sweep; own: the own rows (OwnKeyTiles or OwnKeyFrags).
// kOpts: the general mask (the sweep's steps run over the group's query heads).
template <typename T, int kD, int kBN, bool kOpts, typename Cot = Cotangents, typename Sweep, typename Own>
__device__ __forceinline__ void pass2_rows(Sweep& sw, const Own& own, const Params<T>& p, int64_t head, int j0,
                                           int q_begin, int num_q_tiles, int tid, const TailSplit& split) {
  const int warp = tid / 32, lane = tid % 32;
  const int jw = j0 + 16 * warp;
  const Cot cot(p);
  const float sl2 = p.scale * kLog2e;

  float gK[kD / 8][4], gV[kD / 8][4];
  zero(gK);
  zero(gV);

  for (int qt = q_begin; qt < num_q_tiles; ++qt) {
    sw.begin_tile(qt);
    const int i0 = sw.tile(qt) * kBN;
    const QueryTiles t = sw.tiles(qt);
    if (keys_see_query_tile<kBN, kOpts>(p, i0, j0)) {
      // score tiles, transposed (64 keys x kBN queries): Sᵀ, dPᵀ, Gᵀ (unscaled), Hᵀ
      float S[kBN / 8][4], dP[kBN / 8][4], G[kBN / 8][4], Hs[kBN / 8][4];
      if (!cot.G) zero(dP);
      if (!cot.G) zero(G);
      if (!cot.H) zero(Hs);
      sw.turn_begin();
      issue_key_scores<T, kD, kBN>(S, dP, G, Hs, cot, own, own.Vt, t);
      sw.turn_end();
      wgmma_wait<0>();
      wgmma_fence_regs(S);
      wgmma_fence_regs(dP);
      wgmma_fence_regs(G);
      wgmma_fence_regs(Hs);

      // coefficient tiles, in place: S <- S̄ᵀ, dP <- dSᵀ, G <- dP̄ᵀ
      for_key_tile_entries<kBN, kOpts>(S, p, t, i0, j0, jw, sl2, lane, [&](int j, int e, float P, int li) {
        coef_entry(P, p.scale, t.D[li], t.E[li], t.F[li], S[j][e], dP[j][e], G[j][e], Hs[j][e]);
      });
      uint32_t sa[kBN / 16][4], dsa[kBN / 16][4], ga[kBN / 16][4];
      tile_to_a_frags<T, kBN>(sa, S);
      tile_to_a_frags<T, kBN>(dsa, dP);
      tile_to_a_frags<T, kBN>(ga, G);

      wgmma_fence_regs(gK);
      wgmma_fence_regs(gV);
      sw.turn_begin();
      wgmma_fence();
      wgmma_coef_product<T, kD, kBN>(gK, sa, t.Q);                // gK += S̄ᵀ·Q
      if (cot.Qt) wgmma_coef_product<T, kD, kBN>(gK, dsa, t.Qt);  // gK += dSᵀ·Qt
      if (cot.G) wgmma_coef_product<T, kD, kBN>(gV, ga, t.dO);    // gV += dP̄ᵀ·dO
      wgmma_commit();
      sw.turn_end();
      wgmma_wait<0>();
      wgmma_fence_regs(gK);
      wgmma_fence_regs(gV);
    } else {
      sw.skip_turns(2);
    }
    sw.end_tile(qt);
  }

  key_rows_out<kOpts>(p, split, p.gK, p.gV, head, jw, gK, gV, p.scale, lane);  // stored, or a piece's into the scratch
}

// Pass 2's kernel: at d = 64 the own rows of both consumers fit in registers beside the
// accumulators; at d = 128 they are 64-row tiles in shared memory after the sweep's (K, V, Kt, Vt
// of each consumer: Pass2OwnSmem128), and the ring has three stages instead of four to fit.
struct Pass2OwnSmem128 : SmemAfterSweep<Pass2OwnSmem128> {
  static constexpr size_t kBytes = 2 * 4 * 64 * 128 * 2;  // [consumer][K, V, Kt, Vt][64 x 128]
};
template <typename T, int kD>
using Pass2SweepWs = HopperKeySweepWs<T, kD, BobKeySm90Traits<kD>::kBlockN, BobKeySm90Traits<kD>::kStages>;
template <typename T, int kD>
constexpr size_t pass2_ws_smem() {
  if constexpr (kD == 64) return Pass2SweepWs<T, 64>::kSmem;
  else return Pass2OwnSmem128::total<Pass2SweepWs<T, 128>>();
}

// kOpts (every sm_90a BoB kernel): grouped heads, Nq != Nk and windows (the sweeps' general mask
// and bands; key sweeps over key/value heads, split in their last wave only where every band is
// alike: key_units_differ).
template <typename T, int kD, bool kOpts>
__global__ void __launch_bounds__(BobKeySm90Traits<kD>::kThreads, 1)
    attention_bob_pass2_ws_kernel(const Params<T> p, const __grid_constant__ SweepMaps maps,
                                  const __grid_constant__ TailSplit split) {
#if defined(GG_WGMMA_AVAILABLE)
  using Cfg = BobKeySm90Traits<kD>;
  extern __shared__ __align__(1024) unsigned char smem_raw[];
  constexpr int kOwnInSmem = kD == 64 ? 0 : 4;
  T* const own_smem =
      kD == 64 ? nullptr : reinterpret_cast<T*>(smem_raw + Pass2OwnSmem128::offset<Pass2SweepWs<T, kD>>());
  KeyBand band{};
  const SweepUnit unit = key_sweep_unit<kOpts, Cfg::kBlockN>(p, split, band);
  key_sweep_ws_block<T, kD, Cfg::kBlockN, Cfg::kStages, Cfg::kProducerRegs, Cfg::kConsumerRegs, kOwnInSmem,
                     /*kTileN=*/3, kOpts>(
      smem_raw, p, maps, unit, band, [](const Params<T>& q) { return bob_present(q); },
      [&](auto& sw, const auto& own, int64_t head, int j0, int q_begin, int n, int tid) {
        with_cotangents(p, [&](auto cot) {
          pass2_rows<T, kD, Cfg::kBlockN, kOpts, decltype(cot)>(sw, own, p, head, j0, q_begin, n, tid, split);
        });
      },
      own_smem);
#else
  __trap();  // launched only where sm_90a code was built and the device is 9.x
#endif
}

template <typename T, int kD>
void launch_bob_pass2_ws(const Params<T>& p, const SweepMaps& maps) {
  using Cfg = BobKeySm90Traits<kD>;
  constexpr size_t smem = pass2_ws_smem<T, kD>();
  auto kernel = static_switch([](auto kOpts) { return attention_bob_pass2_ws_kernel<T, kD, kOpts>; }, p.opts);
  set_smem(kernel, smem);
  // its last wave split, each piece storing its own rows (deterministic)
  const TailSplitRun tail = TailSplitRun::for_key_sweep(p, Cfg::kBlockN, /*ordered=*/true, kD);
  kernel<<<tail.split().blocks(), Cfg::kThreads, smem, cuda_stream()>>>(p, with_ping_pong(maps, false),
                                                                        tail.split());
  CUDA_CHECK_LAUNCH();
  tail.finish(p, p.gK, p.gV, p.scale);
}

// ------------------------------------------------------------------------ sm_90a, fused BoB
//
// The fused BoB (d = 64, all three cotangents): after pass 0 (E and F, P·Vt, and dS·Kt), one
// key-parallel sweep computes all four outputs (docs/attention.md §4, the schedule with atomics). Per query tile the consumers form the score and
// coefficient tiles exactly as pass 2 does (grad_K, grad_V bitwise equal to pass 2's after the same
// E and F), and also the block's parts of grad_Q = s·(S̄·K + dS·Kt) and of grad_dO = dP̄·V + P·Vt
// for the tile's queries, which the blocks of a head add into f32 buffers by atomic additions, in
// turns in a fixed order by default (order_additions: bitwise reproducible), in any order with
// set_attention_deterministic(false). Of those, P·Vt and dS·Kt need no E or F, so the
// query-parallel pass 0 (kEF0Fused, 6 products per tile, at a higher rate than this sweep's) puts
// them into the buffers as their starting values: 5 + 3 + 2 = 10 products per tile here, 16 in
// all with pass 0 (the three-pass BoB: 21).
//
// Blocks of 128 keys, two consumers of 64 keys, query tiles of 32. Each consumer stores its two
// coefficient tiles S̄ and dP̄ (its 64 keys, transposed back to rows of queries by stmatrix) into
// shared memory; then consumer 0 computes the block's grad_Qᵀ (64 x 32) = Kᵀ·S̄ᵀ over all 128
// keys (2 products' worth) and consumer 1 grad_dOᵀ = Vᵀ·dP̄ᵀ (2) (A: the own key rows, MN-major
// from shared memory; B: the coefficient tiles, K-major), as a group of their own after the
// output products. That group stays pending into the next tile: the wait for the next tile's
// score products covers it (groups complete in order), and the part is added to the buffer
// then. Its first product overwrites the part instead of a zeroing between groups (with the
// zeroing, ptxas serialised every wgmma of the kernel, C7515).
// The coefficient tiles alternate between two buffers: a
// consumer rewrites a buffer (tile t + 1) only after passing named barrier 3 of tile t, which the
// other consumer reaches only after all its products of tile t - 1, the last to read that buffer.
struct FusedBobSmem : SmemAfterSweep<FusedBobSmem> {
  static constexpr size_t kOwnElems = kSweepBlock * 64;  // K, V, Kt, Vt (bf16/f16)
  static constexpr size_t kCoefElems = 32 * kSweepBlock;  // one coefficient tile: 32 queries x 128 keys
  static constexpr int kBuffers = 2, kCoefTiles = 2;  // S̄, dP̄
  static constexpr size_t kBytes = (4 * kOwnElems + kBuffers * kCoefTiles * kCoefElems) * 2;
};

// Rows [16·warp, 16·warp + 16) of keys 64·w + ... of a 32-query coefficient tile (A fragments a,
// rows keys, columns queries) into the K-major tile dst (32 queries x 128 keys, swizzled).
template <typename T>
__device__ __forceinline__ void store_coef_rows(T* dst, const uint32_t (&a)[2][4], int w, int warp, int lane) {
  const int m = lane / 8, i = lane % 8;  // lane's row: row i of matrix m (register m)
  const int key = 64 * w + 16 * warp + 8 * (m & 1);
#pragma unroll
  for (int q = 0; q < 2; ++q) stmatrix_x4_trans(dst + swz_offset<32>(16 * q + 8 * (m >> 1) + i, key), a[q]);
}

// kOpts: the general mask; step qt adds to tile band.tile(qt) of query head band.query_head(qt).
template <typename T, bool kOrdered, bool kOpts, typename Sweep>
__device__ __forceinline__ void bob_fused_rows(Sweep& sw, const Params<T>& p, int64_t head, int j0, int q_begin,
                                               int num_q_tiles, int tid, T* extra, float* acc,
                                               const TailSplit& split, const KeyBand& band) {
  constexpr int kD = 64, kBN = 32;
  constexpr size_t kOwn = FusedBobSmem::kOwnElems, kCoef = FusedBobSmem::kCoefElems;
  const int warp = tid / 32, lane = tid % 32, w = warpgroup_index() - 1;
  const int jw = j0 + 16 * warp;
  const float sl2 = p.scale * kLog2e;
  // the own rows K, V, Kt as register A operands of the score products (an SS product of 32
  // columns is limited by shared-memory reads of A), Vt's from shared memory (registers: with all
  // four in registers the loop spills); all four in shared memory for the late products
  OwnKeyFrags<kD> own;
  Present in_regs = sw.c;
  in_regs.Vt = false;
  own.load(p, in_regs, head * kD, jw, kOpts ? p.Nk : p.N, lane);
  const uint64_t own_vt = make_desc_sw128(extra + 3 * kOwn + w * 64 * 64);
  T* const coef = extra + 4 * kOwn;
  // consumer 0: grad_Qᵀ from K and the tiles S̄; consumer 1: grad_dOᵀ from V and dP̄
  const uint64_t a0 = make_desc_sw128(extra + w * kOwn);
  const int tiles = cdiv(p.N, kBN);
  float* const acc_out = acc + ((head / p.N) * 2 + w) * static_cast<int64_t>(tiles) * kBN * 64;
  auto part_tile = [&](int qt) {  // where step qt's part goes
    return kOpts ? acc + ((band.query_head(qt) * 2 + w) * tiles + band.tile(qt)) * kBN * 64
                 : acc_out + static_cast<int64_t>(qt) * kBN * 64;
  };
  auto buffer = [&](int qt) {
    return coef + ((qt - q_begin) % FusedBobSmem::kBuffers) * FusedBobSmem::kCoefTiles * kCoef;
  };

  float gK[kD / 8][4], gV[kD / 8][4], part[kBN / 8][4];
  zero(gK);
  zero(gV);
  zero(part);
  // causal: both consumers compute every tile from the block's first (a tile before a consumer's
  // keys gives zero coefficients there), so that they meet at every barrier
  for (int qt = q_begin; qt < num_q_tiles; ++qt) {
    sw.begin_tile(qt);
    const QueryTiles t = sw.tiles(qt);
    // Sᵀ, dPᵀ, Gᵀ (unscaled), Hᵀ (64 keys x 32 queries)
    float S[kBN / 8][4], dP[kBN / 8][4], G[kBN / 8][4], Hs[kBN / 8][4];
    issue_key_scores<T, kD, kBN>(S, dP, G, Hs, AllCotangents(p), own, own_vt, t);
    wgmma_wait<0>();  // and the previous tile's late products (groups complete in order)
    wgmma_fence_regs(S);
    wgmma_fence_regs(dP);
    wgmma_fence_regs(G);
    wgmma_fence_regs(Hs);

    // in place: S <- S̄ᵀ, dP <- dSᵀ, G <- dP̄ᵀ; then the two coefficient tiles (S̄, dP̄) of this
    // consumer's keys into the tile's buffer
    for_key_tile_entries<kBN, kOpts>(S, p, t, sw.tile(qt) * kBN, j0, jw, sl2, lane, [&](int j, int e, float P, int li) {
      coef_entry(P, p.scale, t.D[li], t.E[li], t.F[li], S[j][e], dP[j][e], G[j][e], Hs[j][e]);
    });
    uint32_t sa[kBN / 16][4], dsa[kBN / 16][4], ga[kBN / 16][4];
    tile_to_a_frags<T, kBN>(sa, S);
    tile_to_a_frags<T, kBN>(dsa, dP);
    tile_to_a_frags<T, kBN>(ga, G);
    T* const b = buffer(qt);
    store_coef_rows<T>(b, sa, w, warp, lane);
    store_coef_rows<T>(b + kCoef, ga, w, warp, lane);
    fence_proxy_async();

    // gK += S̄ᵀ·Q + dSᵀ·Qt, gV += dP̄ᵀ·dO (issued before the barrier: they need no row of the other
    // consumer); then, a group of its own, part += (K|V)ᵀ·(S̄|dP̄)ᵀ over the 128 keys (dS·Kt: pass 0)
    wgmma_fence_regs(gK);
    wgmma_fence_regs(gV);
    wgmma_fence();
    wgmma_coef_product<T, kD, kBN>(gK, sa, t.Q);
    wgmma_coef_product<T, kD, kBN>(gK, dsa, t.Qt);
    wgmma_coef_product<T, kD, kBN>(gV, ga, t.dO);
    wgmma_commit();
    // the previous tile's part (its late products completed at this tile's first wait), added
    // after the fence above, so that its MEMBAR cannot be held up by these reductions
    if (qt > q_begin) {
      wgmma_fence_regs(part);
      ordered_add_begin(kOrdered, w);  // kOrdered: the additions take turns (order_additions)
      add_acc_tile<kBN>(part_tile(qt - 1), part, warp, lane);
      ordered_add_end(kOrdered, w);
    }
    named_bar_sync(3, 256);  // both consumers' rows of tile qt are stored
    const uint64_t b0 = make_desc_sw128(b + w * kCoef);
#pragma unroll
    for (int q = 0; q < 8; ++q) wgmma_ss_amn<T, kBN>(part, a0 + mn_major_step(q, 0, 128), b0 + k_major_step(q, kBN), q > 0);
    wgmma_commit();
    wgmma_wait<1>();  // the output products (the query tile may be released)
    wgmma_fence_regs(gK);
    wgmma_fence_regs(gV);
    sw.end_tile(qt);
    // the late products stay pending into the next tile, whose score products queue behind them
  }
  wgmma_wait<0>();
  wgmma_fence_regs(part);
  if (num_q_tiles > q_begin) {
    ordered_add_begin(kOrdered, w);
    add_acc_tile<kBN>(part_tile(num_q_tiles - 1), part, warp, lane);
    ordered_add_end(kOrdered, w);
  }

  key_rows_out<kOpts>(p, split, p.gK, p.gV, head, jw, gK, gV, p.scale, lane);
}

template <typename T, bool kOrdered, bool kOpts>  // kOrdered: deterministic (p.add_order set)
__global__ void __launch_bounds__(BobKeySm90Traits<64>::kThreads, 1)
    attention_bob_fused_ws_kernel(const Params<T> p, const __grid_constant__ SweepMaps maps, float* acc,
                                  const __grid_constant__ TailSplit split) {
#if defined(GG_WGMMA_AVAILABLE)
  using Cfg = BobKeySm90Traits<64>;
  using Sweep = HopperKeySweepWs<T, 64, Cfg::kBlockN, Cfg::kStages>;
  extern __shared__ __align__(1024) unsigned char smem_raw[];
  T* const extra = reinterpret_cast<T*>(smem_raw + FusedBobSmem::offset<Sweep>());
  KeyBand band{};
  const SweepUnit unit = key_sweep_unit<kOpts, Cfg::kBlockN>(p, split, band);
  const int segment = kOpts && kOrdered ? add_segment(p, unit.blk) : 0;  // of the ordered additions
  float* const segment_acc = acc + segment * p.add_floats;
  // launched while pass 0 may still run: its head's (kOpts: its group's heads') row scalars and
  // buffer rows must be complete (pass 0: blocks of 128 rows)
  if (p.head_done != nullptr) {
    if constexpr (kOpts) {
      for (int g = 0; g < p.group; ++g) wait_done(p.head_done + band.qh0 + g, cdiv(p.N, kSweepBlock));
    } else {
      wait_done(p.head_done + unit.bh, cdiv(p.N, kSweepBlock));
    }
  }
  key_sweep_ws_block<T, 64, Cfg::kBlockN, Cfg::kStages, Cfg::kProducerRegs, Cfg::kConsumerRegs,
                     /*kOwnInSmem=*/4, /*kTileN=*/3, kOpts>(
      smem_raw, p, maps, unit, band, [](const Params<T>& q) { return bob_present(q); },
      [&](auto& sw, const auto&, int64_t head, int j0, int q_begin, int n, int tid) {
        bob_fused_rows<T, kOrdered, kOpts>(sw, p, head, j0, q_begin, n, tid, extra, segment_acc, split, band);
      },
      extra, [&](int warp, int lane) {
        // deterministic: consumer w's additions to output w (grad_Q, grad_dO), tile by tile in turn
        if constexpr (kOrdered) {
          const int w = warp - 2, tiles = cdiv(p.N, Cfg::kBlockN);
          if constexpr (kOpts)
            order_additions<true>(
                [&, counters = p.add_order + segment * p.add_counters](int t) {
                  return counters + (band.query_head(t) * 2 + w) * tiles + band.tile(t);
                },
                [&](int t) { return band_position<Cfg::kBlockN>(p, unit.blk, cdiv(p.Nk, kSweepBlock), band.tile(t)); },
                band.lo, band.hi, [w](int) { return w; }, lane);
          else
            order_additions<true>(
                [&](int t) { return p.add_order + (unit.bh * 2 + w) * tiles + t; },
                [&](int t) { return ordered_add_position(unit.blk, cdiv(p.N, kSweepBlock), t, Cfg::kBlockN, p.causal); },
                unit.t_begin, unit.t_end, [w](int) { return w; }, lane);
        }
      });
#else
  __trap();  // launched only where sm_90a code was built and the device is 9.x
#endif
}

// ------------------------------------------------------------------------ sm_90a, E and F first
//
// The query passes (docs/attention.md calls the row scalars E and F): pass 0 computes E and F
// alone (the five score products, no output product); pass 1 then forms the coefficient tiles
// S̄ = P∘(P̄ - F), dS = P∘(dP - D), dP̄ = P∘(G - E) in f32 from the known E and F, exactly as pass 2
// does, and accumulates grad_Q = s·(S̄·K + dS·Kt) and grad_dO = dP̄·V + P·Vt: two accumulators, no
// hi/lo split (nothing cancels later), no column slices at d = 128.

// Pass 0 of the fused BoB (d = 64), the warp's rows from iw: grad_Q's f32 buffer starts as dS·Kt
// (this thread's values gQ), grad_dO's as P·Vt (gdO), in the buffers' register order (layout:
// launch_bob_sm90_fused). Padding rows past N get finite values that the conversion never reads.
template <typename T>
__device__ __forceinline__ void fill_fused_bob_acc(const Params<T>& p, int64_t head, int iw, int lane,
                                                   const float (&gQ)[8][4], const float (&gdO)[8][4]) {
  constexpr int kRows = BobKeySm90Traits<64>::kBlockN, kTile = kRows * 64;
  static_assert(kRows == 32, "acc_index_of: tiles of 32 rows");
  const int tiles = cdiv(p.N, kRows);
  float* const gq = p.fused_acc + (head / p.N) * 2 * tiles * kTile;  // this head's grad_Q buffer
  float* const gdo = gq + static_cast<int64_t>(tiles) * kTile;
#pragma unroll
  for (int h = 0; h < 2; ++h) {
    const int row = iw + frag_row(lane, 2 * h);
    if (row >= tiles * kRows) continue;
    const int64_t tile = static_cast<int64_t>(row / kRows) * kTile;
#pragma unroll
    for (int j = 0; j < 8; ++j)
#pragma unroll
      for (int e = 0; e < 2; ++e) {
        const int at = acc_index_of(row % kRows, frag_col(lane, j, e));
        gq[tile + at] = gQ[j][2 * h + e];
        gdo[tile + at] = gdO[j][2 * h + e];
      }
  }
}

// D = rowsum(dO∘O) of this thread's two rows (d = 64; 0 past N), summed as pass 0's epilogue
// sums it (each lane its columns, then the quad), for the fused BoB's pass 0, whose loop needs D.
template <typename T>
__device__ __forceinline__ void D_of_rows(const Params<T>& p, int64_t head, int iw, int lane, float (&D)[2]) {
#pragma unroll
  for (int h = 0; h < 2; ++h) {
    const int row = iw + frag_row(lane, 2 * h);
    float d = 0.f;
    if (row < p.N) {
      const T* dO = p.dO + (head + row) * 64;
      const T* O = p.O + (head + row) * 64;
#pragma unroll
      for (int j = 0; j < 8; ++j) {
        const int c = frag_col(lane, j, 0);
        const float2 o = Elem<T>::unpack(*reinterpret_cast<const uint32_t*>(dO + c));
        const float2 y = Elem<T>::unpack(*reinterpret_cast<const uint32_t*>(O + c));
        d += o.x * y.x + o.y * y.y;
      }
    }
    D[h] = quad_sum(d) - p.row_dL(head, row);  // D - dL, as launch_D
  }
}

// kOutputs = false: pass 0, writes E and F of the warpgroup's query rows [i0, i0 + 64).
// kOutputs = true: pass 1, grad_Q and grad_dO (p.gQ, p.gdO) of those rows from pass 0's E and F.
// kPV (all cotangents): pass 0 forms, instead of the score product H = dO·Vtᵀ, the output product
// P·Vt and writes it to p.PV (f32 rows); F's term Σ P∘H is then rowsum(dO∘(P·Vt)), the same
// number rounded differently (and the same count of products). Pass 1 (or the fused sweep) then
// leaves out its product P·Vt and adds p.PV to grad_dO: one product fewer. Its loop does not need
// D, so pass 0 with kPV also forms D = rowsum(dO∘O) in its epilogue, which reads the dO rows
// anyway, and writes it for the later passes (no separate kernel). In the fused BoB, P·Vt goes
// into grad_dO's f32 buffer instead of p.PV (fill_fused_bob_acc).
// kDs (with kPV, the fused BoB's pass 0, kEF0Fused): also the output product dS·Kt (dS = P∘(dP - D),
// the first backward's, so D is formed before the loop), which needs no E or F: it starts grad_Q's
// buffer, and the fused sweep leaves it out (attention_bob_fused_ws_kernel).
// kOpts: the general mask; the sweep's tile kb is key tile sw.k0 + kb.
// Thread tid of 128; warp w owns [iw, iw + 16).
template <typename T, int kD, bool kOutputs, typename Cot = Cotangents, bool kPV = false, bool kDs = false,
          bool kOpts = false, typename Sweep>
__device__ __forceinline__ void ef_rows(Sweep& sw, const Params<T>& p, int64_t head, int i0, int num_k_tiles,
                                        int tid) {
  using Cfg = BobQuerySm90Traits<kD>;
  constexpr int kBN = Cfg::kBlockN;
  constexpr int kSub = kOutputs ? Cfg::kSubOut : Cfg::kSubEF;
  const int warp = tid / 32, lane = tid % 32;
  const int iw = i0 + 16 * warp;
  const Cot cot(p);
  // no key outside [key_begin, key_end) is visible to the warpgroup's rows
  const int key_end = kOpts ? p.key_hi(min(i0 + 63, p.N - 1)) : p.causal ? min(p.N, i0 + 64) : p.N;
  const int key_begin = kOpts ? p.key_lo(i0) : 0;
  const float sl2 = p.scale * kLog2e;
  OwnFrags<Cfg::kRegOwn ? kD : 16> frags;  // d = 64: the own rows in registers
  if constexpr (Cfg::kRegOwn) frags.load(p, head * kD, iw, lane);
  float L2[2], D[2], E[2] = {0.f, 0.f}, F[2] = {0.f, 0.f};
  row_scalars<!(kPV && !kOutputs)>(p, head, iw, lane, L2, D);  // pass 0 with kPV forms D in its epilogue
  static_assert(!kDs || (kPV && !kOutputs && kD == 64), "kDs: the fused BoB's pass 0");
  if constexpr (kDs) D_of_rows(p, head, iw, lane, D);  // its loop needs D
  if constexpr (kOutputs) {
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      const int row = iw + frag_row(lane, 2 * h);
      E[h] = row < p.N ? p.E[head + row] : 0.f;
      F[h] = row < p.N ? p.F[head + row] : 0.f;
    }
  }

  static_assert(!kPV || (kOutputs ? Cot::Vt : !Cot::H), "kPV: pass 0 without the score product H; pass 1 with Vt");
  constexpr int kAcc = kOutputs || kPV ? kD / 8 : 1;  // pass 0 has no accumulator (but P·Vt's)
  float gQ[kAcc][4], gdO[kAcc][4];  // pass 0 with kPV: gdO = P·Vt
  zero(gQ);
  zero(gdO);
  float e_part[2] = {0.f, 0.f}, f_part[2] = {0.f, 0.f};

  // acc (64 x kD) += A (64 x 16 keys, registers) · rows [16·q, 16·q + 16) of an MN-major tile
  auto coef16 = [&](float (&acc)[kAcc][4], const uint32_t (&a)[4], uint64_t d_tile, int q) {
#pragma unroll
    for (int h = 0; h < kD / 64; ++h)
      wgmma_rs<T, 64>(*reinterpret_cast<float(*)[8][4]>(&acc[8 * h][0]), a, d_tile + mn_major_step(q, h, kBN), true);
  };

  for (int kb = 0; kb < num_k_tiles; ++kb) {
    sw.begin_tile(kb);
    const int j0 = (sw.k0 + kb) * kBN;
    const KeyTiles t = sw.tiles(kb);

#pragma unroll 1
    for (int q = 0; q < kBN / kSub; ++q) {
      const int js = j0 + kSub * q;
      if (js >= key_end || (kOpts && js + kSub <= key_begin)) {  // uniform over the warpgroup: no row sees these keys
        sw.skip_turns(kOutputs || kPV ? 2 : 1);
        continue;
      }

      float S[kSub / 8][4], dP[kSub / 8][4], G[kSub / 8][4], Hs[kSub / 8][4];
      if constexpr (Cfg::kRegOwn)
        query_scores<T, kD, kBN, kSub>(sw, S, dP, G, Hs, cot, frags, t, q);
      else
        query_scores<T, kD, kBN, kSub>(sw, S, dP, G, Hs, cot, sw.own, t, q);

      for_query_tile_entries<kSub, kOpts>(S, p, js, i0, iw, L2, sl2, lane, [&](int n, int e, float P) {
        const int h = e / 2;
        if constexpr (kPV && !kOutputs) {  // E / s = Σ P∘G, (F + 2·D·E - rowsum(dO∘(P·Vt))) / s = Σ P∘dP∘G
          const float PG = P * G[n][e];
          e_part[h] += PG;
          f_part[h] = fmaf(dP[n][e], PG, f_part[h]);
          Hs[n][e] = P;
          if constexpr (kDs) dP[n][e] = P * (dP[n][e] - D[h]);  // dS
        } else if constexpr (!kOutputs) {  // E = Σ P∘G·s, F + 2·D·E = Σ P∘(dP∘G·s + H)
          const float PG = P * (G[n][e] * p.scale);
          e_part[h] += PG;
          f_part[h] += dP[n][e] * PG + P * Hs[n][e];
        } else {  // in place: S <- S̄, dP <- dS, G <- dP̄, Hs <- P
          coef_entry(P, p.scale, D[h], E[h], F[h], S[n][e], dP[n][e], G[n][e], Hs[n][e]);
          if constexpr (!kPV) Hs[n][e] = P;
        }
      });
      if constexpr (kOutputs) {
        constexpr int kU = kSub / 16;  // 16-key steps of the sub-tile
        uint32_t sb_a[kU][4], ds_a[kU][4], dpb_a[kU][4], p_a[kU][4];
        tile_to_a_frags<T, kSub>(sb_a, S);
        tile_to_a_frags<T, kSub>(ds_a, dP);
        tile_to_a_frags<T, kSub>(dpb_a, G);
        if constexpr (!kPV) tile_to_a_frags<T, kSub>(p_a, Hs);
        wgmma_fence_regs(gQ);
        wgmma_fence_regs(gdO);
        sw.turn_begin();
        wgmma_fence();
#pragma unroll
        for (int u = 0; u < kU; ++u) {
          const int r = kU * q + u;                   // 16-key step within the key tile
          coef16(gQ, sb_a[u], t.K, r);                // gQ += S̄·K
          if (cot.Kt) coef16(gQ, ds_a[u], t.Kt, r);   // gQ += dS·Kt
          if (cot.G) coef16(gdO, dpb_a[u], t.V, r);   // gdO += dP̄·V
          if (!kPV && cot.Vt) coef16(gdO, p_a[u], t.Vt, r);  // gdO += P·Vt (kPV: from pass 0)
        }
        wgmma_commit();
        sw.turn_end();
        wgmma_wait<0>();
        wgmma_fence_regs(gQ);
        wgmma_fence_regs(gdO);
      } else if constexpr (kPV) {
        constexpr int kU = kSub / 16;
        uint32_t p_a[kU][4], ds_a[kDs ? kU : 1][4];
        tile_to_a_frags<T, kSub>(p_a, Hs);
        if constexpr (kDs) tile_to_a_frags<T, kSub>(ds_a, dP);
        wgmma_fence_regs(gdO);
        if constexpr (kDs) wgmma_fence_regs(gQ);
        sw.turn_begin();
        wgmma_fence();
#pragma unroll
        for (int u = 0; u < kU; ++u) {
          coef16(gdO, p_a[u], t.Vt, kU * q + u);                  // gdO += P·Vt
          if constexpr (kDs) coef16(gQ, ds_a[u], t.Kt, kU * q + u);  // gQ += dS·Kt
        }
        wgmma_commit();
        sw.turn_end();
        wgmma_wait<0>();
        wgmma_fence_regs(gdO);
        if constexpr (kDs) wgmma_fence_regs(gQ);
      }
    }
    sw.end_tile(kb);
  }

  if constexpr (kOutputs) {
    if constexpr (kPV) {  // gdO += P·Vt, from pass 0
#pragma unroll
      for (int h = 0; h < 2; ++h) {
        const int row = iw + frag_row(lane, 2 * h);
        if (row >= p.N) continue;
        const float* pv = p.PV + (head + row) * kD;
#pragma unroll
        for (int j = 0; j < kD / 8; ++j) {
          const float2 a = *reinterpret_cast<const float2*>(pv + frag_col(lane, j, 0));
          gdO[j][2 * h] += a.x;
          gdO[j][2 * h + 1] += a.y;
        }
      }
    }
    const float one[2] = {1.f, 1.f}, scale[2] = {p.scale, p.scale};
    store_acc<T, kD>(p.gQ + (head + iw) * kD, kD, gQ, scale, iw, p.N, lane);
    store_acc<T, kD>(p.gdO + (head + iw) * kD, kD, gdO, one, iw, p.N, lane);
  } else {
    // kPV: the sums times s; f_part += dO∘(P·Vt) and D's part += dO∘O of the thread's entries;
    // P·Vt to p.PV (rows), or, in the fused BoB, into grad_dO's f32 buffer as its starting value
    // (and grad_Q's buffer started at dS·Kt), which leaves the sweep no memset and its conversion no P·Vt
    float d_part[2] = {0.f, 0.f};
    if constexpr (kPV) {
#pragma unroll
      for (int h = 0; h < 2; ++h) {
        e_part[h] *= p.scale;
        f_part[h] *= p.scale;
        const int row = iw + frag_row(lane, 2 * h);
        if (row >= p.N) continue;
        const T* dO = p.dO + (head + row) * kD;
        const T* O = p.O + (head + row) * kD;
#pragma unroll
        for (int j = 0; j < kD / 8; ++j) {
          const int c = frag_col(lane, j, 0);
          const float2 o = Elem<T>::unpack(*reinterpret_cast<const uint32_t*>(dO + c));
          const float2 y = Elem<T>::unpack(*reinterpret_cast<const uint32_t*>(O + c));
          f_part[h] += o.x * gdO[j][2 * h] + o.y * gdO[j][2 * h + 1];
          d_part[h] += o.x * y.x + o.y * y.y;
          if constexpr (!kDs)
            *reinterpret_cast<float2*>(p.PV + (head + row) * kD + c) = make_float2(gdO[j][2 * h], gdO[j][2 * h + 1]);
        }
      }
      if constexpr (kDs) fill_fused_bob_acc(p, head, iw, lane, gQ, gdO);
    }
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      const float e_row = quad_sum(e_part[h]);
      const int row = iw + frag_row(lane, 2 * h);
      const float dl = p.row_dL(head, row);  // D holds D - dL
      const float d_row = kPV && !kDs ? quad_sum(d_part[h]) - dl : D[h];
      const float f_row = quad_sum(f_part[h]) - (2.f * d_row + dl) * e_row;
      if (lane % 4 == 0 && row < p.N) {
        p.E[head + row] = e_row;
        p.F[head + row] = f_row;
        if (kPV) p.D[head + row] = d_row;
      }
    }
  }
}

// The query passes' kernel: blocks of 128 query rows, a producer warpgroup and two consumer
// warpgroups each running ef_rows on 64 rows (HopperQuerySweepWs); registers move from the
// producer to the consumers with setmaxnreg. The pass it runs:
enum class QueryPass {
  kEF0,       // pass 0, E and F, with a cotangent absent (and the stages' row sums; D by launch_D)
  kEF1,       // pass 1, grad_Q and grad_dO from E and F, with a cotangent absent (and the stages)
  kEF0PV,     // pass 0 with all three cotangents: also D, and P·Vt into p.PV in place of the score
              // product H (ef_rows, kPV)
  kEF1PV,     // pass 1 with all three cotangents: adds p.PV to grad_dO instead of forming H
  kEF0Fused,  // the fused BoB's pass 0 (d = 64): as kEF0PV, and starts the fused sweep's f32
              // buffers at dS·Kt and P·Vt (ef_rows, kDs)
};

template <typename T, int kD, QueryPass kPass, bool kOpts>
__global__ void __launch_bounds__(BobQuerySm90Traits<kD>::kThreads, 1)
    attention_bob_query_ws_kernel(const Params<T> p, const __grid_constant__ SweepMaps maps) {
#if defined(GG_WGMMA_AVAILABLE)
  using Cfg = BobQuerySm90Traits<kD>;
  extern __shared__ __align__(1024) unsigned char smem_raw[];
  // the fused BoB's sweep may start on the SMs this pass leaves free (launch_bob_sm90_fused)
  if constexpr (kPass == QueryPass::kEF0Fused) griddep_launch_dependents();
  query_sweep_ws_block<T, kD, Cfg::kBlockN, Cfg::kStages, Cfg::kProducerRegs, Cfg::kConsumerRegs,
                       /*kOwnN=*/3, /*kTileN=*/4, kOpts>(
      smem_raw, p, maps, [](const Params<T>& q) { return bob_present(q); }, [&](auto& sw, int64_t head, int i0, int n, int tid) {
        if constexpr (kPass == QueryPass::kEF0PV)
          ef_rows<T, kD, /*kOutputs=*/false, AllCotangentsNoH, /*kPV=*/true, /*kDs=*/false, kOpts>(sw, p, head, i0, n, tid);
        else if constexpr (kPass == QueryPass::kEF0Fused)
          ef_rows<T, kD, /*kOutputs=*/false, AllCotangentsNoH, /*kPV=*/true, /*kDs=*/true, kOpts>(sw, p, head, i0, n, tid);
        else if constexpr (kPass == QueryPass::kEF1PV)
          ef_rows<T, kD, /*kOutputs=*/true, AllCotangents, /*kPV=*/true, /*kDs=*/false, kOpts>(sw, p, head, i0, n, tid);
        else  // a cotangent absent, or a BoB stage; whole BoBs with all three: kEF0PV/kEF1PV or fused
          ef_rows<T, kD, /*kOutputs=*/kPass == QueryPass::kEF1, Cotangents, /*kPV=*/false, /*kDs=*/false,
                  kOpts>(sw, p, head, i0, n, tid);
      });
  if constexpr (kPass == QueryPass::kEF0Fused) {
    if (p.head_done != nullptr) signal_done(p.head_done + blockIdx.x / cdiv(p.N, Cfg::kBlockM));
  }
#else
  __trap();  // launched only where sm_90a code was built and the device is 9.x
#endif
}

template <typename T, int kD, QueryPass kPass>
void launch_bob_query_ws(const Params<T>& p, const SweepMaps& maps) {
  using Cfg = BobQuerySm90Traits<kD>;
  constexpr size_t smem = HopperQuerySweepWs<T, kD, Cfg::kBlockN, Cfg::kStages>::kSmem;
  auto kernel = static_switch([](auto kOpts) { return attention_bob_query_ws_kernel<T, kD, kPass, kOpts>; }, p.opts);
  set_smem(kernel, smem);
  kernel<<<dim3(grid_x(p.BH, cdiv(p.N, Cfg::kBlockM)), 1), Cfg::kThreads, smem, cuda_stream()>>>(
      p, with_ping_pong(maps, false));
  CUDA_CHECK_LAUNCH();
}

// The fused BoB: pass 0 (D, E, F; dS·Kt and P·Vt into grad_Q's and grad_dO's buffers), the key
// sweep, then grad_Q and grad_dO from their buffers.
template <typename T>
void launch_bob_sm90_fused(const Params<T>& p) {
  using Cfg = BobKeySm90Traits<64>;
  using Sweep = HopperKeySweepWs<T, 64, Cfg::kBlockN, Cfg::kStages>;
  constexpr int kBN = Cfg::kBlockN;
  const int tiles = cdiv(p.N, kBN);
  const size_t per_output = static_cast<size_t>(p.BH) * tiles * kBN * 64;  // floats
  // [head][grad_Q, grad_dO][tile]: pass 0 starts grad_Q's at dS·Kt and grad_dO's at P·Vt
  // Deterministic (ordered) under a general mask: the key blocks add into `segments` copies of
  // the buffers (ordered_add_segments), the first of which pass 0 starts, the others zeroed here.
  const bool ordered = p.deterministic;
  Params<T> q = p;
  const int segments = plan_add_segments(q, ordered, static_cast<int64_t>(2 * per_output), p.BH * 2 * tiles);
  Scratch acc(segments * 2 * per_output * sizeof(float));
  q.fused_acc = acc.as<float>();
  if (segments > 1)
    CUDA_CHECK(cudaMemsetAsync(acc.as<float>() + q.add_floats, 0, (segments - 1) * q.add_floats * sizeof(float),
                               cuda_stream()));
  // Programmatic dependent launch: the sweep starts once every block of pass 0 has started, on the
  // SMs pass 0's last wave leaves free, and each of its blocks waits until pass 0's blocks of its
  // head are done (q.head_done: a counter per head, zeroed here). Stream work between the two
  // launches would void the overlap, so the tail split's memset comes first.
  // Deterministic (ordered): a counter per (head, output, tile) for the ordered additions
  // (order_additions; per segment), zeroed with the per-head counters; the tail split's pieces
  // store their rows.
  Scratch done(static_cast<size_t>(p.BH) * (1 + (ordered ? 2 * tiles * segments : 0)) * sizeof(int));
  const TailSplitRun tail = TailSplitRun::for_key_sweep(p, kBN, /*ordered=*/ordered, 64);
  q.head_done = done.as<int>();
  if (ordered) q.add_order = q.head_done + p.BH;
  CUDA_CHECK(cudaMemsetAsync(q.head_done, 0, done.bytes(), cuda_stream()));
  launch_bob_query_ws<T, 64, QueryPass::kEF0Fused>(q, make_sweep_maps(q, 64, 64, BobQuerySm90Traits<64>::kBlockN));
  constexpr size_t smem = FusedBobSmem::total<Sweep>();
  static_assert(smem <= 227 * 1024, "shared memory");
  auto kernel = static_switch(
      [](auto kOrdered, auto kOpts) { return attention_bob_fused_ws_kernel<T, kOrdered, kOpts>; }, ordered, p.opts);
  set_smem(kernel, smem);
  const SweepMaps maps = make_sweep_maps(q, 64, kBN, 0);
  cudaLaunchConfig_t cfg{};
  cfg.gridDim = dim3(tail.split().blocks());
  cfg.blockDim = dim3(Cfg::kThreads);
  cfg.dynamicSmemBytes = smem;
  cfg.stream = cuda_stream();
  cudaLaunchAttribute attr{};
  attr.id = cudaLaunchAttributeProgrammaticStreamSerialization;
  attr.val.programmaticStreamSerializationAllowed = 1;
  cfg.attrs = &attr;
  cfg.numAttrs = 1;
  CUDA_CHECK(cudaLaunchKernelEx(&cfg, kernel, q, maps, acc.as<float>(), tail.split()));
  CUDA_CHECK_LAUNCH();
  tail.finish(p, p.gK, p.gV, p.scale);
  // per head: tiles of grad_Q, then tiles of grad_dO; one block per (head, output, tile)
  rows_from_acc_kernel<T, kBN, /*kOutputs=*/2><<<grid_x(2 * p.BH, tiles), 256, 0, cuda_stream()>>>(
      acc.as<float>(), p.gQ, p.gdO, p.N, p.scale, 1.f, segments, q.add_floats);
  CUDA_CHECK_LAUNCH();
}

// The two stages, with p.E and p.F the caller's: the row sums are the query pass that forms E and
// F; from them, the query pass that reads them, then the key pass.
template <typename T, int kD>
void launch_bob_sm90_stage(const Params<T>& p, BobStage stage) {
  launch_D(p);
  const SweepMaps maps = make_sweep_maps(p, kD, 64, BobQuerySm90Traits<kD>::kBlockN);
  if (stage == BobStage::kRowSums) return launch_bob_query_ws<T, kD, QueryPass::kEF0>(p, maps);
  launch_bob_query_ws<T, kD, QueryPass::kEF1>(p, maps);
  launch_bob_pass2_ws<T, kD>(p, make_sweep_maps(p, kD, BobKeySm90Traits<kD>::kBlockN, 0));
}

}  // namespace

namespace attn {

// The query passes (with all three cotangents pass 0 also forms D and P·Vt, which pass 1 adds
// instead of recomputing it: 21 products, not 22), then pass 2; at d = 64 with all three
// cotangents the fused BoB.
template <typename T, int kD>
void launch_bob_sm90(const Params<T>& p, BobStage stage) {
  if (stage != BobStage::kWhole) return launch_bob_sm90_stage<T, kD>(p, stage);
  if (kD == 64 && Cotangents(p).all()) return launch_bob_sm90_fused<T>(p);
  const SweepMaps maps = make_sweep_maps(p, kD, 64, BobQuerySm90Traits<kD>::kBlockN);
  if (Cotangents(p).all()) {
    Scratch pv(static_cast<size_t>(p.BH) * p.N * kD * sizeof(float));
    Params<T> q = p;
    q.PV = pv.as<float>();
    launch_bob_query_ws<T, kD, QueryPass::kEF0PV>(q, maps);
    launch_bob_query_ws<T, kD, QueryPass::kEF1PV>(q, maps);
  } else {
    launch_D(p);
    launch_bob_query_ws<T, kD, QueryPass::kEF0>(p, maps);
    launch_bob_query_ws<T, kD, QueryPass::kEF1>(p, maps);
  }
  launch_bob_pass2_ws<T, kD>(p, make_sweep_maps(p, kD, BobKeySm90Traits<kD>::kBlockN, 0));
}

template void launch_bob_sm90<__nv_bfloat16, 64>(const Params<__nv_bfloat16>&, BobStage);
template void launch_bob_sm90<__nv_bfloat16, 128>(const Params<__nv_bfloat16>&, BobStage);
template void launch_bob_sm90<__half, 64>(const Params<__half>&, BobStage);
template void launch_bob_sm90<__half, 128>(const Params<__half>&, BobStage);
}  // namespace attn
}  // namespace gg::kernels::cuda
