// Differentiable collectives, data-parallel helpers and sequence-parallel attention.
//
// Semantics of a gradient across ranks: each rank differentiates its own scalar (or takes
// grad_outputs for its own outputs), and the gradient it gets for its own inputs is that of the
// SUM over ranks of those scalars. A collective's backward is the collective that is its
// adjoint, written with these same functions, so create_graph records it and grad-of-grad works:
//
//   y = all_reduce(x)              (y = Σ_r x_r on every rank)     backward: all_reduce
//   y = all_gather(x, dim)         (cat of the x_r)                backward: reduce_scatter
//   y = reduce_scatter(x, dim)     (piece r of Σ_s x_s)            backward: all_gather
//   y = broadcast(x, root)         (x_root on every rank)          backward: Σ_s g_s to root, 0 elsewhere
//   y = sendrecv(x, dst, src)      (x of rank src)                 backward: sendrecv(g, src, dst)
//
// Every rank must run the same program: the same collectives in the same order, forward and
// backward. In particular, when one rank's backward reaches a collective, every rank's must
// (each rank differentiates a scalar that depends on the collective's output).
#pragma once
#include <cstdint>
#include <vector>

#include "../autograd/engine.h"
#include "../core/tensor.h"
#include "group.h"
#include "../ops/ops.h"

namespace gg::dist {

// ---------------------------------------------------------------- differentiable collectives
Tensor all_reduce(Group& group, const Tensor& x);       // sum over ranks
Tensor all_reduce_mean(Group& group, const Tensor& x);  // all_reduce(x) / size
// Along `dim`, rank order; the ranks' sizes along `dim` may differ (`sizes` receives them).
Tensor all_gather(Group& group, const Tensor& x, int64_t dim, std::vector<int64_t>* sizes = nullptr);
// Piece `rank` (along `dim`, lengths `sizes`, or equal pieces when empty) of the sum over ranks.
Tensor reduce_scatter(Group& group, const Tensor& x, int64_t dim, const std::vector<int64_t>& sizes = {});
Tensor broadcast(Group& group, const Tensor& x, int root);
// Sends x to rank `dst` and returns rank `src`'s x (same shape and dtype on every rank): one
// step of a ring shift (dst = rank + 1, src = rank - 1, modulo size). The ranks' (dst, src)
// must be a permutation and its inverse (rank dst's src is this rank), as in a ring; the
// gradient then goes back the other way, sendrecv(g, src, dst). At least two ranks.
Tensor sendrecv(Group& group, const Tensor& x, int dst, int src);

// ---------------------------------------------------------------- data parallel
// The elementwise sum over ranks of every tensor of the list, in one collective (the list is
// packed into one buffer per dtype). Not recorded on the tape: for gradients after a backward.
TensorList all_reduce_coalesced(Group& group, const TensorList& xs);
// all_reduce_coalesced / size: the gradients of the mean of the ranks' losses. When the ranks'
// losses are weighted shares of a global loss (uneven shards), scale each loss by its share
// and use all_reduce_coalesced instead.
TensorList average_gradients(Group& group, const TensorList& grads);
// gg::grad(outputs, inputs, grad_outputs, options), then the sum over ranks of each gradient
// (divided by the rank count with average), the sums started while the backward runs: the
// inputs are cut into buckets of at most bucket_bytes (one dtype and device each; in reverse
// order, as a backward reaches the last parameters first, each input in one bucket), and a
// bucket's all-reduce starts (Group::start_all_reduce) as soon as its gradients and those of the
// buckets before it are complete. On NcclGroup that all-reduce runs on its own stream beside the
// rest of the backward. The result equals grad followed by all_reduce_coalesced (or
// average_gradients), bitwise on ThreadGroup. The ranks' buckets are compared once, before the
// backward (DistError on every rank where they differ). With options.allow_unused an unused
// input counts as zeros (an input no rank uses gets zeros). Not recorded on the tape:
// options.create_graph must be false (dist::all_reduce is the differentiable sum).
// options.on_gradient, if set, is called too.
TensorList grad_all_reduce(Group& group, const TensorList& outputs, const TensorList& inputs,
                           const TensorList& grad_outputs = {}, const GradOptions& options = {}, bool average = true,
                           int64_t bucket_bytes = int64_t{25} << 20);

// ---------------------------------------------------------------- sequence parallel
// How a sequence of N rows is cut among P ranks.
//   contiguous: rank r holds one block of rows, in rank order (blocks may differ in length).
//   zigzag: the sequence is cut into 2P chunks (lengths differing by at most one, the longer
//     first); rank r holds chunks r and 2P-1-r, concatenated. Under a causal mask every rank
//     then has about the same number of (query, key) pairs to compute.
enum class Sharding { contiguous, zigzag };

// Rank `rank`'s zig-zag shard of the full tensor x along `dim` (differentiable).
Tensor zigzag_shard(const Tensor& x, int64_t rank, int64_t world_size, int64_t dim);
// The inverse: `gathered` is the ranks' zig-zag shards concatenated along `dim` in rank order
// (as all_gather returns them); the result is the sequence in its natural order.
Tensor zigzag_unshard(const Tensor& gathered, int64_t world_size, int64_t dim);

// How dist::attention moves K and V between ranks (docs/distributed.md §5).
//   all_gather: one differentiable all-gather of the stacked K and V, then each query chunk
//     against all the keys it can see.
//   ring: P - 1 shifts pass the stacked (K, V) block of each rank around the ring; each rank
//     attends its query chunks to the block it holds (gg::attention_forward, which also returns
//     the row log-sum-exp) and merges the partial results by their log-sum-exps as they come.
//     The forward and the backward are one recorded node each; the backward and the BoB send
//     the blocks around again (the BoB twice, split at its row scalars:
//     gg::attention_bob_row_sums, gg::attention_bob_from_row_sums).
// Orders 1 and 2 run the fused kernels in both. all_gather differentiates to any order (3 and up
// through the composite) and keeps O(N·d) per rank (the gathered K and V); the ring keeps O(n·d)
// per rank at orders 0-2 and stops there: a third backward pass through it raises an
// AutogradError on every rank before any shift (dist/attention.cpp, check_order).
enum class Schedule { all_gather, ring };

// Sequence-parallel gg::attention. q (B, Hq, n, d), k and v (B, Hkv, n, d) are this rank's
// rows of the global (B, H, N, d) tensors, cut the same way for q, k and v (`sharding`); the
// result is this rank's rows of gg::attention(Q, K, V, options) over the whole sequence. Every
// rank must hold at least one row. The options mean what they mean for the global Nq = Nk = N
// attention (causal, windows, scale; grouped-query heads as in gg::attention).
//
// Each (query chunk, key chunk) pair runs the fused op against the keys of the chunk that the
// query rows can see, with the mask re-aligned to the narrowed keys (dist/attention.cpp).
// Cross-rank traffic at every order: all_gather, the gathers and reduce-scatters of K- and
// V-shaped tensors; ring, point-to-point shifts of (K, V)-block-shaped tensors.
Tensor attention(Group& group, const Tensor& q, const Tensor& k, const Tensor& v, const AttentionOptions& options = {},
                 Sharding sharding = Sharding::contiguous, Schedule schedule = Schedule::all_gather);

}  // namespace gg::dist
