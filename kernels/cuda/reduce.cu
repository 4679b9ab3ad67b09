// Row reductions, row softmax and index_select / index_add on the GPU.
//
// reduce_last   x (rows, cols) contiguous -> out (rows,):  out[r] = sum_c x[r, c]  or  max_c x[r, c]
// softmax_last  x (rows, cols) contiguous -> y (rows, cols):
//                 m = max_c x[r, c],  s = sum_c exp(x[r, c] - m)
//                 softmax: y = exp(x - m) * (1 / s)      log-softmax: y = (x - m) - log s
//                 (not x - (m + log s): for large |m| that sum drops the low bits of log s)
// index_select  src (outer, dim_size, inner) -> dst (outer, n_idx, inner):  dst[o, j, i] = src[o, idx[j], i]
// index_add     src (outer, n_idx, inner) -> dst (outer, dim_size, inner):  dst[o, idx[j], i] += src[o, j, i]
//
// dtypes: f32, f64, bf16, f16 (index_select: any dtype, copied as raw bytes). Accumulation type
// Acc: double for f64, float otherwise; outputs are rounded back to the input dtype.
// An empty row reduces to the identity: sum 0, max -inf. NaN propagates through max.
//
// Work split for reduce_last (x is `aligned` when it starts on a 16-byte boundary):
//   cols == 1                 a device copy (the sum or max of one element is that element).
//   cols <= 1024, cols a multiple of V = 16 / sizeof(T), x aligned (so every row is):
//                             group kernel: a group of `width` lanes (next power of two >= the
//                             row's vectors, at most 32) owns a row and reads it in 16-byte vectors,
//                             kRowsPerGroup rows at once; a warp covers 32 / width adjacent rows.
//   other rows of <= kTileBytes / kMinTileRows bytes:
//                             tile kernel: a block stages tile_rows whole rows (one contiguous
//                             stretch of x) in shared memory with coalesced, if possible 16-byte,
//                             loads, then reduces them from shared memory, a group of tile_width
//                             lanes per row (one lane for rows of up to kTileColsPerLane elements).
//   longer rows               block kernel: a block of kBlockThreads owns a row, reads it in 16-byte
//                             vectors after a scalar head up to the first 16-byte boundary, and
//                             combines with cub::BlockReduce. With too few rows to fill the GPU each
//                             row is split over `splits` blocks writing Acc partials to scratch
//                             (stage 1), then the (rows, splits) partials go through the same kernel
//                             (stage 2). rows == 1 is the full reduction of a tensor: one wave of
//                             blocks streaming 16-byte loads.
// Lane groups combine with an xor butterfly, so every lane of a group ends with the row result.
// softmax_last: a lane group per row for cols <= 1024 (three passes: max, sum, write), else a block
// per row with cub::BlockReduce.
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <string>
#include <cub/block/block_reduce.cuh>

#include "core/cuda_check.cuh"
#include "core/cuda_runtime.h"
#include "core/error.h"
#include "kernels/cuda/kernels.h"

namespace gg::kernels::cuda {
using namespace ::gg::cuda::runtime;  // the stream, allocation and device queries
namespace {

constexpr int kBlockThreads = 256;    // block-per-row kernels
constexpr int kGroupThreads = 256;    // group-per-row and tile kernels (8 warps)
constexpr int kRowsPerGroup = 4;      // rows one group of the reduce group kernel reads at once
constexpr int kUnroll = 4;            // 16-byte vectors in flight per thread (block kernel)
constexpr int64_t kGroupMaxCols = 1024;
constexpr int64_t kTileBytes = 32 * 1024;  // shared memory of the tile kernel
constexpr int64_t kMaxTileRows = 1024;
constexpr int64_t kMinTileRows = 8;        // a multiple of 8, so every stretch starts 16-byte aligned
constexpr int64_t kTileColsPerLane = 16;   // elements of a row one lane of the tile kernel reads
constexpr int64_t kMaxBlocks = 65535;  // grid cap (also the gridDim.y limit); kernels grid-stride
constexpr unsigned kFullMask = 0xffffffffu;

// ------------------------------------------------------------------ element helpers

template <typename T> struct AccOf { using type = float; };
template <> struct AccOf<double> { using type = double; };

__device__ __forceinline__ float to_acc(float v) { return v; }
__device__ __forceinline__ double to_acc(double v) { return v; }
__device__ __forceinline__ float to_acc(__nv_bfloat16 v) { return __bfloat162float(v); }
__device__ __forceinline__ float to_acc(__half v) { return __half2float(v); }

__device__ __forceinline__ void store(float* p, float v) { *p = v; }
__device__ __forceinline__ void store(double* p, double v) { *p = v; }
__device__ __forceinline__ void store(__nv_bfloat16* p, float v) { *p = __float2bfloat16(v); }
__device__ __forceinline__ void store(__half* p, float v) { *p = __float2half(v); }

__device__ __forceinline__ float exp_acc(float v) { return expf(v); }
__device__ __forceinline__ double exp_acc(double v) { return exp(v); }
__device__ __forceinline__ float log_acc(float v) { return logf(v); }
__device__ __forceinline__ double log_acc(double v) { return log(v); }

struct SumOp {
  template <typename A>
  __host__ __device__ __forceinline__ A operator()(A a, A b) const { return a + b; }
};
struct MaxOp {  // NaN wins, as in torch.max
  template <typename A>
  __host__ __device__ __forceinline__ A operator()(A a, A b) const { return (b > a || b != b) ? b : a; }
};
template <typename A> __device__ __forceinline__ A identity(SumOp) { return A(0); }
template <typename A> __device__ __forceinline__ A identity(MaxOp) { return -static_cast<A>(INFINITY); }

// Reduce over aligned groups of `width` lanes (a power of two <= 32); every lane gets the result.
// All 32 lanes of the warp must call it together.
template <typename A, typename Op>
__device__ __forceinline__ A group_all_reduce(A v, int width, Op op) {
  for (int offset = width / 2; offset > 0; offset /= 2) v = op(v, __shfl_xor_sync(kFullMask, v, offset));
  return v;
}

// 16 bytes of T, loaded with one vector instruction.
template <typename T>
struct alignas(16) Vec {
  static constexpr int kSize = 16 / sizeof(T);
  T v[kSize];
};

// Elements before the first 16-byte boundary at p (at most n).
template <typename T>
__device__ __forceinline__ int64_t unaligned_head(const T* p, int64_t n) {
  const auto misalign = static_cast<int64_t>(reinterpret_cast<uintptr_t>(p) % 16);
  const int64_t head = misalign == 0 ? 0 : (16 - misalign) / static_cast<int64_t>(sizeof(T));
  return head < n ? head : n;
}

// Power of two >= cols, at most 32 (the lanes that share one row).
int group_width(int64_t cols) {
  int width = 1;
  while (width < cols && width < 32) width *= 2;
  return width;
}

// Lanes per row in the tile kernel: a power of two <= 32, enough for kTileColsPerLane elements each
// (short rows get a lane each: serial reads from shared memory beat shuffles there).
int tile_width(int64_t cols) {
  int width = 1;
  while (width < 32 && width * kTileColsPerLane < cols) width *= 2;
  return width;
}

int64_t ceil_div(int64_t a, int64_t b) { return (a + b - 1) / b; }

unsigned grid_size(int64_t blocks) { return static_cast<unsigned>(std::clamp<int64_t>(blocks, 1, kMaxBlocks)); }

// Stream-ordered scratch, freed (after the kernels that use it) when the launcher returns or throws.
struct Scratch {
  size_t bytes;
  int device;
  void* ptr;
  Scratch(size_t n, int dev) : bytes(n), device(dev), ptr(allocate(n, dev)) {}
  ~Scratch() { deallocate(ptr, bytes, device); }
  Scratch(const Scratch&) = delete;
  Scratch& operator=(const Scratch&) = delete;
};

// ------------------------------------------------------------------ reduce_last kernels

// Short aligned rows: a group of `width` lanes per row, kRowsPerGroup rows per group at once.
// Warp w, iteration t covers rows base .. base + groups * kRowsPerGroup - 1, where row
// base + k * groups + g belongs to group g (so each load instruction of the warp reads adjacent rows).
template <typename T, typename Acc, typename Op>
__global__ void __launch_bounds__(kGroupThreads)
    reduce_rows_group_kernel(const Vec<T>* __restrict__ x,  // (rows, units): (rows, cols) of T
                             T* __restrict__ out,           // (rows,)
                             int64_t rows, int64_t units, int width, Op op) {
  const int lane = static_cast<int>(threadIdx.x % 32);
  const int groups = 32 / width, group = lane / width, member = lane % width;
  const int64_t rows_per_warp = static_cast<int64_t>(groups) * kRowsPerGroup;
  const int64_t warp = (static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x) / 32;
  const int64_t n_warps = static_cast<int64_t>(gridDim.x) * blockDim.x / 32;

  for (int64_t base = warp * rows_per_warp; base < rows; base += n_warps * rows_per_warp) {  // warp-uniform
    // Main loop: each lane strides its rows by `width` vectors, kRowsPerGroup loads issued together.
    Acc acc[kRowsPerGroup];
#pragma unroll
    for (int k = 0; k < kRowsPerGroup; ++k) acc[k] = identity<Acc>(op);
    for (int64_t u = member; u < units; u += width) {
      Vec<T> buf[kRowsPerGroup];
#pragma unroll
      for (int k = 0; k < kRowsPerGroup; ++k) {
        const int64_t r = base + k * groups + group;
        if (r < rows) buf[k] = x[r * units + u];
      }
#pragma unroll
      for (int k = 0; k < kRowsPerGroup; ++k) {
        const int64_t r = base + k * groups + group;
        if (r < rows)
#pragma unroll
          for (int e = 0; e < Vec<T>::kSize; ++e) acc[k] = op(acc[k], to_acc(buf[k].v[e]));
      }
    }
    // Epilogue: combine the group's lanes, member 0 writes.
#pragma unroll
    for (int k = 0; k < kRowsPerGroup; ++k) {
      const Acc total = group_all_reduce(acc[k], width, op);
      const int64_t r = base + k * groups + group;
      if (member == 0 && r < rows) store(out + r, total);
    }
  }
}

// Other short rows: block tile t stages rows row0 .. row0 + tile_rows - 1, a contiguous stretch of
// x, in shared memory (16-byte loads when x is aligned: tile_rows is a multiple of kMinTileRows, so
// the stretch then starts aligned too), then reduces it: with width == 1 thread i takes tile rows
// i, i + kGroupThreads, ...; otherwise group g of warp w takes rows w * groups + g,
// w * groups + g + kWarps * groups, ... with `width` lanes each.
template <typename T, typename Acc, typename Op>
__global__ void __launch_bounds__(kGroupThreads)
    reduce_rows_tile_kernel(const T* __restrict__ x,  // (rows, cols)
                            T* __restrict__ out,      // (rows,)
                            int64_t rows, int64_t cols, int64_t tile_rows, int width, bool aligned, Op op) {
  extern __shared__ __align__(16) unsigned char smem[];
  T* tile = reinterpret_cast<T*>(smem);  // (tile_rows, cols)
  constexpr int V = Vec<T>::kSize;
  constexpr int kWarps = kGroupThreads / 32;
  const int lane = static_cast<int>(threadIdx.x % 32), warp = static_cast<int>(threadIdx.x / 32);
  const int groups = 32 / width, group = lane / width, member = lane % width;

  for (int64_t row0 = blockIdx.x * tile_rows; row0 < rows; row0 += gridDim.x * tile_rows) {
    // Prologue: load the stretch. Indices inside the tile fit in int (at most kTileBytes).
    const int n_rows = static_cast<int>(rows - row0 < tile_rows ? rows - row0 : tile_rows);
    const int n = n_rows * static_cast<int>(cols);
    const T* src = x + row0 * cols;
    int done = 0;
    if (aligned) {
      done = n / V * V;
#pragma unroll 4
      for (int i = threadIdx.x; i < n / V; i += kGroupThreads)
        reinterpret_cast<Vec<T>*>(tile)[i] = reinterpret_cast<const Vec<T>*>(src)[i];
    }
    for (int i = done + threadIdx.x; i < n; i += kGroupThreads) tile[i] = src[i];
    __syncthreads();

    // Main loop: reduce rows from shared memory.
    if (width == 1) {  // a thread per row
      for (int r = threadIdx.x; r < n_rows; r += kGroupThreads) {
        const T* row = tile + r * static_cast<int>(cols);
        Acc acc = identity<Acc>(op);
        for (int c = 0; c < static_cast<int>(cols); ++c) acc = op(acc, to_acc(row[c]));
        store(out + row0 + r, acc);
      }
    } else {  // a group of `width` lanes per row
      for (int base = warp * groups; base < n_rows; base += kWarps * groups) {  // warp-uniform
        const int r = base + group;
        Acc acc = identity<Acc>(op);
        if (r < n_rows)
          for (int c = member; c < static_cast<int>(cols); c += width) acc = op(acc, to_acc(tile[r * cols + c]));
        acc = group_all_reduce(acc, width, op);
        if (member == 0 && r < n_rows) store(out + row0 + r, acc);
      }
    }
    __syncthreads();  // the tile is refilled for the next stretch
  }
}

// Long rows: grid (splits, row blocks). Block (s, b) reduces its share of row r (r = b, b + gridDim.y,
// ...): 16-byte vectors v = s * kBlockThreads + tid + i * splits * kBlockThreads of the aligned body;
// split 0 also takes the unaligned head and the tail. Writes out[r * splits + s] (In -> Out; Out is
// Acc for stage-1 partials).
template <typename In, typename Out, typename Acc, typename Op>
__global__ void __launch_bounds__(kBlockThreads)
    reduce_rows_block_kernel(const In* __restrict__ x,  // (rows, cols)
                             Out* __restrict__ out,     // (rows, splits)
                             int64_t rows, int64_t cols, int splits, Op op) {
  using BlockReduce = cub::BlockReduce<Acc, kBlockThreads>;
  __shared__ typename BlockReduce::TempStorage temp;
  constexpr int V = Vec<In>::kSize;
  const int split = static_cast<int>(blockIdx.x);
  const int64_t step = static_cast<int64_t>(splits) * kBlockThreads;

  for (int64_t r = blockIdx.y; r < rows; r += gridDim.y) {
    const In* xr = x + r * cols;
    const int64_t head = unaligned_head(xr, cols);
    const int64_t n_vec = (cols - head) / V;
    const int64_t tail = head + n_vec * V;
    const auto* xv = reinterpret_cast<const Vec<In>*>(xr + head);
    Acc acc = identity<Acc>(op);

    // Prologue: the scalar head and tail.
    if (split == 0) {
      for (int64_t c = threadIdx.x; c < head; c += kBlockThreads) acc = op(acc, to_acc(xr[c]));
      for (int64_t c = tail + threadIdx.x; c < cols; c += kBlockThreads) acc = op(acc, to_acc(xr[c]));
    }

    // Main loop: kUnroll vectors loaded before any is used.
    int64_t v = static_cast<int64_t>(split) * kBlockThreads + threadIdx.x;
    for (; v + (kUnroll - 1) * step < n_vec; v += kUnroll * step) {
      Vec<In> buf[kUnroll];
#pragma unroll
      for (int k = 0; k < kUnroll; ++k) buf[k] = xv[v + k * step];
#pragma unroll
      for (int k = 0; k < kUnroll; ++k)
#pragma unroll
        for (int e = 0; e < V; ++e) acc = op(acc, to_acc(buf[k].v[e]));
    }
    for (; v < n_vec; v += step) {
      const Vec<In> buf = xv[v];
#pragma unroll
      for (int e = 0; e < V; ++e) acc = op(acc, to_acc(buf.v[e]));
    }

    // Epilogue: block reduction, thread 0 writes.
    const Acc total = BlockReduce(temp).Reduce(acc, op);
    if (threadIdx.x == 0) store(out + r * splits + split, total);
    __syncthreads();  // temp is reused by the next row
  }
}

// ------------------------------------------------------------------ softmax_last kernels

// Short rows (cols <= 1024): a group of `width` lanes per row; three passes (max, sum, write).
template <typename T, typename Acc>
__global__ void __launch_bounds__(kGroupThreads)
    softmax_rows_group_kernel(const T* __restrict__ x,  // (rows, cols)
                              T* __restrict__ y,        // (rows, cols)
                              int64_t rows, int64_t cols, int width, bool log_softmax) {
  const int lane = static_cast<int>(threadIdx.x % 32);
  const int groups = 32 / width, group = lane / width, member = lane % width;
  const int64_t warp = (static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x) / 32;
  const int64_t n_warps = static_cast<int64_t>(gridDim.x) * blockDim.x / 32;

  for (int64_t base = warp * groups; base < rows; base += n_warps * groups) {  // warp-uniform
    const int64_t r = base + group;
    const bool active = r < rows;       // idle groups still join the shuffles
    const int64_t n = active ? cols : 0;
    const T* xr = x + (active ? r : 0) * cols;
    T* yr = y + (active ? r : 0) * cols;

    Acc m = identity<Acc>(MaxOp{});
    for (int64_t c = member; c < n; c += width) m = MaxOp{}(m, to_acc(xr[c]));
    m = group_all_reduce(m, width, MaxOp{});

    Acc s = 0;
    for (int64_t c = member; c < n; c += width) s += exp_acc(to_acc(xr[c]) - m);
    s = group_all_reduce(s, width, SumOp{});

    if (log_softmax) {
      const Acc log_s = log_acc(s);
      for (int64_t c = member; c < n; c += width) store(yr + c, (to_acc(xr[c]) - m) - log_s);
    } else {
      const Acc inv = Acc(1) / s;
      for (int64_t c = member; c < n; c += width) store(yr + c, exp_acc(to_acc(xr[c]) - m) * inv);
    }
  }
}

// Long rows: one block per row; the two block reductions are broadcast through shared memory.
template <typename T, typename Acc>
__global__ void __launch_bounds__(kBlockThreads)
    softmax_rows_block_kernel(const T* __restrict__ x,  // (rows, cols)
                              T* __restrict__ y,        // (rows, cols)
                              int64_t rows, int64_t cols, bool log_softmax) {
  using BlockReduce = cub::BlockReduce<Acc, kBlockThreads>;
  __shared__ typename BlockReduce::TempStorage temp;
  __shared__ Acc row_max, row_sum;

  for (int64_t r = blockIdx.x; r < rows; r += gridDim.x) {
    const T* xr = x + r * cols;
    T* yr = y + r * cols;

    Acc m = identity<Acc>(MaxOp{});
    for (int64_t c = threadIdx.x; c < cols; c += kBlockThreads) m = MaxOp{}(m, to_acc(xr[c]));
    m = BlockReduce(temp).Reduce(m, MaxOp{});
    if (threadIdx.x == 0) row_max = m;
    __syncthreads();
    m = row_max;

    Acc s = 0;
    for (int64_t c = threadIdx.x; c < cols; c += kBlockThreads) s += exp_acc(to_acc(xr[c]) - m);
    s = BlockReduce(temp).Reduce(s, SumOp{});
    if (threadIdx.x == 0) row_sum = s;
    __syncthreads();
    s = row_sum;

    if (log_softmax) {
      const Acc log_s = log_acc(s);
      for (int64_t c = threadIdx.x; c < cols; c += kBlockThreads) store(yr + c, (to_acc(xr[c]) - m) - log_s);
    } else {
      const Acc inv = Acc(1) / s;
      for (int64_t c = threadIdx.x; c < cols; c += kBlockThreads) store(yr + c, exp_acc(to_acc(xr[c]) - m) * inv);
    }
    __syncthreads();  // temp, row_max and row_sum are reused by the next row
  }
}

// ------------------------------------------------------------------ index kernels

// Rows of `row_units` units of U (the widest of 16/8/4/2/1 bytes that divides the row and both
// base addresses). t indexes dst as (outer, n_idx, row_units).
template <typename U>
__global__ void index_select_kernel(const U* __restrict__ src,  // (outer, dim_size, row_units)
                                    U* __restrict__ dst,        // (outer, n_idx, row_units)
                                    const int64_t* __restrict__ idx,  // (n_idx,)
                                    int64_t outer, int64_t dim_size, int64_t n_idx, int64_t row_units) {
  const int64_t total = outer * n_idx * row_units;
  const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
  for (int64_t t = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; t < total; t += stride) {
    const int64_t u = t % row_units, oj = t / row_units;
    const int64_t j = oj % n_idx, o = oj / n_idx;
    dst[t] = src[(o * dim_size + idx[j]) * row_units + u];
  }
}

// t indexes src as (outer, n_idx, inner); repeated indices meet in atomicAdd.
template <typename T>
__global__ void index_add_kernel(const T* __restrict__ src,  // (outer, n_idx, inner)
                                 T* __restrict__ dst,        // (outer, dim_size, inner)
                                 const int64_t* __restrict__ idx,  // (n_idx,)
                                 int64_t outer, int64_t dim_size, int64_t n_idx, int64_t inner) {
  const int64_t total = outer * n_idx * inner;
  const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
  for (int64_t t = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; t < total; t += stride) {
    const int64_t i = t % inner, oj = t / inner;
    const int64_t j = oj % n_idx, o = oj / n_idx;
    atomicAdd(dst + (o * dim_size + idx[j]) * inner + i, src[t]);
  }
}

// ------------------------------------------------------------------ launchers

// Blocks per row for a long-row reduction: enough to fill one wave of the GPU, but at least
// kUnroll vectors per thread per block.
template <typename T, typename Acc, typename Op>
int choose_splits(int64_t rows, int64_t cols) {
  int device = current_device(), sms = 0, per_sm = 0;
  CUDA_CHECK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, device));
  CUDA_CHECK(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, reduce_rows_block_kernel<T, Acc, Acc, Op>,
                                                           kBlockThreads, 0));
  const int64_t wave = static_cast<int64_t>(sms) * std::max(per_sm, 1);
  if (rows >= wave) return 1;
  const int64_t by_work = cols / (static_cast<int64_t>(kBlockThreads) * Vec<T>::kSize * kUnroll);
  return static_cast<int>(std::max<int64_t>(1, std::min(ceil_div(wave, rows), by_work)));
}

template <typename T, typename Op>
void reduce_t(const ReduceParams& p, Op op) {
  using Acc = typename AccOf<T>::type;
  const T* x = static_cast<const T*>(p.x);
  T* out = static_cast<T*>(p.out);
  cudaStream_t s = cuda_stream();

  if (p.cols == 1) {  // sum and max of one element are that element
    CUDA_CHECK(cudaMemcpyAsync(out, x, static_cast<size_t>(p.rows) * sizeof(T), cudaMemcpyDeviceToDevice, s));
    return;
  }
  constexpr int V = Vec<T>::kSize;
  const bool aligned = reinterpret_cast<uintptr_t>(x) % 16 == 0;
  const int64_t row_bytes = p.cols * static_cast<int64_t>(sizeof(T));
  // cols == 0 takes the group kernel too: it reads nothing and writes the identity.
  if (p.cols <= kGroupMaxCols && p.cols % V == 0 && (aligned || p.cols == 0)) {
    const int64_t units = p.cols / V;
    const int width = group_width(units);
    const int64_t rows_per_block = static_cast<int64_t>(kGroupThreads / width) * kRowsPerGroup;
    reduce_rows_group_kernel<T, Acc, Op><<<grid_size(ceil_div(p.rows, rows_per_block)), kGroupThreads, 0, s>>>(
        reinterpret_cast<const Vec<T>*>(x), out, p.rows, units, width, op);
    CUDA_CHECK_LAUNCH();
    return;
  }
  if (row_bytes * kMinTileRows <= kTileBytes) {
    const int64_t tile_rows = std::min(kTileBytes / row_bytes, kMaxTileRows) / kMinTileRows * kMinTileRows;
    reduce_rows_tile_kernel<T, Acc, Op>
        <<<grid_size(ceil_div(p.rows, tile_rows)), kGroupThreads, static_cast<size_t>(tile_rows * row_bytes), s>>>(
            x, out, p.rows, p.cols, tile_rows, tile_width(p.cols), aligned, op);
    CUDA_CHECK_LAUNCH();
    return;
  }

  const int splits = choose_splits<T, Acc, Op>(p.rows, p.cols);
  if (splits == 1) {
    reduce_rows_block_kernel<T, T, Acc, Op>
        <<<dim3(1, grid_size(p.rows)), kBlockThreads, 0, s>>>(x, out, p.rows, p.cols, 1, op);
    CUDA_CHECK_LAUNCH();
    return;
  }
  // Stage 1: (rows, splits) Acc partials; stage 2: reduce them per row into out.
  Scratch partials(static_cast<size_t>(p.rows) * splits * sizeof(Acc), current_device());
  Acc* part = static_cast<Acc*>(partials.ptr);
  reduce_rows_block_kernel<T, Acc, Acc, Op>
      <<<dim3(splits, grid_size(p.rows)), kBlockThreads, 0, s>>>(x, part, p.rows, p.cols, splits, op);
  CUDA_CHECK_LAUNCH();
  reduce_rows_block_kernel<Acc, T, Acc, Op>
      <<<dim3(1, grid_size(p.rows)), kBlockThreads, 0, s>>>(part, out, p.rows, splits, 1, op);
  CUDA_CHECK_LAUNCH();
}

template <typename T>
void reduce_dispatch_op(const ReduceParams& p) {
  if (p.op == ReduceOp::sum) reduce_t<T>(p, SumOp{});
  else reduce_t<T>(p, MaxOp{});
}

template <typename T>
void softmax_t(const SoftmaxParams& p) {
  using Acc = typename AccOf<T>::type;
  const T* x = static_cast<const T*>(p.x);
  T* y = static_cast<T*>(p.y);
  cudaStream_t s = cuda_stream();
  if (p.cols <= kGroupMaxCols) {
    const int width = group_width(p.cols);
    const int64_t rows_per_block = kGroupThreads / width;
    softmax_rows_group_kernel<T, Acc>
        <<<grid_size(ceil_div(p.rows, rows_per_block)), kGroupThreads, 0, s>>>(x, y, p.rows, p.cols, width, p.log);
  } else {
    softmax_rows_block_kernel<T, Acc><<<grid_size(p.rows), kBlockThreads, 0, s>>>(x, y, p.rows, p.cols, p.log);
  }
  CUDA_CHECK_LAUNCH();
}

template <typename U>
void index_select_units(const IndexParams& p, int64_t row_units) {
  const int64_t total = p.outer * p.n_idx * row_units;
  index_select_kernel<U><<<grid_size(ceil_div(total, kBlockThreads)), kBlockThreads, 0, cuda_stream()>>>(
      static_cast<const U*>(p.src), static_cast<U*>(p.dst), p.idx, p.outer, p.dim_size, p.n_idx, row_units);
  CUDA_CHECK_LAUNCH();
}

template <typename T>
void index_add_t(const IndexParams& p) {
  const int64_t total = p.outer * p.n_idx * p.inner;
  index_add_kernel<T><<<grid_size(ceil_div(total, kBlockThreads)), kBlockThreads, 0, cuda_stream()>>>(
      static_cast<const T*>(p.src), static_cast<T*>(p.dst), p.idx, p.outer, p.dim_size, p.n_idx, p.inner);
  CUDA_CHECK_LAUNCH();
}

std::string unsupported(const char* op, DType t) {
  return std::string("gg::") + op + ": CUDA supports f32, f64, bf16 and f16, got " + dtype_name(t);
}

}  // namespace

void reduce_last(const ReduceParams& p) {
  if (p.rows == 0) return;
  switch (p.dtype) {
    case DType::f32: return reduce_dispatch_op<float>(p);
    case DType::f64: return reduce_dispatch_op<double>(p);
    case DType::bf16: return reduce_dispatch_op<__nv_bfloat16>(p);
    case DType::f16: return reduce_dispatch_op<__half>(p);
    default: throw DTypeError(unsupported("reduce", p.dtype));
  }
}

void softmax_last(const SoftmaxParams& p) {
  if (p.rows == 0 || p.cols == 0) return;
  switch (p.dtype) {
    case DType::f32: return softmax_t<float>(p);
    case DType::f64: return softmax_t<double>(p);
    case DType::bf16: return softmax_t<__nv_bfloat16>(p);
    case DType::f16: return softmax_t<__half>(p);
    default: throw DTypeError(unsupported("softmax", p.dtype));
  }
}

void index_select(const IndexParams& p) {
  if (p.outer == 0 || p.n_idx == 0 || p.inner == 0) return;
  const auto row_bytes = static_cast<int64_t>(p.inner * dtype_size(p.dtype));
  const auto addresses = reinterpret_cast<uintptr_t>(p.src) | reinterpret_cast<uintptr_t>(p.dst);
  int64_t unit = 16;
  while (row_bytes % unit != 0 || addresses % static_cast<uintptr_t>(unit) != 0) unit /= 2;
  const int64_t row_units = row_bytes / unit;
  switch (unit) {
    case 16: return index_select_units<uint4>(p, row_units);
    case 8: return index_select_units<uint64_t>(p, row_units);
    case 4: return index_select_units<uint32_t>(p, row_units);
    case 2: return index_select_units<uint16_t>(p, row_units);
    default: return index_select_units<uint8_t>(p, row_units);
  }
}

void index_add(const IndexParams& p) {
  switch (p.dtype) {
    case DType::f32: case DType::f64: case DType::bf16: case DType::f16: break;
    default: throw DTypeError(unsupported("index_add", p.dtype));
  }
  if (p.outer == 0 || p.n_idx == 0 || p.inner == 0) return;
  switch (p.dtype) {
    case DType::f32: return index_add_t<float>(p);
    case DType::f64: return index_add_t<double>(p);
    case DType::bf16: return index_add_t<__nv_bfloat16>(p);
    default: return index_add_t<__half>(p);
  }
}

}  // namespace gg::kernels::cuda
