// Sequence-parallel attention: the all-gather and ring schedules (dist/ops.h, docs/distributed.md §5).
//
// Chunks and pairs. A rank's rows are one chunk (contiguous) or two (zig-zag); so are the keys
// of a rank's block. Each (query chunk, key chunk) pair runs the fused op once; the all-gather
// schedule sees all N keys as one chunk.
//
// Narrowing a pair. Globally Nq = Nk = N, and query g sees keys j with
//   g - wl <= j <= g + wr          (wl, wr: the windows; causal is wr = 0; unset: unbounded).
// Against the key chunk [ks, ks + m), query g sees something iff ks - wr <= g < ks + m + wl, so
// the query rows [qs, qs + n) are first cut to [q0, q1) = [max(qs, ks - wr), min(qs + n, ks + m + wl))
// (the pair is skipped when that is empty); the rows cut away take nothing from this chunk. The
// keys those rows see are [a, b) with
//   a = max(ks, q0 - wl),  b = min(ks + m, q1 + wr).
// gg::attention aligns a (n' = q1 - q0 queries, b - a keys) problem bottom-right: local query i
// sits at i' = i + (b - a) - n' and sees local keys [i' - wl', i' + wr']. Local key j is global
// key a + j and local query i is global row q0 + i, so with δ = b - q1,
//   i' = (q0 + i - a) + δ,
// and the global rule reads  wl' = wl + δ,  wr' = wr - δ.  Both are >= 0: wr' because
// b <= q1 + wr; wl' because either b = q1 + wr (δ = wr >= 0) or b = ks + m >= q1 - wl. The row
// cut is what makes wl' >= 0: a query row below the key chunk's reach would need wl' < 0. A
// causal mask stays causal when δ = 0 and becomes window_right = wr' = -δ otherwise (δ < 0 when
// the keys end before the query rows do).
// Unbounded windows stay unbounded. With one key chunk [0, N) nothing is cut: q0 = qs, q1 = qs + n.
#include <algorithm>
#include <cmath>
#include <limits>
#include <numeric>
#include <optional>
#include <string>

#include "autograd/grad_mode.h"
#include "autograd/node.h"
#include "dist/ops.h"

namespace gg::dist {
namespace {
// The lengths of the 2P zig-zag chunks of N rows: as equal as possible, the longer first.
std::vector<int64_t> zigzag_chunks(int64_t n, int64_t world) {
  std::vector<int64_t> c(static_cast<size_t>(2 * world), n / (2 * world));
  for (int64_t i = 0; i < n % (2 * world); ++i) ++c[static_cast<size_t>(i)];
  return c;
}

int64_t prefix(const std::vector<int64_t>& v, int64_t i) {
  return std::accumulate(v.begin(), v.begin() + i, int64_t{0});
}

void check_world(const char* op, int64_t rank, int64_t world) {
  GG_CHECK(world >= 1, ValueError, "gg::", op, ": world_size must be >= 1, got ", world);
  GG_CHECK(rank >= 0 && rank < world, ValueError, "gg::", op, ": rank must be in [0, ", world, "), got ", rank);
}

// Rows [start, start + rows) of the sequence, at row `local` of the rank's tensor (or block).
struct Chunk {
  int64_t start, rows, local;
};

// The chunks rank r holds: its block of the contiguous cut (`sizes`: rows per rank), or zig-zag
// chunks r and 2P - 1 - r (`zz`: the 2P chunk lengths).
std::vector<Chunk> chunks_of(int64_t r, Sharding sharding, const std::vector<int64_t>& sizes,
                             const std::vector<int64_t>& zz) {
  if (sharding == Sharding::contiguous) return {{prefix(sizes, r), sizes[static_cast<size_t>(r)], 0}};
  const int64_t P = static_cast<int64_t>(sizes.size()), second = 2 * P - 1 - r;
  return {{prefix(zz, r), zz[static_cast<size_t>(r)], 0},
          {prefix(zz, second), zz[static_cast<size_t>(second)], zz[static_cast<size_t>(r)]}};
}

// One (query chunk, key chunk) pair, narrowed as in the header comment: query rows [q0, q1)
// against keys [a, b), with the local mask.
struct Pair {
  int64_t q0, q1, a, b;
  AttentionOptions local;
};

std::optional<Pair> narrow(const Chunk& qc, const Chunk& kc, const AttentionOptions& o) {
  if (qc.rows == 0 || kc.rows == 0) return std::nullopt;
  const std::optional<int64_t> wl = o.window_left;
  const std::optional<int64_t> wr = o.causal ? std::optional<int64_t>(0) : o.window_right;
  const int64_t ks = kc.start, ke = kc.start + kc.rows;
  const int64_t q0 = wr ? std::max(qc.start, ks - *wr) : qc.start;
  const int64_t q1 = wl ? std::min(qc.start + qc.rows, ke + *wl) : qc.start + qc.rows;
  if (q0 >= q1) return std::nullopt;
  Pair p{q0, q1, wl ? std::max(ks, q0 - *wl) : ks, wr ? std::min(ke, q1 + *wr) : ke, o};
  const int64_t delta = p.b - q1;
  if (wl) p.local.window_left = *wl + delta;
  if (wr && !(o.causal && delta == 0)) {  // causal with δ = 0 stays plain causal
    p.local.causal = false;
    p.local.window_right = *wr - delta;
  }
  return p;
}

// The fused op on one pair: q holds the query chunk qc at its rows, K and V the key chunk kc.
AttentionForward attend(const Tensor& q, const Tensor& K, const Tensor& V, const Chunk& qc, const Chunk& kc,
                        const Pair& p) {
  const int64_t qa = qc.local + (p.q0 - qc.start), ka = kc.local + (p.a - kc.start);
  return attention_forward(slice(q, 2, qa, qa + (p.q1 - p.q0)), slice(K, 2, ka, ka + (p.b - p.a)),
                           slice(V, 2, ka, ka + (p.b - p.a)), p.local);
}

// x with `before` and `after` rows of `value` around it along dim 2 (differentiable in x).
Tensor pad_rows(const Tensor& x, int64_t before, int64_t after, double value) {
  if (before == 0 && after == 0) return x;
  TensorList parts;
  for (const int64_t rows : {before, int64_t{-1}, after}) {
    if (rows == -1) {
      parts.push_back(x);
    } else if (rows > 0) {
      Shape s = x.shape();
      s[2] = rows;
      parts.push_back(full(s, value, x.dtype(), x.device()));
    }
  }
  return cat(parts, 2);
}

// What one pair gives a query chunk of n rows: O and L for its rows [r0, r1).
struct Part {
  Tensor O, L;
  int64_t r0, r1;
};

// A chunk's merged output and row log-sum-exp.
struct Merged {
  Tensor O, L;
};

// A query chunk's output merged part by part as the parts come (the ring off the tape, O(n·d)
// at any time): m is the rowwise max of the parts' L so far, s = Σ exp(L_j - m) and
// U = Σ exp(L_j - m)·O_j in L's dtype; O = U / s and L = m + log s once every block has passed,
// what merge() computes from all the parts at once. A row no part has reached yet has m = -inf
// and s = 0; the shift mu keeps exp finite there (exp(-inf - mu) = 0).
struct RunningMerge {
  Tensor m, s, U;
  DType out_dtype = DType::f32;
  void fold(const Part& p, int64_t n) {
    const double inf = std::numeric_limits<double>::infinity();
    const DType acc = p.L.dtype();
    const Tensor L = pad_rows(p.L, p.r0, n - p.r1, -inf);
    const Tensor O = pad_rows(p.O.dtype() == acc ? p.O : to(p.O, acc), p.r0, n - p.r1, 0.0);
    if (!m.defined()) {
      out_dtype = p.O.dtype();
      m = full(L.shape(), -inf, acc, L.device());
      s = zeros(L.shape(), acc, L.device());
      U = zeros(O.shape(), acc, O.device());
    }
    const Tensor m_new = maximum(m, L);
    const Tensor mu = maximum(m_new, full(L.shape(), -1e30, acc, L.device()));
    const Tensor a = exp(m - mu), b = exp(L - mu);
    s = s * a + b;
    U = unsqueeze(a, 3) * U + unsqueeze(b, 3) * O;
    m = m_new;
  }
  Merged result() const {
    const Tensor O = U / unsqueeze(s, 3);
    return {O.dtype() == out_dtype ? O : to(O, out_dtype), m + log(s)};
  }
};

}  // namespace

Tensor zigzag_shard(const Tensor& x, int64_t rank, int64_t world, int64_t dim) {
  GG_CHECK(x.defined(), ValueError, "gg::dist::zigzag_shard: x is an undefined tensor");
  check_world("dist::zigzag_shard", rank, world);
  const int64_t d = wrap_dim(dim, x.dim(), "dist::zigzag_shard");
  const std::vector<int64_t> c = zigzag_chunks(x.size(d), world);
  const int64_t first = rank, second = 2 * world - 1 - rank;
  const int64_t s0 = prefix(c, first), s1 = prefix(c, second);
  return cat({slice(x, d, s0, s0 + c[static_cast<size_t>(first)]),
              slice(x, d, s1, s1 + c[static_cast<size_t>(second)])},
             d);
}

Tensor zigzag_unshard(const Tensor& gathered, int64_t world, int64_t dim) {
  GG_CHECK(gathered.defined(), ValueError, "gg::dist::zigzag_unshard: gathered is an undefined tensor");
  check_world("dist::zigzag_unshard", 0, world);
  const int64_t d = wrap_dim(dim, gathered.dim(), "dist::zigzag_unshard");
  const std::vector<int64_t> c = zigzag_chunks(gathered.size(d), world);
  // Where chunk i sits in the gathered order (chunk 0, chunk 2P-1, chunk 1, chunk 2P-2, ...).
  std::vector<int64_t> at(c.size());
  int64_t off = 0;
  for (int64_t r = 0; r < world; ++r) {
    for (int64_t i : {r, 2 * world - 1 - r}) {
      at[static_cast<size_t>(i)] = off;
      off += c[static_cast<size_t>(i)];
    }
  }
  TensorList pieces;
  for (size_t i = 0; i < c.size(); ++i)
    if (c[i] > 0) pieces.push_back(slice(gathered, d, at[i], at[i] + c[i]));
  if (pieces.empty()) return gathered;
  return pieces.size() == 1 ? pieces[0] : cat(pieces, d);
}

namespace {

// The all-gather schedule: K and V travel together, one collective forward, one reduce-scatter
// backward; each query chunk then attends to the keys it can see.
Tensor attention_all_gather(Group& group, const Tensor& q, const Tensor& k, const Tensor& v,
                            const AttentionOptions& options, Sharding sharding, const std::vector<int64_t>& sizes,
                            const std::vector<int64_t>& zz) {
  const int64_t P = group.size(), rank = group.rank();
  Tensor kv = all_gather(group, stack({k, v}, 0), 3);  // (2, B, Hkv, N, d)
  if (sharding == Sharding::zigzag) kv = zigzag_unshard(kv, P, 3);
  const Tensor K = squeeze(slice(kv, 0, 0, 1), 0), V = squeeze(slice(kv, 0, 1, 2), 0);
  const Chunk all{0, K.size(2), 0};
  TensorList outs;
  for (const Chunk& qc : chunks_of(rank, sharding, sizes, zz))
    if (const std::optional<Pair> p = narrow(qc, all, options)) outs.push_back(attend(q, K, V, qc, all, *p).O);
  return outs.size() == 1 ? outs[0] : cat(outs, 2);
}

// One rank's ring: the cut of the sequence, and the passes that send stacked blocks of key rows
// around it. Every pass runs every shift on every rank, in the same order, whatever its pairs
// (the shifts are collectives), and starts each transfer before the pairs it overlaps
// (Group::start_sendrecv: on NcclGroup, a stream of its own ordered by events).
struct Ring {
  Group& group;
  AttentionOptions options;
  Sharding sharding;
  std::vector<int64_t> sizes, zz;
  int64_t P, rank, longest;
  std::vector<Chunk> qcs;  // this rank's query chunks
  int next, prev;

  Ring(Group& g, const AttentionOptions& o, Sharding sh, std::vector<int64_t> rows, std::vector<int64_t> zig)
      : group(g), options(o), sharding(sh), sizes(std::move(rows)), zz(std::move(zig)), P(g.size()), rank(g.rank()),
        longest(*std::max_element(sizes.begin(), sizes.end())), qcs(chunks_of(rank, sharding, sizes, zz)),
        next(static_cast<int>((rank + 1) % P)), prev(static_cast<int>((rank + P - 1) % P)) {}

  // This rank's key-side tensors stacked, (m, B, Hkv, longest, d): padded with zero rows to the
  // longest rank's (sendrecv moves equal shapes).
  Tensor own(const TensorList& xs) const {
    Tensor block = stack(xs, 0);
    if (xs[0].size(2) == longest) return block;
    Shape s = block.shape();
    s[3] = longest - xs[0].size(2);
    return cat({block, zeros(s, block.dtype(), block.device())}, 3);
  }

  // Sends `block` around once. Step t: this rank holds rank (rank - t) mod P's block and calls
  // pair(p, i, qa, rows, ka, kv) for each pair of its query chunk i and a key chunk of the block
  // that sees a key (narrowed as in the header comment): query rows [qa, qa + rows) of this rank's
  // tensors, key rows [ka, ka + keys) of the block, kv the block's tensors cut to them. Then
  // stepped(t).
  template <typename PairFn, typename StepFn>
  void pass(Tensor block, PairFn&& pair, StepFn&& stepped) const {
    std::unique_ptr<Group::Pending> incoming;
    for (int64_t t = 0; t < P; ++t) {
      if (t > 0) block = incoming->wait();
      if (t + 1 < P) incoming = group.start_sendrecv(block, next, prev);
      for (const Chunk& kc : chunks_of((rank + P - t) % P, sharding, sizes, zz))
        for (size_t i = 0; i < qcs.size(); ++i)
          if (const std::optional<Pair> p = narrow(qcs[i], kc, options)) {
            const int64_t qa = qcs[i].local + (p->q0 - qcs[i].start), ka = kc.local + (p->a - kc.start);
            TensorList kv;
            for (int64_t m = 0; m < block.size(0); ++m)
              kv.push_back(slice(squeeze(slice(block, 0, m, m + 1), 0), 2, ka, ka + (p->b - p->a)));
            pair(*p, i, qa, p->q1 - p->q0, ka, kv);
          }
      stepped(t);
    }
  }

  // A pass with a gradient of the block's first two tensors travelling behind it: pair(..., part)
  // adds this rank's share to part, (2, B, Hkv, longest, d) in `acc`; at each step the gradient
  // of the block, received from the rank before while the pairs ran, is added to it and sent on,
  // and the last shift takes every block's gradient home. Returns this rank's, {grad of k, of v},
  // in k's dtype.
  template <typename PairFn>
  TensorList pass_with_gradient(const Tensor& block, const Tensor& k, DType acc, PairFn&& pair) const {
    const Shape gshape = {2, k.size(0), k.size(1), longest, k.size(3)};
    Tensor part = zeros(gshape, acc, k.device()), home;
    std::unique_ptr<Group::Pending> gradient;
    pass(
        block,
        [&](const Pair& p, size_t i, int64_t qa, int64_t rows, int64_t ka, const TensorList& kv) {
          pair(p, i, qa, rows, ka, kv, part);
        },
        [&](int64_t t) {
          if (t > 0) part = gradient->wait() + part;  // the ranks before this one added theirs
          if (P > 1)
            gradient = group.start_sendrecv(part, next, prev);
          else
            home = part;
          part = zeros(gshape, acc, k.device());
        });
    if (P > 1) home = gradient->wait();
    return {to(slice(squeeze(slice(home, 0, 0, 1), 0), 2, 0, k.size(2)), k.dtype()),
            to(slice(squeeze(slice(home, 0, 1, 2), 0), 2, 0, k.size(2)), k.dtype())};
  }

  // x (B, H, keys, d) padded with zero rows to the block's longest rows at row ka, stacked with
  // y, in `acc`.
  Tensor block_rows(const Tensor& x, const Tensor& y, int64_t ka, DType acc) const {
    const int64_t keys = x.size(2);
    return stack({pad_rows(to(x, acc), ka, longest - ka - keys, 0.0), pad_rows(to(y, acc), ka, longest - ka - keys, 0.0)},
                 0);
  }
};

// Rows [qa, qa + rows) of a rank's tensor, and back: x in `acc`, padded with zero rows to n at
// row qa. The passes add the pairs' parts in L's dtype (f32 for bf16 and f16), as the fused
// kernels add theirs, and round once at the end.
Tensor rows_at(const Tensor& x, int64_t qa, int64_t rows) { return contiguous(slice(x, 2, qa, qa + rows)); }
Tensor padded_to(const Tensor& x, int64_t qa, int64_t n, DType acc) {
  return pad_rows(to(x, acc), qa, n - qa - x.size(2), 0.0);
}

// The ring schedule's forward, off the tape: each pair's part is folded into its query chunk's
// running merge as the blocks pass. L_out: the merged row log-sum-exp, (B, Hq, n).
Tensor attention_ring(const Ring& ring, const Tensor& q, const Tensor& k, const Tensor& v, Tensor* L_out) {
  NoGradGuard ng;
  std::vector<RunningMerge> running(ring.qcs.size());
  ring.pass(
      ring.own({k, v}),
      [&](const Pair& p, size_t i, int64_t qa, int64_t rows, int64_t, const TensorList& kv) {
        const AttentionForward f = attention_forward(slice(q, 2, qa, qa + rows), kv[0], kv[1], p.local);
        running[i].fold({f.O, f.L, p.q0 - ring.qcs[i].start, p.q1 - ring.qcs[i].start}, ring.qcs[i].rows);
      },
      [](int64_t) {});
  TensorList outs, Ls;
  for (size_t i = 0; i < ring.qcs.size(); ++i)
    if (ring.qcs[i].rows > 0) {
      const Merged m = running[i].result();
      outs.push_back(m.O);
      Ls.push_back(m.L);
    }
  *L_out = Ls.size() == 1 ? Ls[0] : cat(Ls, 2);
  return outs.size() == 1 ? outs[0] : cat(outs, 2);
}

// The first-order backward at O(n·d) per rank: the blocks go around once more with their dK, dV
// behind them; each pair adds attention_backward's parts, taken with the chunk's merged O and L
// (with them, a pair's P = exp(S - L) and D = rowsum(dO∘O) are the whole sequence's, so the
// parts sum to the exact gradients).
TensorList ring_backward(const Ring& ring, const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& O,
                         const Tensor& L, const Tensor& dO) {
  NoGradGuard ng;
  const int64_t n = q.size(2);
  const DType acc = L.dtype();
  Tensor dq = zeros(q.shape(), acc, q.device());
  const TensorList dkv = ring.pass_with_gradient(
      ring.own({k, v}), k, acc,
      [&](const Pair& p, size_t, int64_t qa, int64_t rows, int64_t ka, const TensorList& kv, Tensor& part) {
        auto r = [&](const Tensor& x) { return rows_at(x, qa, rows); };
        const TensorList g = attention_backward(r(q), kv[0], kv[1], r(O), r(L), r(dO), p.local);
        dq = dq + padded_to(g[0], qa, n, acc);
        part = part + ring.block_rows(g[1], g[2], ka, acc);
      });
  return {to(dq, q.dtype()), dkv[0], dkv[1]};
}

// The ring's BoB at O(n·d) per rank (docs/distributed.md §5): the blocks go around twice more,
// now with the cotangents K̃, Ṽ of dK, dV. First each pair adds its part of its rows' E and F
// (attention_bob_row_sums, with the merged O and L as in ring_backward); then, with the whole
// rows' E and F, its parts of grad_Q and grad_dO here and of grad_K, grad_V to the block's
// gradient, which travels as dK, dV do. Returns {gq, gk, gv, gdO}.
TensorList ring_bob(const Ring& ring, const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& O,
                    const Tensor& L, const Tensor& dO, const Tensor& qt, const Tensor& kt, const Tensor& vt) {
  NoGradGuard ng;
  const int64_t n = q.size(2);
  const Tensor own = ring.own({k, v, kt, vt});
  Tensor E = zeros(L.shape(), L.dtype(), L.device()), F = zeros(L.shape(), L.dtype(), L.device());
  ring.pass(
      own,
      [&](const Pair& p, size_t, int64_t qa, int64_t rows, int64_t, const TensorList& kv) {
        auto r = [&](const Tensor& x) { return rows_at(x, qa, rows); };
        const TensorList ef = attention_bob_row_sums(r(q), kv[0], kv[1], r(O), r(L), r(dO), r(qt), kv[2], kv[3], p.local);
        E = E + padded_to(ef[0], qa, n, E.dtype());
        F = F + padded_to(ef[1], qa, n, F.dtype());
      },
      [](int64_t) {});
  const DType acc = L.dtype();
  Tensor gq = zeros(q.shape(), acc, q.device()), gdO = zeros(q.shape(), acc, q.device());
  const TensorList gkv = ring.pass_with_gradient(
      own, k, acc, [&](const Pair& p, size_t, int64_t qa, int64_t rows, int64_t ka, const TensorList& kv, Tensor& part) {
        auto r = [&](const Tensor& x) { return rows_at(x, qa, rows); };
        const TensorList g =
            attention_bob_from_row_sums(r(q), kv[0], kv[1], r(O), r(L), r(dO), r(qt), kv[2], kv[3], r(E), r(F), p.local);
        gq = gq + padded_to(g[0], qa, n, acc);
        gdO = gdO + padded_to(g[3], qa, n, acc);
        part = part + ring.block_rows(g[1], g[2], ka, acc);
      });
  return {to(gq, q.dtype()), gkv[0], gkv[1], to(gdO, q.dtype())};
}

// The ring is differentiable to order 2: its BoB computes off the tape, so a third derivative
// would silently miss its terms. check_order raises on every rank, before any shift, in a third
// backward pass through the ring (counted from `base`, the backward level it was recorded at).
[[noreturn]] void order_error() {
  throw AutogradError(
      "gg::dist::attention: the ring schedule is differentiable to order 2; use dist::Schedule::all_gather for "
      "higher orders");
}
void check_order(int base) {
  if (detail::current_backward_level() - base >= 3) order_error();
}

// ys as they are, recorded as functions of xs whose backward raises: what the ring's BoB returns
// to a create_graph backward (a backward through them is a third pass).
TensorList order_two_only(const TensorList& xs, const TensorList& ys) {
  TensorList out;
  for (const Tensor& y : ys) out.push_back(y.detach());
  record("dist_ring_bob", xs, out, {}, [](const BackwardArgs&) -> TensorList { order_error(); });
  return out;
}

// The ring as one recorded node that keeps only this rank's q, k, v, O and L: the forward runs
// off the tape (each received block is freed once used), the backward is ring_backward, and
// under create_graph ring_backward's results are recorded as one node whose backward is
// ring_bob: O(n·d) per rank at orders 0-2. Every rank runs every shift of each pass, in the same
// order, whatever its pairs, so no rank waits for a shift that another skips.
Tensor attention_ring_lean(Group& group, const Tensor& q, const Tensor& k, const Tensor& v,
                           const AttentionOptions& options, Sharding sharding, const std::vector<int64_t>& sizes,
                           const std::vector<int64_t>& zz) {
  Tensor L;
  const Tensor out = attention_ring(Ring(group, options, sharding, sizes, zz), q, k, v, &L);
  const Tensor qkv[] = {q, k, v};
  if (!detail::should_record({qkv, 3})) return out;
  std::weak_ptr<Group> w = group.weak_from_this();
  GG_CHECK(!w.expired(), ValueError, "gg::dist::attention: the group must be owned by a std::shared_ptr (as "
           "run_threads and NcclGroup::create make it)");
  const int base = detail::current_backward_level();
  auto ring = [w, options, sharding, sizes, zz] {  // the ring again, for a backward
    const std::shared_ptr<Group> g = w.lock();
    GG_CHECK(g != nullptr, DistError, "gg::dist::attention: differentiating a ring whose group no longer exists");
    return std::make_pair(g, Ring(*g, options, sharding, sizes, zz));
  };
  Tensor y = out.detach();
  record("dist_ring_attention", {q, k, v}, {y}, {q, k, v, y, L}, [ring, base](const BackwardArgs& a) -> TensorList {
    check_order(base);
    const auto [g, r] = ring();
    const Tensor &q = a.saved[0], &k = a.saved[1], &v = a.saved[2], O = a.saved[3].detach(), L = a.saved[4];
    const Tensor dO = a.grads[0];
    TensorList d = ring_backward(r, q, k, v, O, L, dO);
    if (!GradMode::is_enabled()) return d;
    for (Tensor& t : d) t = t.detach();
    record("dist_ring_attention_backward", {q, k, v, dO}, d, {q, k, v, dO, O, L},
           [ring, base](const BackwardArgs& b) -> TensorList {
             check_order(base);
             const auto [g2, r2] = ring();
             const TensorList& s = b.saved;  // q, k, v, dO, O, L; grads: the cotangents of dq, dk, dv
             TensorList out = ring_bob(r2, s[0], s[1], s[2], s[4], s[5], s[3], b.grads[0], b.grads[1], b.grads[2]);
             if (!GradMode::is_enabled()) return out;
             return order_two_only({s[0], s[1], s[2], s[3], b.grads[0], b.grads[1], b.grads[2]}, out);
           });
    return d;
  });
  return y;
}

}  // namespace

Tensor attention(Group& group, const Tensor& q, const Tensor& k, const Tensor& v, const AttentionOptions& options,
                 Sharding sharding, Schedule schedule) {
  const char* op = "dist::attention";
  GG_CHECK(q.defined() && k.defined() && v.defined(), ValueError, "gg::", op, ": q, k and v must be defined");
  GG_CHECK(q.dim() == 4 && k.dim() == 4, ShapeError, "gg::", op,
           ": q must be (B, Hq, n, d) and k (B, Hkv, n, d), got q ",
           shape_str(q.shape()), ", k ", shape_str(k.shape()));
  GG_CHECK(v.shape() == k.shape(), ShapeError, "gg::", op, ": v must have k's shape, got k ", shape_str(k.shape()),
           ", v ", shape_str(v.shape()));
  GG_CHECK(q.size(2) == k.size(2), ShapeError, "gg::", op,
           ": q, k and v must hold the same rows of the sequence (Nq = Nk globally), got ", q.size(2),
           " query rows and ", k.size(2), " key rows on rank ", group.rank());
  for (const auto& [w, name] : {std::pair{options.window_left, "window_left"}, {options.window_right, "window_right"}})
    GG_CHECK(!w || *w >= 0, ValueError, "gg::", op, ": ", name, " must be >= 0 (or unset), got ", w.value_or(0));
  GG_CHECK(!(options.causal && options.window_right.value_or(0) > 0), ValueError, "gg::", op,
           ": causal = true means window_right = 0, got window_right = ", options.window_right.value_or(0));
  GG_CHECK(schedule == Schedule::all_gather || schedule == Schedule::ring, ValueError, "gg::", op,
           ": unknown schedule ", static_cast<int>(schedule));
  // The ring and the collectives have no forward-mode rules: refuse a dual input here rather than
  // drop its tangent where the ring's forward runs off the tape.
  GG_CHECK(!detail::forward_ad_active() ||
               (!detail::has_open_tangent(q) && !detail::has_open_tangent(k) && !detail::has_open_tangent(v)),
           AutogradError, "gg::", op, ": no forward-mode (JVP) rule: q, k or v carries a tangent at an open dual "
           "level; differentiate it in reverse mode (gg::grad) instead");

  // Every rank's shapes and dtype, so that all ranks agree on the cut (and on the block shape
  // the ring shifts) or all raise the same error.
  const int64_t P = group.size(), rank = group.rank();
  const std::vector<int64_t> mine = {q.size(2), q.size(0), q.size(1), q.size(3), k.size(1), k.size(3),
                                     static_cast<int64_t>(q.dtype()), static_cast<int64_t>(k.dtype())};
  const int64_t width = static_cast<int64_t>(mine.size());
  const std::vector<int64_t> meta =
      group.all_gather(from_indices(mine, {width}, q.device()), 0).to_vector<int64_t>();
  std::vector<int64_t> sizes;
  for (int64_t r = 0; r < P; ++r) {
    const auto at = meta.begin() + r * width;
    sizes.push_back(at[0]);
    GG_CHECK(std::equal(mine.begin() + 1, mine.end(), at + 1), ShapeError, "gg::", op,
             ": the ranks' q and k differ in more than their rows: rank ", rank, " has q ", shape_str(q.shape()),
             ", k ", shape_str(k.shape()), " (", dtype_name(q.dtype()), "), rank ", r, " has (B, Hq, d, Hkv, dk) = ",
             shape_str(Shape(at + 1, at + 6)));
  }
  const int64_t N = std::accumulate(sizes.begin(), sizes.end(), int64_t{0});
  for (int64_t r = 0; r < P; ++r)
    GG_CHECK(sizes[static_cast<size_t>(r)] >= 1, ShapeError, "gg::", op,
             ": every rank must hold at least one row, rank ",
             r, " holds none (rows per rank ", shape_str(sizes), ")");
  const std::vector<int64_t> zz = zigzag_chunks(N, P);
  if (sharding == Sharding::zigzag)
    for (int64_t r = 0; r < P; ++r)
      GG_CHECK(sizes[static_cast<size_t>(r)] == zz[static_cast<size_t>(r)] + zz[static_cast<size_t>(2 * P - 1 - r)],
               ShapeError, "gg::", op, ": the shards are not zig-zag shards of ", N, " rows over ", P,
               " ranks: rows per rank ", shape_str(sizes), ", zig-zag chunks ", shape_str(zz));
  return schedule == Schedule::ring ? attention_ring_lean(group, q, k, v, options, sharding, sizes, zz)
                                    : attention_all_gather(group, q, k, v, options, sharding, sizes, zz);
}

}  // namespace gg::dist
