// Sequence-parallel attention in its all-gather form: gather K and V, then run each local query
// block against the keys it can see with the fused gg::attention.
//
// Re-aligning the mask. Globally Nq = Nk = N, so query g sees keys j with
//   g - wl <= j <= g + wr          (wl, wr: the windows; causal is wr = 0; unset: unbounded).
// A block of n queries starting at global row s therefore needs the keys [a, b) with
//   a = max(0, s - wl),  b = min(N, s + n + wr).
// gg::attention aligns a (n queries, b - a keys) problem bottom-right: local query i sits at
// i' = i + (b - a) - n and sees local keys [i' - wl', i' + wr']. Local key j is global key a + j
// and local query i is global row s + i, so with δ = b - (s + n) >= 0,
//   i' = (s + i - a) + δ,
// and the global rule reads  wl' = wl + δ,  wr' = wr - δ  (>= 0 because b <= s + n + wr).
// Under a causal mask b = s + n, δ = 0 and the block is plain causal attention against the
// keys [a, s + n). Unbounded windows stay unbounded.
#include <algorithm>
#include <numeric>

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

struct Block {
  int64_t global_start, rows, local_start;
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

Tensor attention(Group& group, const Tensor& q, const Tensor& k, const Tensor& v, const AttentionOptions& options,
                 Sharding sharding) {
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

  // K and V travel together: one collective forward, one reduce-scatter backward.
  std::vector<int64_t> sizes;
  Tensor kv = all_gather(group, stack({k, v}, 0), 3, &sizes);  // (2, B, Hkv, N, d)
  const int64_t P = group.size(), rank = group.rank();
  const int64_t N = std::accumulate(sizes.begin(), sizes.end(), int64_t{0});
  for (int64_t r = 0; r < P; ++r)
    GG_CHECK(sizes[static_cast<size_t>(r)] >= 1, ShapeError, "gg::", op,
             ": every rank must hold at least one row, rank ",
             r, " holds none (rows per rank ", shape_str(sizes), ")");

  std::vector<Block> blocks;
  if (sharding == Sharding::zigzag) {
    const std::vector<int64_t> c = zigzag_chunks(N, P);
    for (int64_t r = 0; r < P; ++r)
      GG_CHECK(sizes[static_cast<size_t>(r)] == c[static_cast<size_t>(r)] + c[static_cast<size_t>(2 * P - 1 - r)],
               ShapeError, "gg::", op, ": the shards are not zig-zag shards of ", N, " rows over ", P,
               " ranks: rows per rank ", shape_str(sizes), ", zig-zag chunks ", shape_str(c));
    kv = zigzag_unshard(kv, P, 3);
    const int64_t second = 2 * P - 1 - rank;
    blocks.push_back({prefix(c, rank), c[static_cast<size_t>(rank)], 0});
    blocks.push_back({prefix(c, second), c[static_cast<size_t>(second)], c[static_cast<size_t>(rank)]});
  } else {
    blocks.push_back({prefix(sizes, rank), sizes[static_cast<size_t>(rank)], 0});
  }
  const Tensor K = squeeze(slice(kv, 0, 0, 1), 0), V = squeeze(slice(kv, 0, 1, 2), 0);

  const std::optional<int64_t> wl = options.window_left;
  const std::optional<int64_t> wr = options.causal ? std::optional<int64_t>(0) : options.window_right;
  TensorList outs;
  for (const Block& blk : blocks) {
    if (blk.rows == 0) continue;
    const int64_t s = blk.global_start, n = blk.rows;
    const int64_t a = wl ? std::max<int64_t>(0, s - *wl) : 0;
    const int64_t b = wr ? std::min<int64_t>(N, s + n + *wr) : N;
    const int64_t delta = b - (s + n);
    AttentionOptions local = options;
    if (wl) local.window_left = *wl + delta;
    if (!options.causal && wr) local.window_right = *wr - delta;
    outs.push_back(gg::attention(slice(q, 2, blk.local_start, blk.local_start + n), slice(K, 2, a, b),
                                 slice(V, 2, a, b), local));
  }
  return outs.size() == 1 ? outs[0] : cat(outs, 2);
}

}  // namespace gg::dist
