// Differentiable collectives: a small program that uses all_gather, reduce_scatter, all_reduce
// and broadcast (and one with sendrecv), run on P in-process ranks, against the same program on
// one thread over the whole data (f64). Values, first-order gradients and second-order gradients (the gradient of
// a function of the first-order ones, create_graph) must agree to rounding.
#include <gtest/gtest.h>

#include "dist_util.h"
#include "gradgrad.h"

namespace gg {
namespace {

using dist::Group;
using test::relative_gap;
using test::shard;

constexpr int64_t kRows = 7, kFeatures = 5, kOut = 5, kOut2 = 3, kBias = 4;
constexpr double kTol = 1e-12;

struct Data {
  Tensor X, W, W2, b;  // b: the root's bias (the others' are ignored by broadcast)
};

// The per-shard term sum(sin(b · sum(X_r))) needs the row shards of X on one thread too.
Tensor reference_loss(const Data& d, int P) {
  Tensor l = sum(tanh(matmul(d.X, d.W))) + sum(cos(matmul(d.X, d.W2)));
  Tensor s = sum(d.X * d.X);
  l = l + s * s * 0.1;
  for (int r = 0; r < P; ++r) {
    const std::vector<int64_t> sizes = test::shard_sizes(kRows, P);
    const int64_t a = test::shard_start(sizes, r);
    l = l + sum(sin(d.b * sum(slice(d.X, 0, a, a + sizes[static_cast<size_t>(r)]))));
  }
  return l;
}

// Rank r's share: X by rows, W by columns, W2 by rows (the features), its own bias.
Tensor rank_loss(Group& g, const TensorList& leaves, int root) {
  const int P = g.size(), r = g.rank();
  const Tensor &Xr = leaves[0], &Wr = leaves[1], &W2r = leaves[2], &br = leaves[3];
  std::vector<int64_t> row_sizes;
  const Tensor Xg = dist::all_gather(g, Xr, 0, &row_sizes);  // the whole X on every rank
  Tensor l = sum(tanh(matmul(Xg, Wr)));                       // column-parallel
  const std::vector<int64_t> f = test::shard_sizes(kFeatures, P);
  const int64_t f0 = test::shard_start(f, r);
  const Tensor partial = matmul(slice(Xg, 1, f0, f0 + f[static_cast<size_t>(r)]), W2r);  // row-parallel
  l = l + sum(cos(dist::reduce_scatter(g, partial, 0, row_sizes)));  // this rank's rows of X·W2
  const Tensor s = dist::all_reduce(g, sum(Xr * Xr));
  l = l + s * s * (0.1 / P);
  return l + sum(sin(dist::broadcast(g, br, root) * sum(Xr)));
}

class DifferentiableCollectives : public ::testing::TestWithParam<int> {};

TEST_P(DifferentiableCollectives, FirstAndSecondOrderMatchOneRank) {
  const int P = GetParam();
  const int root = P / 2;
  manual_seed(11);
  Data d{randn({kRows, kFeatures}, DType::f64), randn({kFeatures, kOut}, DType::f64) * 0.5,
         randn({kFeatures, kOut2}, DType::f64) * 0.5, Tensor()};
  TensorList biases;
  for (int r = 0; r < P; ++r) biases.push_back(randn({kBias}, DType::f64));
  d.b = biases[static_cast<size_t>(root)];

  // One thread, whole data.
  const TensorList full = {test::leaf(d.X), test::leaf(d.W), test::leaf(d.W2), test::leaf(d.b)};
  const Data fd{full[0], full[1], full[2], full[3]};
  const Tensor L = reference_loss(fd, P);
  const TensorList g1 = grad({L}, full, {}, std::nullopt, /*create_graph=*/true);
  Tensor pen = sum(g1[0] * g1[0]) + sum(g1[1] * g1[1]) + sum(g1[2] * g1[2]) + sum(g1[3] * g1[3]);
  const TensorList g2 = grad({pen}, full);

  // P ranks.
  std::vector<double> losses(static_cast<size_t>(P));
  std::vector<TensorList> first(static_cast<size_t>(P)), second(static_cast<size_t>(P));
  dist::run_threads(P, [&](Group& g) {
    const int r = g.rank();
    const TensorList leaves = {shard(d.X, 0, r, P, true), shard(d.W, 1, r, P, true), shard(d.W2, 0, r, P, true),
                               test::leaf(biases[static_cast<size_t>(r)])};
    const Tensor l = rank_loss(g, leaves, root);
    losses[static_cast<size_t>(r)] = l.item();
    const TensorList gr = grad({l}, leaves, {}, std::nullopt, /*create_graph=*/true);
    const Tensor p = sum(gr[0] * gr[0]) + sum(gr[1] * gr[1]) + sum(gr[2] * gr[2]) + sum(gr[3] * gr[3]);
    first[static_cast<size_t>(r)] = gr;
    second[static_cast<size_t>(r)] = grad({p}, leaves);
  });

  double total = 0;
  for (double l : losses) total += l;
  EXPECT_NEAR(total, L.item(), kTol * std::abs(L.item()));
  for (const auto* order : {&first, &second}) {
    const TensorList& want = order == &first ? g1 : g2;
    const char* name = order == &first ? "first order" : "second order";
    for (int r = 0; r < P; ++r) {
      const TensorList& got = (*order)[static_cast<size_t>(r)];
      EXPECT_LT(relative_gap(got[0], shard(want[0], 0, r, P)), kTol) << name << " dX, rank " << r;
      EXPECT_LT(relative_gap(got[1], shard(want[1], 1, r, P)), kTol) << name << " dW, rank " << r;
      EXPECT_LT(relative_gap(got[2], shard(want[2], 0, r, P)), kTol) << name << " dW2, rank " << r;
      const Tensor wb = r == root ? want[3] : zeros_like(want[3]);
      EXPECT_LT(relative_gap(got[3], wb), kTol) << name << " db, rank " << r;
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Ranks, DifferentiableCollectives, ::testing::Values(1, 2, 3, 4));

// dist::sendrecv: two ring shifts, so rank r's loss is a function of rank r - 2's x, against the
// same losses summed on one thread. First- and second-order gradients.
TEST(DistSendrecv, GradientsGoBackAroundTheRing) {
  for (const int P : {2, 3, 4}) {
    SCOPED_TRACE("P = " + std::to_string(P));
    manual_seed(7 + P);
    const Tensor X = randn({P, 3}, DType::f64), W = randn({P, 3}, DType::f64);
    auto f = [](const Tensor& y, const Tensor& w) { return sum(sin(w * y) * y); };
    const Tensor Xl = test::leaf(X);
    Tensor total = zeros({}, DType::f64);
    for (int r = 0; r < P; ++r) {
      const int from = (r + 2 * P - 2) % P;
      total = total + f(squeeze(slice(Xl, 0, from, from + 1), 0), squeeze(slice(W, 0, r, r + 1), 0));
    }
    const Tensor g1 = grad({total}, {Xl}, {}, std::nullopt, /*create_graph=*/true)[0];
    const Tensor g2 = grad({sum(g1 * g1 * g1)}, {Xl})[0];
    std::vector<Tensor> first(static_cast<size_t>(P)), second(static_cast<size_t>(P));
    dist::run_threads(P, [&](Group& g) {
      const int r = g.rank();
      const Tensor x = test::leaf(squeeze(slice(X, 0, r, r + 1), 0));
      Tensor y = x;
      for (int step = 0; step < 2; ++step) y = dist::sendrecv(g, y, (r + 1) % P, (r + P - 1) % P);
      const Tensor gr = grad({f(y, squeeze(slice(W, 0, r, r + 1), 0))}, {x}, {}, std::nullopt, /*create_graph=*/true)[0];
      first[static_cast<size_t>(r)] = gr;
      second[static_cast<size_t>(r)] = grad({sum(gr * gr * gr)}, {x})[0];
    });
    EXPECT_LT(test::relative_gap(stack(first, 0), g1), 1e-14);
    EXPECT_LT(test::relative_gap(stack(second, 0), g2), 1e-14);
  }
  EXPECT_THROW(dist::run_threads(1, [](Group& g) { dist::sendrecv(g, zeros({2}, DType::f64), 0, 0); }), ValueError);
}

TEST(DataParallel, AverageGradientsIsTheMeanOverRanksInOneCall) {
  const int P = 3;
  manual_seed(5);
  std::vector<TensorList> per_rank;
  for (int r = 0; r < P; ++r)
    per_rank.push_back({randn({2, 3}, DType::f64), randn({4}, DType::f32), randn({}, DType::f64)});
  std::vector<TensorList> avg(P), sum_list(P);
  dist::run_threads(P, [&](Group& g) {
    const size_t r = static_cast<size_t>(g.rank());
    avg[r] = dist::average_gradients(g, per_rank[r]);
    sum_list[r] = dist::all_reduce_coalesced(g, per_rank[r]);
  });
  for (size_t i = 0; i < per_rank[0].size(); ++i) {
    Tensor want = per_rank[0][i];
    for (int r = 1; r < P; ++r) want = want + per_rank[static_cast<size_t>(r)][i];
    for (int r = 0; r < P; ++r) {
      const TensorList& a = avg[static_cast<size_t>(r)];
      EXPECT_EQ(a[i].shape(), want.shape());
      EXPECT_EQ(a[i].dtype(), want.dtype());
      EXPECT_EQ(test::values(sum_list[static_cast<size_t>(r)][i]), test::values(want)) << "tensor " << i;
      EXPECT_EQ(test::values(a[i]), test::values(want * (1.0 / P))) << "tensor " << i;
    }
  }
  EXPECT_THROW(dist::run_threads(1, [](Group& g) { dist::average_gradients(g, {Tensor()}); }), ValueError);
}

// grad_all_reduce's model: a chain of three layers over a rank's own rows (f64, an f32 layer in
// the middle), so that a backward reaches the parameters from the last to the first. `inner`:
// the loss after one inner gradient step taken with create_graph (a meta-gradient, as MAML's).
TensorList net_params() {
  manual_seed(21);
  TensorList p = {randn({5, 8}, DType::f64) * 0.5, randn({8}, DType::f64) * 0.1, randn({8, 8}, DType::f32) * 0.4,
                  randn({8}, DType::f32) * 0.1, randn({8, 3}, DType::f64) * 0.5};
  for (Tensor& t : p) t.requires_grad_(true);
  return p;
}
Tensor net_loss(const TensorList& p, const Tensor& X) {
  const Tensor h = tanh(matmul(X, p[0]) + p[1]);
  const Tensor h2 = to(tanh(matmul(to(h, DType::f32), p[2]) + p[3]), DType::f64);
  return sum(sin(matmul(h2, p[4])));
}
Tensor meta_loss(const TensorList& p, const Tensor& X) {
  const TensorList g = grad({net_loss(p, X)}, p, {}, std::nullopt, /*create_graph=*/true);
  TensorList fast;
  for (size_t i = 0; i < p.size(); ++i) fast.push_back(p[i] - g[i] * 0.1);
  return net_loss(fast, X * 0.5);
}

// The overlapped sums equal grad followed by the one-call sums, bitwise (ThreadGroup sums in
// rank order either way): 1-3 ranks with their own rows, one bucket per parameter, a few, one
// per dtype; averaged and summed; first-order and meta-gradients.
TEST(DataParallel, GradAllReduceEqualsGradThenAllReduce) {
  for (int P : {1, 2, 3})
    for (int64_t bucket : {int64_t{1}, int64_t{300}, int64_t{25} << 20})
      for (bool average : {true, false})
        for (bool meta : {false, true}) {
          std::vector<TensorList> got(static_cast<size_t>(P)), want(static_cast<size_t>(P));
          dist::run_threads(P, [&](Group& g) {
            const TensorList p = net_params();
            manual_seed(100 + g.rank());
            const Tensor X = randn({3 + g.rank(), 5}, DType::f64);
            auto loss = [&] { return meta ? meta_loss(p, X) : net_loss(p, X); };
            const size_t r = static_cast<size_t>(g.rank());
            got[r] = dist::grad_all_reduce(g, {loss()}, p, {}, {}, average, bucket);
            const TensorList plain = grad({loss()}, p);
            want[r] = average ? dist::average_gradients(g, plain) : dist::all_reduce_coalesced(g, plain);
          });
          for (size_t r = 0; r < got.size(); ++r)
            for (size_t i = 0; i < want[r].size(); ++i) {
              const std::string what = "P=" + std::to_string(P) + " bucket=" + std::to_string(bucket) +
                                       " average=" + std::to_string(average) + " meta=" + std::to_string(meta) +
                                       " rank " + std::to_string(r) + " parameter " + std::to_string(i);
              EXPECT_EQ(got[r][i].dtype(), want[r][i].dtype()) << what;
              EXPECT_EQ(got[r][i].shape(), want[r][i].shape()) << what;
              EXPECT_EQ(test::values(got[r][i]), test::values(want[r][i])) << what;
            }
        }
}

// A world of one that logs each started all-reduce (its length), to see when the sums start.
class LoggingGroup final : public dist::Group {
 public:
  explicit LoggingGroup(std::vector<std::string>* log) : log_(log) {}
  int rank() const override { return 0; }
  int size() const override { return 1; }
  void barrier() override {}

 protected:
  Tensor all_reduce_flat(const Tensor& x) override { return clone(x); }
  Tensor all_gather_flat(const Tensor& x) override { return clone(x); }
  Tensor reduce_scatter_flat(const Tensor& x) override { return clone(x); }
  Tensor broadcast_flat(const Tensor& x, int) override { return clone(x); }
  void send_flat(const Tensor&, int) override {}
  Tensor recv_flat(const Tensor& like, int) override { return clone(like); }
  Tensor sendrecv_flat(const Tensor& x, int, int) override { return clone(x); }
  std::unique_ptr<Pending> start_all_reduce_flat(const Tensor& x) override {
    log_->push_back("sum " + std::to_string(x.numel()));
    return Group::start_all_reduce_flat(x);
  }

 private:
  std::vector<std::string>* log_;
};

// Each bucket's all-reduce starts as soon as its gradients are complete, before the backward
// reaches the parameters before them: with one bucket per parameter the log alternates
// (options.on_gradient, chained, logs each gradient after grad_all_reduce has seen it); with
// buckets of up to 384 bytes the f32 pair (b2, W2: 72 elements) starts once W2's gradient is
// there, and so does the f64 pair (b1, W1: 48) once W1's is.
TEST(DataParallel, GradAllReduceStartsBucketsDuringTheBackward) {
  const TensorList p = net_params();
  manual_seed(7);
  const Tensor X = randn({4, 5}, DType::f64);
  std::vector<std::string> log;
  auto group = std::make_shared<LoggingGroup>(&log);
  GradOptions o;
  o.on_gradient = [&](size_t k, const Tensor&) { log.push_back("grad " + std::to_string(k)); };
  const TensorList one = dist::grad_all_reduce(*group, {net_loss(p, X)}, p, {}, o, false, 1);
  EXPECT_EQ(log, (std::vector<std::string>{"sum 24", "grad 4", "sum 8", "grad 3", "sum 64", "grad 2", "sum 8",
                                           "grad 1", "sum 40", "grad 0"}));
  log.clear();
  const TensorList two = dist::grad_all_reduce(*group, {net_loss(p, X)}, p, {}, o, false, 48 * 8);
  EXPECT_EQ(log, (std::vector<std::string>{"sum 24", "grad 4", "grad 3", "sum 72", "grad 2", "grad 1", "sum 48",
                                           "grad 0"}));
  const TensorList plain = grad({net_loss(p, X)}, p);
  for (size_t i = 0; i < p.size(); ++i) {
    EXPECT_EQ(test::values(one[i]), test::values(plain[i])) << i;
    EXPECT_EQ(test::values(two[i]), test::values(plain[i])) << i;
  }
}

// Unused inputs (allow_unused) count as zeros: one rank's sum is the other's gradient, and an
// input no rank uses gets zeros. Ranks whose inputs differ get a DistError on every rank;
// create_graph and a non-positive bucket size a ValueError.
TEST(DataParallel, GradAllReduceUnusedInputsAndErrors) {
  std::vector<TensorList> got(2), own(2);
  dist::run_threads(2, [&](Group& g) {
    const TensorList p = net_params();
    Tensor spare = randn({2}, DType::f64).requires_grad_(true);  // used by no rank
    manual_seed(30 + g.rank());
    const Tensor X = randn({3, 5}, DType::f64);
    // rank 0 leaves out the last layer's weights (its loss stops at the middle layer)
    const Tensor loss = g.rank() == 0 ? sum(tanh(matmul(tanh(matmul(X, p[0]) + p[1]), to(p[2], DType::f64))))
                                      : net_loss(p, X);
    GradOptions o;
    o.allow_unused = true;
    const size_t r = static_cast<size_t>(g.rank());
    GradOptions keep = o;
    keep.retain_graph = true;
    own[r] = grad({loss}, {p[0], p[4], spare}, {}, keep);
    got[r] = dist::grad_all_reduce(g, {loss}, {p[0], p[4], spare}, {}, o, false, 1);
  });
  for (size_t r = 0; r < 2; ++r) {
    EXPECT_EQ(test::values(got[r][0]), test::values(own[0][0] + own[1][0]));
    EXPECT_FALSE(own[0][1].defined());
    EXPECT_EQ(test::values(got[r][1]), test::values(own[1][1]));
    EXPECT_EQ(test::values(got[r][2]), std::vector<double>(2, 0.0));
  }
  EXPECT_THROW(dist::run_threads(2,
                                 [](Group& g) {
                                   const Tensor a = randn({3}, DType::f64).requires_grad_(true);
                                   const Tensor b = randn({g.rank() + 1}, DType::f64).requires_grad_(true);
                                   dist::grad_all_reduce(g, {sum(a) + sum(b)}, {a, b});
                                 }),
               dist::DistError);
  EXPECT_THROW(dist::run_threads(1,
                                 [](Group& g) {
                                   const Tensor a = randn({3}, DType::f64).requires_grad_(true);
                                   GradOptions o;
                                   o.create_graph = true;
                                   dist::grad_all_reduce(g, {sum(a * a)}, {a}, {}, o);
                                 }),
               ValueError);
  EXPECT_THROW(dist::run_threads(1,
                                 [](Group& g) {
                                   const Tensor a = randn({3}, DType::f64).requires_grad_(true);
                                   dist::grad_all_reduce(g, {sum(a * a)}, {a}, {}, {}, true, 0);
                                 }),
               ValueError);
}

}  // namespace
}  // namespace gg
