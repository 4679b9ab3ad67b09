// The CUDA attention layer's choices in one place: which kernel family a call takes (choose_path,
// the same rule for all three levels) and the tile constants of every kernel (one traits struct
// per kernel family and level, in the manner of FlashAttention-3's hopper/tile_size.h).
//
// Three paths:
//
//   kSm90    sm_90a code built (CMAKE_CUDA_ARCHITECTURES has 90a), a compute capability 9.x
//            device, bf16/f16, d in {64, 128}, 16-byte aligned rows (and, for the forward, a
//            positive scale: its softmax takes the row maximum over the raw scores). Warp-
//            specialised kernels: one producer warpgroup copies tiles by TMA into a ring of
//            mbarrier-guarded stages, two or three consumer warpgroups run warpgroup MMAs
//            (wgmma) on them. The backward at d = 64 and the BoB at d = 64 with all three
//            cotangents are fused single key sweeps. Grouped heads, Nq != Nk and windows run
//            on the kernels' kOpts instances (the general mask, bands of tiles, key sweeps
//            over the group's query heads).
//   kSm80    bf16/f16, d in {32, 64, 128}, 16-byte aligned rows, where kSm90 does not apply
//            (A100-class cards, d = 32 anywhere; kOpts instances for the options too):
//            mma.sync.m16n8k16, cp.async double buffering.
//   kGeneric everything else (f64, exact f32, other head dims; always under the general
//            mask) and the GPU reference of the tests: scalar FMA in Acc (double for f64,
//            float otherwise).
//
// Tests may force kSm80 or kGeneric (attention/testing.h, testing::ScopedAttentionPath).
#pragma once
#include <array>
#include <cstdint>

#include "kernels/cuda/attention/testing.h"
#include "kernels/params.h"

namespace gg::kernels::cuda::attn {

// ------------------------------------------------------------------------ path choice

enum class Path { kGeneric, kSm80, kSm90 };
enum class Level { kFwd, kBwd, kBob };

// The tensors of a call whose rows the tensor-core kernels read or write, per level.
inline std::array<const void*, 5> row_tensors(const AttentionFwdArgs& a) { return {a.Q, a.K, a.V, a.O, a.L}; }
inline std::array<const void*, 8> row_tensors(const AttentionBwdArgs& a) {
  return {a.Q, a.K, a.V, a.O, a.dO, a.dQ, a.dK, a.dV};
}
inline std::array<const void*, 12> row_tensors(const AttentionBobArgs& a) {
  return {a.Q, a.K, a.V, a.O, a.dO, a.Qt, a.Kt, a.Vt, a.gQ, a.gK, a.gV, a.gdO};
}

// Whether the tensor-core kernels apply: bf16/f16, d in {32, 64, 128}, every row 16-byte aligned.
inline bool tc_aligned(const void* p) { return p == nullptr || reinterpret_cast<uintptr_t>(p) % 16 == 0; }
template <typename Args>
bool tc_supported(const Args& a) {
  const int64_t d = a.shape.d;
  if (!(a.dtype == DType::bf16 || a.dtype == DType::f16)) return false;
  if (d != 32 && d != 64 && d != 128) return false;
  for (const void* p : row_tensors(a))
    if (!tc_aligned(p)) return false;
  return true;
}

// Every family takes grouped heads, Nq != Nk and windows (Params::opts selects the kernels' kOpts
// instances); the choice depends on dtype, head dim, alignment and the device only. Empty shapes
// run generic.
template <typename Args>
Path choose_path(const Args& a, Level level) {
  using testing::AttentionPath;
  const AttentionPath forced = testing::attention_path();
  const bool empty = a.shape.N < 1 || a.shape.keys() < 1 || a.shape.B * a.shape.H < 1;
  if (forced == AttentionPath::kGeneric || empty || !tc_supported(a)) return Path::kGeneric;
  const bool sm90 = forced == AttentionPath::kAuto && testing::sm90_path_available() &&
                    (a.shape.d == 64 || a.shape.d == 128) && (level != Level::kFwd || a.shape.scale > 0);
  return sm90 ? Path::kSm90 : Path::kSm80;
}

// ------------------------------------------------------------------------ generic kernels

// 32 own rows x 8 lanes per block; score dots from staged chunks of 32 columns; output products
// reading the other side's rows from global memory; d split over grid.y in 64-column slices.
struct GenericTraits {
  static constexpr int kThreads = 256;
  static constexpr int kRows = 32;   // own rows per block
  static constexpr int kOther = 32;  // other rows per tile
  static constexpr int kLanes = 8;   // threads per own row (consecutive lanes of one warp)
  static constexpr int kPerThread = kOther / kLanes;  // score entries per thread per tile
  static constexpr int kChunk = 32;  // columns of d staged per score step
  static constexpr int kStride = kChunk + 1;          // padded smem row (bank spread)
  static constexpr int kCols = 64;   // output columns per block (grid y splits d)
  static constexpr int kColsPerThread = kCols / kLanes;
  static constexpr int kStage = kRows * kStride;      // one staged operand chunk (Acc elements)
  static constexpr int kTile = kRows * kStride;       // one coefficient tile (own x other)
  // Blocks per SM that a kernel's registers leave room for (__launch_bounds__): `blocks` with f32
  // accumulators (16-bit and f32 elements), one in f64.
  template <typename T>
  static constexpr int min_blocks(int blocks) { return sizeof(T) <= 4 ? blocks : 1; }
  static_assert(kRows * kLanes == kThreads, "one thread group of kLanes per own row");
  static_assert(kRows == kOther, "staging helper assumes square tiles");
  static_assert(kLanes == 8, "row reductions use shuffles over 8 lanes");
  static_assert(kChunk == 32 && kRows == 32, "staging index math uses 32 x 32");

  // Shared memory of each generic kernel, carved by GenBlock in the kernel's order: `stages`
  // staged operand chunks (GenBlock::stage) and `tiles` coefficient tiles (GenBlock::tile).
  // launch_generic sizes the memory from these; a kernel that carves another chunk or tile must
  // count it here.
  struct Smem {
    int stages, tiles;
  };
  static constexpr Smem kFwdSmem{3, 0};        // chunks of Q, K; the P tile, staged as a chunk
  static constexpr Smem kBwdDkdvSmem{4, 2};    // chunks of K, V, Q, dO; tiles Pᵀ, dSᵀ
  static constexpr Smem kBwdDqSmem{4, 1};      // chunks of Q, dO, K, V; tile dS
  static constexpr Smem kBobPass1Smem{7, 5};   // chunks of Q, dO, Qt, K, V, Kt, Vt; tiles C1, P, P∘dP, P∘G, dS
  static constexpr Smem kBobPass2Smem{7, 3};   // chunks of K, V, Kt, Vt, Q, dO, Qt; tiles S̄ᵀ, dSᵀ, dP̄ᵀ
};

// ------------------------------------------------------------------------ sm_80 (mma.sync)

// Per head dim, every level. kBlockM: own rows per block (16 per warp). kBlockN: other rows per
// pipeline stage. kStride: smem row length in elements, padded by 16 bytes so that the 8 row
// addresses of an ldmatrix hit distinct bank groups.
template <int kD>
struct Sm80Traits {
  static_assert(kD == 32 || kD == 64 || kD == 128, "sm_80 path: d in {32, 64, 128}");
  static constexpr int kWarps = 4;
  static constexpr int kThreads = 32 * kWarps;
  static constexpr int kBlockM = 16 * kWarps;
  static constexpr int kBlockN = kD <= 64 ? 64 : 32;
  static constexpr int kStride = kD + 8;
  static constexpr int kStages = 2;  // other-side tiles, double-buffered (sm80_pipeline)
  static constexpr int kTileElems = kBlockN * kStride;  // one other-side operand, one stage
  static constexpr int kOwnElems = kBlockM * kStride;   // one own-side operand
  // Shared memory of a kernel with `own` own-side operands, `other` other-side operands and
  // `scalars` other-side row scalars (f32) per stage, carved in that order.
  template <typename T>
  static constexpr size_t smem_bytes(int own, int other, int scalars = 0) {
    return (own * kOwnElems + kStages * other * kTileElems) * sizeof(T) + kStages * scalars * kBlockN * sizeof(float);
  }
  // BoB pass 1 holds four kCols-wide accumulators per thread: d = 128 is split over the grid.
  static constexpr int kBobCols = kD <= 64 ? kD : 64;
  static_assert(kBlockN % 16 == 0 && kBlockM % 16 == 0, "16-row sub-tiles");
  static_assert((kStride * 2) % 16 == 0, "cp.async / ldmatrix rows are 16-byte aligned");
};

// ------------------------------------------------------------------------ sm_90a (wgmma, TMA)

// Forward: 1 + kConsumers warpgroups, 64 query rows per consumer; three consumers at d = 64
// (160 registers each, no turns), two at d = 128 (240 registers, products issued in turns).
template <int kD>
struct FwdSm90Traits {
  static_assert(kD == 64 || kD == 128, "sm_90a forward: d in {64, 128}");
  static constexpr int kConsumers = kD == 64 ? 3 : 2;
  static constexpr bool kPingPong = kConsumers == 2;
  static constexpr int kThreads = 128 * (1 + kConsumers);  // producer + consumer warpgroups
  static constexpr int kBlockM = 64 * kConsumers;          // query rows per block
  static constexpr int kBlockN = 128;                      // keys per tile
  static constexpr int kStages = 3;
  static constexpr int kProducerRegs = 24, kConsumerRegs = kConsumers == 2 ? 240 : 160;
  static_assert(128 * kProducerRegs + 128 * kConsumers * kConsumerRegs <= 65536, "register file");
  static constexpr int kQElems = 64 * kD;  // per consumer
  static constexpr int kTileElems = kBlockN * kD;
  static constexpr size_t kBarBytes = 128;  // 2 + 4·kStages mbarriers of 8 bytes
  static constexpr size_t kSmemBytes = (kConsumers * kQElems + 2 * kStages * kTileElems) * 2 + kBarBytes;
  static constexpr int kMinSplitTiles = 16;  // tail split: pieces of at least 16 key tiles
};

// The warp-specialised sweeps of the backward and the BoB (sweeps.cuh): blocks of kBlock own
// rows, a producer warpgroup and two consumer warpgroups of kConsumerRows rows each; registers
// move from the producer to the consumers (setmaxnreg).
struct SweepSm90Traits {
  static constexpr int kConsumers = 2;
  static constexpr int kConsumerRows = 64;                   // own rows per consumer warpgroup
  static constexpr int kBlock = kConsumers * kConsumerRows;  // own rows per block
  static constexpr int kThreads = 128 * (1 + kConsumers);    // producer + consumer warpgroups
  static constexpr int kProducerRegs = 24, kConsumerRegs = 240;
  static_assert(128 * kProducerRegs + 128 * kConsumers * kConsumerRegs <= 65536, "register file");
};

// Backward: the sweeps' blocks, tiles of 64 rows. The dK dV sweep and the dQ sweep (d = 128)
// take turns (ping-pong); the fused sweep (d = 64) does not.
struct BwdSm90Traits : SweepSm90Traits {
  static constexpr int kBlockM = kBlock;
  static constexpr int kBlockN = 64;  // other rows per tile
  static constexpr int kStages = 3;
  static constexpr bool kPingPongDkdv = true, kPingPongDq = true, kPingPongFused = false;
};

// BoB key sweeps (pass 2; the fused sweep at d = 64): blocks of 128 keys, query tiles of 32 rows
// (four score tiles live at once), three stages at d = 128 to fit its own rows in shared memory.
template <int kD>
struct BobKeySm90Traits : SweepSm90Traits {
  static_assert(kD == 64 || kD == 128, "sm_90a BoB: d in {64, 128}");
  static constexpr int kBlockM = kBlock, kBlockN = 32, kStages = kD == 64 ? 4 : 3;
};

// BoB query passes (E and F first: pass 0, pass 1; the fused BoB's pass 0): blocks of 128 query
// rows, key tiles of 32. d = 64: the own rows as register A operands of the score products and
// sub-tiles of 32 keys; d = 128: own rows from shared memory, pass 1's sub-tiles of 16 keys.
template <int kD>
struct BobQuerySm90Traits : SweepSm90Traits {
  static_assert(kD == 64 || kD == 128, "sm_90a BoB: d in {64, 128}");
  static constexpr int kBlockM = kBlock, kBlockN = 32, kStages = 3;
  static constexpr bool kRegOwn = kD == 64;
  static constexpr int kSubOut = kD == 64 ? 32 : 16;  // keys per score sub-tile in pass 1
  static constexpr int kSubEF = 32;                   // in pass 0 (no accumulators)
  static_assert(kBlockN % kSubOut == 0 && kBlockN % kSubEF == 0, "whole sub-tiles");
};

}  // namespace gg::kernels::cuda::attn
