// CUDA kernels: the same functions and parameter structs as kernels/cpu/kernels.h, run on the
// library's stream for the current device (kernels/cuda/runtime.h). This header includes no CUDA
// headers, so host code that dispatches here compiles with the plain C++ compiler.
#pragma once
#include "kernels/params.h"

namespace gg::kernels::cuda {

void copy_strided(const CopyParams& p);  // both pointers on the device
void fill(const FillParams& p);
void random(const RandomParams& p);      // the same numbers as the CPU kernel for the same seed
void arange(const ArangeParams& p);
void unary(const UnaryParams& p);
void binary(const BinaryParams& p);
void where(const WhereParams& p);
void reduce_last(const ReduceParams& p);
void matmul(const MatmulParams& p);      // cuBLAS; a_offsets/b_offsets are host arrays
void softmax_last(const SoftmaxParams& p);
void index_select(const IndexParams& p);  // idx is a device pointer
void index_add(const IndexParams& p);

// Fused attention (kernels/cuda/attention_*.cu). L is f32 for bf16/f16 inputs, else the input
// dtype; scratch comes from the stream-ordered allocator.
void attention_fwd(const AttentionArgs& a);
void attention_bwd(const AttentionArgs& a);
void attention_bwd_bwd(const AttentionArgs& a);

// Whether the Hopper (sm_90a, wgmma) attention kernels may be used where they apply: on by
// default; off makes every call take the mma.sync path (for tests and A/B benchmarks). The
// environment variable GG_ATTENTION_WGMMA=0 turns it off at start-up.
void set_attention_wgmma(bool enabled);
bool attention_wgmma_enabled();
bool attention_wgmma_built();   // sm_90a code is in this build (CMAKE_CUDA_ARCHITECTURES has 90a)
bool attention_wgmma_active();  // built, enabled, and the current device is compute capability 9.x
int compute_capability_major();  // of the current device
// The warp-specialised Hopper kernels (TMA producer warpgroup, two consumer warpgroups), where the
// Hopper kernels apply: the forward, the backward, the BoB's query-parallel passes and BoB pass 2,
// at d in {64, 128}. On by default; off, the one-warpgroup Hopper kernels run
// (for tests and A/B benchmarks).
// GG_ATTENTION_WS=0 turns them off at start-up.
void set_attention_ws(bool enabled);
bool attention_ws_enabled();
// Ping-pong of the two consumer warpgroups in the warp-specialised kernels (they issue their
// tensor-core products in turns instead of as soon as each is ready), per kernel: a mask of the
// bits below. By default the forward and backward (one turn per tile, pipelined row loops), where
// the turns gained a little on the H200; in the BoB kernels (two turns per tile, which couples the
// consumers) they lost (docs/kernel-notes.md, v16; measured before v18 made their chains of
// products whole). GG_ATTENTION_PINGPONG=<mask> sets it at start-up. For tests and A/B benchmarks.
enum PingPongKernels : int {
  kPingPongFwd = 1,        // forward
  kPingPongDkdv = 2,       // backward dK dV
  kPingPongDq = 4,         // backward dQ
  kPingPongBobPass1 = 8,   // BoB split pass 1, or E/F pass 0
  kPingPongBobEF1 = 16,    // BoB E/F pass 1
  kPingPongBobPass2 = 32,  // BoB pass 2
  kPingPongBwdFused = 64,  // the fused backward (set_attention_fused)
  kPingPongAll = 127,
};
void set_attention_ping_pong(int mask);
int attention_ping_pong_mask();
// The tail split (not causal): where the blocks of a kernel, one per SM, leave a last wave that
// fills only part of the SMs, each unit of that wave is swept by several blocks over parts of its
// other side's tiles. In the warp-specialised forward (d = 64, 128) the pieces write unnormalised
// rows that a merge kernel combines in a fixed order (deterministic). In the warp-specialised key
// sweeps (attention_sweeps.cuh, TailSplitRun) they put their dK, dV (grad_K, grad_V) rows into an
// f32 scratch: the dK dV sweep and BoB pass 2 (d = 64, 128), and the fused backward and fused BoB
// in deterministic mode, store each piece's rows and sum them in order; with
// set_attention_deterministic(false) the fused sweeps' pieces add them atomically, so those rows
// then vary in their last bits from run to run, like dQ. Split rows are not bitwise equal to
// unsplit ones. sms: -1 (default) plans for the device's SM count, 0 turns it off, n > 0
// plans as if the device had n SMs (tests).
// GG_ATTENTION_TAIL_SPLIT=<n> sets it at start-up.
void set_attention_tail_split(int sms);
int attention_tail_split();
// The split for `units` units of `tiles` query tiles each on `sms` SMs: blocks [0, whole) sweep
// whole units; each of the last split_units units is swept by `pieces` blocks (pieces = 1,
// split_units = 0: no split). Pieces of at least min_tiles tiles; among 2..16 pieces per unit the
// count whose last round of pieces is shortest, counting about two tiles' work for each piece's
// start (its own rows and the first stages), if at least 10% shorter than the unsplit last wave.
struct TailSplitPlan {
  int whole, pieces, split_units;
};
TailSplitPlan plan_tail_split(int64_t units, int tiles, bool causal, int sms, int min_tiles = 8);
// The fused sweeps (on by default; GG_ATTENTION_FUSED=0 turns them off at start-up): the Hopper
// backward at d = 64 (warp-specialised) computes dK, dV and dQ in one sweep (5 products per tile
// instead of the two sweeps' 7), each key block adding its part of dQ into an f32 buffer; the
// Hopper BoB at d = 64 with all three cotangents runs one fused key sweep after pass 0 (16
// products instead of 21), adding grad_Q and grad_dO the same way (grad_K, grad_V are the three-
// pass BoB's, as dK, dV are the two sweeps'). Off, the two-sweep backward and the three-pass BoB
// run (for tests and A/B benchmarks). How the parts are added: set_attention_deterministic.
void set_attention_fused(bool enabled);
bool attention_fused_enabled();
// The position of key unit blk (of per_head units of 128 keys in its head, launched in the order
// blk = per_head - 1, ..., 0) among the units that add a part to the buffer tile t (rows
// [t·tile_rows, (t + 1)·tile_rows)) when the fused sweeps' additions are ordered: its launch rank
// per_head - 1 - blk, counted (causal) from the first unit that reaches the tile, the units blk <=
// t·tile_rows / 128 (those whose keys start at or before the tile's last query). Each tile's units
// take the positions 0, 1, ... in launch order (tests: OrderedAddPositions).
#if defined(__CUDACC__)
__host__ __device__
#endif
constexpr int ordered_add_position(int blk, int per_head, int t, int tile_rows, bool causal) {
  const int rank = per_head - 1 - blk;
  if (!causal) return rank;
  const int last = t * tile_rows / 128 < per_head - 1 ? t * tile_rows / 128 : per_head - 1;
  return rank - (per_head - 1 - last);
}
// Whether every attention kernel must be bitwise reproducible (the default). On, the fused sweeps'
// blocks add their parts of a tile one after another, in the order they were launched in (a
// counter per tile; attention_sweeps.cuh, order_additions), and the tail split's pieces store
// their rows separately, so every sum has the same order in every run. Off, they add atomically
// as they finish, with no waiting: dQ (grad_Q, grad_dO) may then differ in their last bits from
// run to run, as in PyTorch, whose flash and cuDNN backwards add dQ atomically.
// GG_ATTENTION_DETERMINISTIC=0 turns it off at start-up.
void set_attention_deterministic(bool deterministic);
bool attention_deterministic();
// Pass-1 schedule of the Hopper BoB: -1 (default) picks as measured (E and F first at d = 128,
// and at d = 64 with the warp-specialised kernels on; else the split pass 1); 0 always the split
// pass 1; 1 always E and F first. GG_ATTENTION_BOB_EF=0 or 1 sets it at start-up. For tests and
// A/B benchmarks.
void set_attention_bob_ef_mode(int mode);
int attention_bob_ef_mode();

}  // namespace gg::kernels::cuda
