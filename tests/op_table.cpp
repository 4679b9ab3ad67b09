// The rows of the op table and the plain-loop references for their forwards.
#include "op_table.h"

#include <algorithm>
#include <cmath>
#include <limits>

namespace gg::test {
namespace {

// ---- reference builders ----
Ref unary_ref(std::function<double(double)> f) {
  return [f](const std::vector<Values>& in) {
    Values out(in[0].size());
    std::transform(in[0].begin(), in[0].end(), out.begin(), f);
    return out;
  };
}

Ref binary_ref(Shape sa, Shape sb, Shape so, std::function<double(double, double)> f) {
  return [=](const std::vector<Values>& in) {
    Values out(static_cast<size_t>(numel_of(so)));
    for (int64_t i = 0; i < numel_of(so); ++i) {
      auto idx = unravel(i, so);
      out[static_cast<size_t>(i)] =
          f(in[0][static_cast<size_t>(bcast_index(idx, sa))], in[1][static_cast<size_t>(bcast_index(idx, sb))]);
    }
    return out;
  };
}

// Reduce `shape` over `dims` with `init`/`step`, output in keepdim-free row-major order.
Ref reduce_ref(Shape shape, std::vector<int64_t> dims, double init, std::function<double(double, double)> step,
               double post_scale = 1.0) {
  return [=](const std::vector<Values>& in) {
    Shape kept = shape;
    for (int64_t d : dims) kept[static_cast<size_t>(d)] = 1;
    Values out(static_cast<size_t>(numel_of(kept)), init);
    for (int64_t i = 0; i < numel_of(shape); ++i) {
      auto idx = unravel(i, shape);
      for (int64_t d : dims) idx[static_cast<size_t>(d)] = 0;
      double& o = out[static_cast<size_t>(ravel(idx, kept))];
      o = step(o, in[0][static_cast<size_t>(i)]);
    }
    for (double& v : out) v *= post_scale;
    return out;
  };
}

// Batched matmul reference with broadcasting of batch dims.
Ref matmul_ref(Shape sa, Shape sb, Shape so) {
  return [=](const std::vector<Values>& in) {
    const int64_t M = so[so.size() - 2], N = so[so.size() - 1], K = sa.back();
    Shape batch(so.begin(), so.end() - 2), ba(sa.begin(), sa.end() - 2), bb(sb.begin(), sb.end() - 2);
    Values out(static_cast<size_t>(numel_of(so)), 0.0);
    for (int64_t b = 0; b < numel_of(batch); ++b) {
      auto idx = unravel(b, batch);
      int64_t oa = bcast_index(idx, ba) * M * K, ob = bcast_index(idx, bb) * K * N;
      for (int64_t m = 0; m < M; ++m)
        for (int64_t n = 0; n < N; ++n) {
          double s = 0;
          for (int64_t k = 0; k < K; ++k)
            s += in[0][static_cast<size_t>(oa + m * K + k)] * in[1][static_cast<size_t>(ob + k * N + n)];
          out[static_cast<size_t>(b * M * N + m * N + n)] = s;
        }
    }
    return out;
  };
}

// out[i] = in[map(i)] for index-permuting ops (views, slices, gathers).
Ref gather_ref(Shape so, Shape si, std::function<std::vector<int64_t>(const std::vector<int64_t>&)> map) {
  return [=](const std::vector<Values>& in) {
    Values out(static_cast<size_t>(numel_of(so)));
    for (int64_t i = 0; i < numel_of(so); ++i) out[static_cast<size_t>(i)] = in[0][static_cast<size_t>(ravel(map(unravel(i, so)), si))];
    return out;
  };
}

// Row softmax / log-softmax reference over the last dim of (rows, cols).
Values softmax_rows(const Values& x, int64_t rows, int64_t cols, bool log) {
  Values y(x.size());
  for (int64_t r = 0; r < rows; ++r) {
    double m = -std::numeric_limits<double>::infinity(), s = 0;
    for (int64_t c = 0; c < cols; ++c) m = std::max(m, x[static_cast<size_t>(r * cols + c)]);
    for (int64_t c = 0; c < cols; ++c) s += std::exp(x[static_cast<size_t>(r * cols + c)] - m);
    for (int64_t c = 0; c < cols; ++c) {
      double v = x[static_cast<size_t>(r * cols + c)] - m;
      y[static_cast<size_t>(r * cols + c)] = log ? v - std::log(s) : std::exp(v) / s;
    }
  }
  return y;
}

// Attention reference for one (B, H, N, d) problem, plain loops.
Values attention_ref(const std::vector<Values>& in, int64_t BH, int64_t N, int64_t d, bool causal) {
  const Values &q = in[0], &k = in[1], &v = in[2];
  Values out(static_cast<size_t>(BH * N * d), 0.0);
  const double s = 1.0 / std::sqrt(static_cast<double>(d));
  for (int64_t h = 0; h < BH; ++h)
    for (int64_t i = 0; i < N; ++i) {
      Values p(static_cast<size_t>(N));
      double m = -1e300, z = 0;
      for (int64_t j = 0; j < N; ++j) {
        double dot = 0;
        for (int64_t c = 0; c < d; ++c) dot += q[static_cast<size_t>((h * N + i) * d + c)] * k[static_cast<size_t>((h * N + j) * d + c)];
        p[static_cast<size_t>(j)] = (causal && j > i) ? -1e300 : s * dot;
        m = std::max(m, p[static_cast<size_t>(j)]);
      }
      for (int64_t j = 0; j < N; ++j) z += (causal && j > i) ? 0 : std::exp(p[static_cast<size_t>(j)] - m);
      for (int64_t j = 0; j < N; ++j) {
        double w = (causal && j > i) ? 0 : std::exp(p[static_cast<size_t>(j)] - m) / z;
        for (int64_t c = 0; c < d; ++c) out[static_cast<size_t>((h * N + i) * d + c)] += w * v[static_cast<size_t>((h * N + j) * d + c)];
      }
    }
  return out;
}

}  // namespace

std::vector<OpCase> op_table() {
  std::vector<OpCase> t;
  auto bin = [&](std::string name, Shape a, Shape b, std::function<Tensor(const Tensor&, const Tensor&)> op,
                 std::function<double(double, double)> f, double lo = -2, double hi = 2, double gap = 0, bool third = false) {
    Shape o = broadcast_shapes(a, b, "test");
    t.push_back({name, {a, b}, [op](const TensorList& x) { return op(x[0], x[1]); }, o, binary_ref(a, b, o, f), lo, hi, gap, third});
  };
  auto un = [&](std::string name, std::function<Tensor(const Tensor&)> op, std::function<double(double)> f,
                double lo = -2, double hi = 2, double gap = 0, bool third = false) {
    t.push_back({name, {{2, 3}}, [op](const TensorList& x) { return op(x[0]); }, {2, 3}, unary_ref(f), lo, hi, gap, third});
  };

  // ---- elementwise, with broadcasting ----
  bin("add", {2, 3}, {3}, [](auto& a, auto& b) { return a + b; }, [](double a, double b) { return a + b; }, -2, 2, 0, true);
  bin("add_bcast", {2, 1, 3}, {4, 1}, [](auto& a, auto& b) { return a + b; }, [](double a, double b) { return a + b; });
  bin("sub", {3, 4}, {1, 4}, [](auto& a, auto& b) { return a - b; }, [](double a, double b) { return a - b; });
  bin("mul", {2, 3}, {2, 3}, [](auto& a, auto& b) { return a * b; }, [](double a, double b) { return a * b; }, -2, 2, 0, true);
  bin("mul_bcast", {4, 1}, {1, 5}, [](auto& a, auto& b) { return a * b; }, [](double a, double b) { return a * b; });
  bin("div", {2, 3}, {3}, [](auto& a, auto& b) { return a / b; }, [](double a, double b) { return a / b; }, 0.5, 2, 0, true);
  bin("maximum", {3, 4}, {3, 4}, [](auto& a, auto& b) { return maximum(a, b); }, [](double a, double b) { return std::max(a, b); });
  t.push_back({"where", {{2, 3}, {3}},
               [](const TensorList& x) {
                 const Tensor& x0 = x[0];
                 Tensor cond = gt(from_vector({1, -1, 1, -1, -1, 1}, {2, 3}, x0.dtype(), x0.device()), zeros({}, x0.dtype(), x0.device()));
                 return where(cond, x[0], x[1]);
               },
               {2, 3},
               [](const std::vector<Values>& in) {
                 const bool c[6] = {true, false, true, false, false, true};
                 Values o(6);
                 for (size_t i = 0; i < 6; ++i) o[i] = c[i] ? in[0][i] : in[1][i % 3];
                 return o;
               }});
  un("neg", [](auto& x) { return -x; }, [](double x) { return -x; });
  un("pow3", [](auto& x) { return pow(x, 3.0); }, [](double x) { return x * x * x; }, -2, 2, 0, true);
  un("pow_half", [](auto& x) { return pow(x, 0.5); }, [](double x) { return std::sqrt(x); }, 0.5, 2);
  un("pow_neg", [](auto& x) { return pow(x, -1.5); }, [](double x) { return std::pow(x, -1.5); }, 0.5, 2);
  un("exp", [](auto& x) { return exp(x); }, [](double x) { return std::exp(x); }, -2, 2, 0, true);
  un("log", [](auto& x) { return log(x); }, [](double x) { return std::log(x); }, 0.5, 3, 0, true);
  un("sqrt", [](auto& x) { return sqrt(x); }, [](double x) { return std::sqrt(x); }, 0.5, 3);
  un("tanh", [](auto& x) { return tanh(x); }, [](double x) { return std::tanh(x); }, -2, 2, 0, true);
  un("sigmoid", [](auto& x) { return sigmoid(x); }, [](double x) { return 1 / (1 + std::exp(-x)); }, -2, 2, 0, true);
  un("relu", [](auto& x) { return relu(x); }, [](double x) { return x > 0 ? x : 0; }, -2, 2, 0.1);
  un("gelu", [](auto& x) { return gelu(x); }, [](double x) { return 0.5 * x * (1 + std::erf(x / std::sqrt(2.0))); }, -2, 2, 0, true);
  un("erf", [](auto& x) { return erf(x); }, [](double x) { return std::erf(x); });
  un("sin", [](auto& x) { return sin(x); }, [](double x) { return std::sin(x); }, -2, 2, 0, true);
  un("cos", [](auto& x) { return cos(x); }, [](double x) { return std::cos(x); });
  un("abs", [](auto& x) { return abs(x); }, [](double x) { return std::abs(x); }, -2, 2, 0.1);
  un("add_scalar", [](auto& x) { return x + 1.5; }, [](double x) { return x + 1.5; });
  un("mul_scalar", [](auto& x) { return 2.5 * x; }, [](double x) { return 2.5 * x; });
  un("rdiv_scalar", [](auto& x) { return 2.0 / x; }, [](double x) { return 2.0 / x; }, 0.5, 2);

  // ---- reductions ----
  const Shape s234 = {2, 3, 4};
  auto add2 = [](double a, double b) { return a + b; };
  auto max2 = [](double a, double b) { return std::max(a, b); };
  t.push_back({"sum_all", {s234}, [](const TensorList& x) { return sum(x[0]); }, {}, reduce_ref(s234, {0, 1, 2}, 0, add2)});
  t.push_back({"sum_dim1", {s234}, [](const TensorList& x) { return sum(x[0], {1}); }, {2, 4}, reduce_ref(s234, {1}, 0, add2)});
  t.push_back({"sum_dims_keep", {s234}, [](const TensorList& x) { return sum(x[0], {0, -1}, true); }, {1, 3, 1},
               reduce_ref(s234, {0, 2}, 0, add2)});
  // A strided view summed over its leading dim (read in place, without a transposed copy).
  t.push_back({"sum_dim0_of_transpose", {{4, 3, 2}}, [](const TensorList& x) { return sum(transpose(x[0], 0, 2), {0}); },
               {3, 4}, [](const std::vector<Values>& in) {
                 Values o(12, 0.0);  // o[j, i] = sum_k x[i, j, k]
                 for (size_t i = 0; i < 4; ++i)
                   for (size_t j = 0; j < 3; ++j)
                     for (size_t k = 0; k < 2; ++k) o[j * 4 + i] += in[0][(i * 3 + j) * 2 + k];
                 return o;
               }});
  t.push_back({"mean_all", {s234}, [](const TensorList& x) { return mean(x[0]); }, {}, reduce_ref(s234, {0, 1, 2}, 0, add2, 1.0 / 24)});
  t.push_back({"mean_last", {s234}, [](const TensorList& x) { return mean(x[0], {-1}); }, {2, 3},
               reduce_ref(s234, {2}, 0, add2, 0.25), -2, 2, 0, true});
  t.push_back({"max_all", {s234}, [](const TensorList& x) { return max(x[0]); }, {}, reduce_ref(s234, {0, 1, 2}, -1e300, max2)});
  t.push_back({"max_dim1", {s234}, [](const TensorList& x) { return max(x[0], {1}); }, {2, 4}, reduce_ref(s234, {1}, -1e300, max2)});

  // ---- matmul ----
  t.push_back({"matmul_2d", {{3, 4}, {4, 5}}, [](const TensorList& x) { return matmul(x[0], x[1]); }, {3, 5},
               matmul_ref({3, 4}, {4, 5}, {3, 5}), -2, 2, 0, true});
  t.push_back({"matmul_batched", {{2, 3, 4}, {2, 4, 2}}, [](const TensorList& x) { return matmul(x[0], x[1]); }, {2, 3, 2},
               matmul_ref({2, 3, 4}, {2, 4, 2}, {2, 3, 2})});
  t.push_back({"matmul_bcast", {{2, 1, 3, 4}, {3, 4, 2}}, [](const TensorList& x) { return matmul(x[0], x[1]); }, {2, 3, 3, 2},
               matmul_ref({2, 1, 3, 4}, {3, 4, 2}, {2, 3, 3, 2})});
  // A weight shared by every batch (one tall product in the CPU kernel), and an expanded one.
  t.push_back({"matmul_shared_b", {{2, 3, 4}, {4, 2}}, [](const TensorList& x) { return matmul(x[0], x[1]); }, {2, 3, 2},
               matmul_ref({2, 3, 4}, {4, 2}, {2, 3, 2})});
  t.push_back({"matmul_expanded_b", {{3, 3, 4}, {4, 2}},
               [](const TensorList& x) { return matmul(x[0], expand(x[1], {3, 4, 2})); }, {3, 3, 2},
               matmul_ref({3, 3, 4}, {4, 2}, {3, 3, 2})});
  t.push_back({"matmul_transposed", {{4, 3}, {5, 4}},
               [](const TensorList& x) { return matmul(transpose(x[0], 0, 1), transpose(x[1], 0, 1)); }, {3, 5},
               [](const std::vector<Values>& in) {
                 Values o(15, 0.0);
                 for (int m = 0; m < 3; ++m)
                   for (int n = 0; n < 5; ++n)
                     for (int k = 0; k < 4; ++k) o[static_cast<size_t>(m * 5 + n)] += in[0][static_cast<size_t>(k * 3 + m)] * in[1][static_cast<size_t>(n * 4 + k)];
                 return o;
               }});
  t.push_back({"matmul_vec_mat", {{4}, {4, 3}}, [](const TensorList& x) { return matmul(x[0], x[1]); }, {3},
               matmul_ref({1, 4}, {4, 3}, {1, 3})});
  t.push_back({"matmul_mat_vec", {{3, 4}, {4}}, [](const TensorList& x) { return matmul(x[0], x[1]); }, {3},
               matmul_ref({3, 4}, {4, 1}, {3, 1})});

  // ---- shapes and views ----
  t.push_back({"reshape", {s234}, [](const TensorList& x) { return reshape(x[0], {6, -1}); }, {6, 4}, unary_ref([](double v) { return v; })});
  t.push_back({"transpose", {s234}, [](const TensorList& x) { return transpose(x[0], 0, 2); }, {4, 3, 2},
               gather_ref({4, 3, 2}, s234, [](auto i) { return std::vector<int64_t>{i[2], i[1], i[0]}; })});
  t.push_back({"permute", {s234}, [](const TensorList& x) { return permute(x[0], {1, 2, 0}); }, {3, 4, 2},
               gather_ref({3, 4, 2}, s234, [](auto i) { return std::vector<int64_t>{i[2], i[0], i[1]}; })});
  t.push_back({"reshape_of_transpose", {{3, 4}}, [](const TensorList& x) { return reshape(transpose(x[0], 0, 1), {12}); }, {12},
               gather_ref({12}, {3, 4}, [](auto i) { return std::vector<int64_t>{i[0] % 3, i[0] / 3}; })});
  t.push_back({"expand", {{3, 1}}, [](const TensorList& x) { return expand(x[0], {2, 3, 4}); }, {2, 3, 4},
               gather_ref({2, 3, 4}, {3, 1}, [](auto i) { return std::vector<int64_t>{i[1], 0}; })});
  t.push_back({"squeeze", {{3, 1, 2}}, [](const TensorList& x) { return squeeze(x[0], 1); }, {3, 2}, unary_ref([](double v) { return v; })});
  t.push_back({"unsqueeze", {{3, 2}}, [](const TensorList& x) { return unsqueeze(x[0], -1); }, {3, 2, 1}, unary_ref([](double v) { return v; })});
  t.push_back({"slice", {{3, 5}}, [](const TensorList& x) { return slice(x[0], 1, 1, 5, 2); }, {3, 2},
               gather_ref({3, 2}, {3, 5}, [](auto i) { return std::vector<int64_t>{i[0], 1 + 2 * i[1]}; }), -2, 2, 0, true});
  t.push_back({"cat", {{2, 3}, {2, 2}}, [](const TensorList& x) { return cat({x[0], x[1]}, 1); }, {2, 5},
               [](const std::vector<Values>& in) {
                 Values o;
                 for (int r = 0; r < 2; ++r) {
                   for (int c = 0; c < 3; ++c) o.push_back(in[0][static_cast<size_t>(r * 3 + c)]);
                   for (int c = 0; c < 2; ++c) o.push_back(in[1][static_cast<size_t>(r * 2 + c)]);
                 }
                 return o;
               }});
  t.push_back({"stack", {{2, 3}, {2, 3}}, [](const TensorList& x) { return stack({x[0], x[1]}, 1); }, {2, 2, 3},
               [](const std::vector<Values>& in) {
                 Values o;
                 for (int r = 0; r < 2; ++r)
                   for (int k = 0; k < 2; ++k)
                     for (int c = 0; c < 3; ++c) o.push_back(in[static_cast<size_t>(k)][static_cast<size_t>(r * 3 + c)]);
                 return o;
               }});
  t.push_back({"index_select", {{3, 4}}, [](const TensorList& x) { return index_select(x[0], 1, from_indices({2, 0, 2}, {3}, x[0].device())); },
               {3, 3}, gather_ref({3, 3}, {3, 4}, [](auto i) { const int64_t m[3] = {2, 0, 2}; return std::vector<int64_t>{i[0], m[i[1]]}; }),
               -2, 2, 0, true});
  // libtorch-style indexing: views (select, narrow, integers, Slice, None, Ellipsis) and gathers
  // (a b8 mask, i64 indices with a negative one).
  t.push_back({"select", {{3, 4}}, [](const TensorList& x) { return select(x[0], 1, -1); }, {3},
               gather_ref({3}, {3, 4}, [](auto i) { return std::vector<int64_t>{i[0], 3}; }), -2, 2, 0, true});
  t.push_back({"narrow", {{4, 3}}, [](const TensorList& x) { return narrow(x[0], 0, 1, 2); }, {2, 3},
               gather_ref({2, 3}, {4, 3}, [](auto i) { return std::vector<int64_t>{i[0] + 1, i[1]}; })});
  t.push_back({"index_basic", {{2, 3, 4}},
               [](const TensorList& x) {
                 using namespace indexing;
                 return x[0].index({1, None, Slice(1, None), Slice(None, None, 2)});
               },
               {1, 2, 2}, gather_ref({1, 2, 2}, {2, 3, 4}, [](auto i) { return std::vector<int64_t>{1, 1 + i[1], 2 * i[2]}; }),
               -2, 2, 0, true});
  t.push_back({"index_ellipsis", {{2, 3, 4}}, [](const TensorList& x) { return x[0].index({indexing::Ellipsis, 2}); },
               {2, 3}, gather_ref({2, 3}, {2, 3, 4}, [](auto i) { return std::vector<int64_t>{i[0], i[1], 2}; })});
  t.push_back({"index_mask", {{3, 4}},
               [](const TensorList& x) {
                 // true at (0, 1), (1, 0), (1, 3), (2, 2)
                 Tensor mask = tensor({{0, 1, 0, 0}, {1, 0, 0, 1}, {0, 0, 1, 0}}, DType::f64, x[0].device()) > 0.5;
                 return x[0].index({mask});
               },
               {4}, gather_ref({4}, {3, 4}, [](auto i) {
                 const int64_t r[4] = {0, 1, 1, 2}, c[4] = {1, 0, 3, 2};
                 return std::vector<int64_t>{r[i[0]], c[i[0]]};
               }), -2, 2, 0, true});
  t.push_back({"index_mask_rows", {{3, 2, 2}},
               [](const TensorList& x) {
                 return x[0].index({indexing::Slice(), tensor({1.0, 0.0}, DType::f64, x[0].device()) > 0.5});
               },
               {3, 1, 2}, gather_ref({3, 1, 2}, {3, 2, 2}, [](auto i) { return std::vector<int64_t>{i[0], 0, i[2]}; })});
  t.push_back({"index_i64", {{4, 3}},
               [](const TensorList& x) {
                 return x[0].index({indexing::Slice(), tensor({{2, 0}, {-1, 1}}, DType::i64, x[0].device())});
               },
               {4, 2, 2}, gather_ref({4, 2, 2}, {4, 3}, [](auto i) {
                 const int64_t m[2][2] = {{2, 0}, {2, 1}};
                 return std::vector<int64_t>{i[0], m[i[1]][i[2]]};
               }), -2, 2, 0, true});
  t.push_back({"embedding", {{5, 3}}, [](const TensorList& x) { return embedding(x[0], from_indices({4, 1, 1, 0}, {2, 2}, x[0].device())); },
               {2, 2, 3}, gather_ref({2, 2, 3}, {5, 3}, [](auto i) { const int64_t m[4] = {4, 1, 1, 0}; return std::vector<int64_t>{m[i[0] * 2 + i[1]], i[2]}; })});

  // ---- neural-network ops ----
  t.push_back({"softmax_last", {{3, 5}}, [](const TensorList& x) { return softmax(x[0], -1); }, {3, 5},
               [](const std::vector<Values>& in) { return softmax_rows(in[0], 3, 5, false); }, -2, 2, 0, true});
  t.push_back({"softmax_dim0", {{3, 5}}, [](const TensorList& x) { return softmax(x[0], 0); }, {3, 5},
               [](const std::vector<Values>& in) {
                 Values tr(15), o(15);
                 for (int r = 0; r < 3; ++r)
                   for (int c = 0; c < 5; ++c) tr[static_cast<size_t>(c * 3 + r)] = in[0][static_cast<size_t>(r * 5 + c)];
                 Values y = softmax_rows(tr, 5, 3, false);
                 for (int r = 0; r < 3; ++r)
                   for (int c = 0; c < 5; ++c) o[static_cast<size_t>(r * 5 + c)] = y[static_cast<size_t>(c * 3 + r)];
                 return o;
               }});
  t.push_back({"log_softmax", {{3, 5}}, [](const TensorList& x) { return log_softmax(x[0], 1); }, {3, 5},
               [](const std::vector<Values>& in) { return softmax_rows(in[0], 3, 5, true); }, -2, 2, 0, true});
  t.push_back({"cross_entropy", {{4, 5}}, [](const TensorList& x) { return cross_entropy(x[0], from_indices({1, 0, 4, 1}, {4}, x[0].device())); },
               {}, [](const std::vector<Values>& in) {
                 Values ls = softmax_rows(in[0], 4, 5, true);
                 const int tg[4] = {1, 0, 4, 1};
                 double s = 0;
                 for (int r = 0; r < 4; ++r) s -= ls[static_cast<size_t>(r * 5 + tg[r])];
                 return Values{s / 4};
               }});
  t.push_back({"mse_loss", {{3, 2}, {3, 2}}, [](const TensorList& x) { return mse_loss(x[0], x[1]); }, {},
               [](const std::vector<Values>& in) {
                 double s = 0;
                 for (size_t i = 0; i < 6; ++i) s += (in[0][i] - in[1][i]) * (in[0][i] - in[1][i]);
                 return Values{s / 6};
               }});
  t.push_back({"layer_norm", {{3, 4}, {4}, {4}}, [](const TensorList& x) { return layer_norm(x[0], {4}, x[1], x[2]); }, {3, 4},
               [](const std::vector<Values>& in) {
                 Values o(12);
                 for (int r = 0; r < 3; ++r) {
                   double m = 0, v = 0;
                   for (int c = 0; c < 4; ++c) m += in[0][static_cast<size_t>(r * 4 + c)] / 4;
                   for (int c = 0; c < 4; ++c) v += std::pow(in[0][static_cast<size_t>(r * 4 + c)] - m, 2) / 4;
                   for (int c = 0; c < 4; ++c)
                     o[static_cast<size_t>(r * 4 + c)] = (in[0][static_cast<size_t>(r * 4 + c)] - m) / std::sqrt(v + 1e-5) * in[1][static_cast<size_t>(c)] + in[2][static_cast<size_t>(c)];
                 }
                 return o;
               }, -2, 2, 0, true});
  for (bool causal : {false, true}) {
    const Shape s = {1, 2, 3, 4};
    t.push_back({causal ? "attention_composite_causal" : "attention_composite", {s, s, s},
                 [causal](const TensorList& x) { return attention_composite(x[0], x[1], x[2], {std::nullopt, causal}); }, s,
                 [causal](const std::vector<Values>& in) { return attention_ref(in, 2, 3, 4, causal); }});
  }
  // ---- rows for argument variants: negative divisors, keepdim, layer_norm without weight/bias
  // or over two dims, casts, copy_ ----
  bin("div_neg_divisor", {2, 3}, {3}, [](auto& a, auto& b) { return a / b; }, [](double a, double b) { return a / b; }, -2, -0.5);
  t.push_back({"sum_keepdim", {s234}, [](const TensorList& x) { return sum(x[0], {1}, true); }, {2, 1, 4},
               reduce_ref(s234, {1}, 0, add2)});
  t.push_back({"mean_keepdim", {s234}, [](const TensorList& x) { return mean(x[0], {0, 2}, true); }, {1, 3, 1},
               reduce_ref(s234, {0, 2}, 0, add2, 1.0 / 8)});
  t.push_back({"max_keepdim", {s234}, [](const TensorList& x) { return max(x[0], {-1}, true); }, {2, 3, 1},
               reduce_ref(s234, {2}, -1e300, max2)});
  auto norm_ref = [](int rows, int cols, bool affine) {
    return [=](const std::vector<Values>& in) {
      Values o(static_cast<size_t>(rows * cols));
      for (int r = 0; r < rows; ++r) {
        double m = 0, v = 0;
        for (int c = 0; c < cols; ++c) m += in[0][static_cast<size_t>(r * cols + c)] / cols;
        for (int c = 0; c < cols; ++c) v += std::pow(in[0][static_cast<size_t>(r * cols + c)] - m, 2) / cols;
        for (int c = 0; c < cols; ++c) {
          const size_t i = static_cast<size_t>(r * cols + c);
          o[i] = (in[0][i] - m) / std::sqrt(v + 1e-5);
          if (affine) o[i] = o[i] * in[1][static_cast<size_t>(c)] + in[2][static_cast<size_t>(c)];
        }
      }
      return o;
    };
  };
  t.push_back({"layer_norm_no_affine", {{3, 4}}, [](const TensorList& x) { return layer_norm(x[0], {4}); }, {3, 4},
               norm_ref(3, 4, false)});
  t.push_back({"layer_norm_2d", {s234, {3, 4}, {3, 4}}, [](const TensorList& x) { return layer_norm(x[0], {3, 4}, x[1], x[2]); },
               s234, norm_ref(2, 12, true)});
  // Casts: a b8 mask cast to the input's dtype, and a constant through i64 (truncation: -2.7 -> -2).
  t.push_back({"casts", {{2, 3}},
               [](const TensorList& x) {
                 const Tensor& x0 = x[0];
                 Tensor c = to(to(full({2, 3}, -2.7, x0.dtype(), x0.device()), DType::i64), x0.dtype());
                 return x0 * to(gt(x0, zeros({}, x0.dtype(), x0.device())), x0.dtype()) + c;
               },
               {2, 3}, unary_ref([](double v) { return (v > 0 ? v : 0.0) - 2.0; }), -2, 2, 0.1});
  // copy_ of a transposed constant and of a broadcast row into fresh tensors, used as factors.
  t.push_back({"copy_", {{2, 3}},
               [](const TensorList& x) {
                 const Tensor& x0 = x[0];
                 Tensor a = zeros({2, 3}, x0.dtype(), x0.device()), b = zeros({2, 3}, x0.dtype(), x0.device());
                 copy_(a, transpose(from_vector({1, 2, 3, 4, 5, 6}, {3, 2}, DType::f64, x0.device()), 0, 1));
                 copy_(b, from_vector({-1, 0.5, 2}, {3}, DType::f32, x0.device()));
                 return x0 * a + b;
               },
               {2, 3}, [](const std::vector<Values>& in) {
                 const double a[6] = {1, 3, 5, 2, 4, 6}, b[3] = {-1, 0.5, 2};
                 Values o(6);
                 for (size_t i = 0; i < 6; ++i) o[i] = in[0][i] * a[i] + b[i % 3];
                 return o;
               }});
  t.push_back({"matmul_dot", {{4}, {4}}, [](const TensorList& x) { return matmul(x[0], x[1]); }, {},
               [](const std::vector<Values>& in) {
                 double s = 0;
                 for (size_t i = 0; i < 4; ++i) s += in[0][i] * in[1][i];
                 return Values{s};
               }, -2, 2, 0, true});

  // ---- everyday ops: minimum, pow of tensors, rounding, clamp, masks, index picks ----
  bin("minimum", {3, 4}, {4}, [](auto& a, auto& b) { return minimum(a, b); }, [](double a, double b) { return std::min(a, b); });
  bin("pow_tensor", {2, 3}, {3}, [](auto& a, auto& b) { return pow(a, b); }, [](double a, double b) { return std::pow(a, b); },
      0.5, 2, 0, true);
  un("maximum_scalar", [](auto& x) { return maximum(x, 0.3); }, [](double x) { return std::max(x, 0.3); });
  un("log1p", [](auto& x) { return log1p(x); }, [](double x) { return std::log1p(x); }, -0.5, 2, 0, true);
  un("expm1", [](auto& x) { return expm1(x); }, [](double x) { return std::expm1(x); }, -2, 2, 0, true);
  // Rounding: x + floor(x) has the derivative 1 (floor contributes 0). Rounding x itself, not a
  // product, keeps bf16 and f32 runs on the reference's side of every integer.
  un("floor", [](auto& x) { return x + floor(x); }, [](double x) { return x + std::floor(x); });
  un("ceil", [](auto& x) { return x + ceil(x); }, [](double x) { return x + std::ceil(x); });
  un("round", [](auto& x) { return x + round(x); }, [](double x) { return x + std::nearbyint(x); });
  un("clamp", [](auto& x) { return clamp(x, -0.8, 1.1); }, [](double x) { return std::min(std::max(x, -0.8), 1.1); },
     -2, 2, 0, true);
  un("clamp_min", [](auto& x) { return clamp_min(x, 0.2); }, [](double x) { return std::max(x, 0.2); });
  un("clamp_max", [](auto& x) { return clamp_max(x, 0.2); }, [](double x) { return std::min(x, 0.2); });
  const std::vector<bool> m6 = {true, false, false, true, true, false};
  auto fill_mask = [](const Tensor& x) {
    return gt(from_vector({1, -1, -1, 1, 1, -1}, {2, 3}, x.dtype(), x.device()), 0.0);
  };
  un("masked_fill", [fill_mask](auto& x) { return masked_fill(x, fill_mask(x), -1.5); },
     [](double x) { return x; }, -2, 2, 0);
  t.back().ref = [m6](const std::vector<Values>& in) {
    Values o(6);
    for (size_t i = 0; i < 6; ++i) o[i] = m6[i] ? -1.5 : in[0][i];
    return o;
  };
  t.push_back({"masked_fill_tensor_value", {{2, 3}, {}},
               [fill_mask](const TensorList& x) { return masked_fill(x[0], fill_mask(x[0]), x[1]); }, {2, 3},
               [m6](const std::vector<Values>& in) {
                 Values o(6);
                 for (size_t i = 0; i < 6; ++i) o[i] = m6[i] ? in[1][0] : in[0][i];
                 return o;
               }});
  for (int64_t diag : {0, -1, 1}) {
    for (bool upper : {true, false}) {
      const std::string name = std::string(upper ? "triu" : "tril") + (diag == 0 ? "" : diag < 0 ? "_minus1" : "_plus1");
      t.push_back({name, {{2, 3, 4}},
                   [upper, diag](const TensorList& x) { return upper ? triu(x[0], diag) : tril(x[0], diag); }, {2, 3, 4},
                   [upper, diag](const std::vector<Values>& in) {
                     Values o(24);
                     for (int64_t k = 0; k < 24; ++k) {
                       const int64_t i = (k / 4) % 3, j = k % 4;
                       const bool keep = upper ? j - i >= diag : j - i <= diag;
                       o[static_cast<size_t>(k)] = keep ? in[0][static_cast<size_t>(k)] : 0.0;
                     }
                     return o;
                   }});
    }
  }
  const std::vector<int64_t> pick = {0, 3, 1, 1, 2, 0};  // (3, 2): row i takes columns pick[2i], pick[2i + 1]
  t.push_back({"gather", {{3, 4}},
               [pick](const TensorList& x) { return gather(x[0], 1, from_indices(pick, {3, 2}, x[0].device())); }, {3, 2},
               gather_ref({3, 2}, {3, 4}, [pick](auto i) { return std::vector<int64_t>{i[0], pick[static_cast<size_t>(i[0] * 2 + i[1])]}; }),
               -2, 2, 0, true});
  t.push_back({"gather_dim0", {{3, 4}},
               [](const TensorList& x) { return gather(x[0], 0, from_indices({2, 0, 0, 1}, {1, 4}, x[0].device())); }, {1, 4},
               gather_ref({1, 4}, {3, 4}, [](auto i) { const int64_t m[4] = {2, 0, 0, 1}; return std::vector<int64_t>{m[i[1]], i[1]}; })});
  t.push_back({"scatter_add", {{3, 4}, {3, 2}},
               [pick](const TensorList& x) { return scatter_add(x[0], 1, from_indices(pick, {3, 2}, x[0].device()), x[1]); },
               {3, 4}, [pick](const std::vector<Values>& in) {
                 Values o = in[0];
                 for (size_t i = 0; i < 3; ++i)
                   for (size_t j = 0; j < 2; ++j) o[i * 4 + static_cast<size_t>(pick[i * 2 + j])] += in[1][i * 2 + j];
                 return o;
               }, -2, 2, 0, true});

  // ---- everyday reductions ----
  auto min2 = [](double a, double b) { return std::min(a, b); };
  t.push_back({"amin_dim1", {s234}, [](const TensorList& x) { return amin(x[0], {1}); }, {2, 4}, reduce_ref(s234, {1}, 1e300, min2)});
  t.push_back({"min_all", {s234}, [](const TensorList& x) { return min(x[0]); }, {}, reduce_ref(s234, {0, 1, 2}, 1e300, min2)});
  t.push_back({"max_dim_values", {s234}, [](const TensorList& x) { return std::get<0>(max(x[0], 1)); }, {2, 4},
               reduce_ref(s234, {1}, -1e300, max2), -2, 2, 0, true});
  t.push_back({"min_dim_values_keepdim", {s234}, [](const TensorList& x) { return std::get<0>(min(x[0], -1, true)); },
               {2, 3, 1}, reduce_ref(s234, {2}, 1e300, min2)});
  auto lse_ref = [](Shape shape, std::vector<int64_t> dims) {
    return [=](const std::vector<Values>& in) {
      Values m = reduce_ref(shape, dims, -1e300, [](double a, double b) { return std::max(a, b); })(in);
      Shape kept = shape;
      for (int64_t d : dims) kept[static_cast<size_t>(d)] = 1;
      Values s(m.size(), 0.0);
      for (int64_t i = 0; i < numel_of(shape); ++i) {
        auto idx = unravel(i, shape);
        for (int64_t d : dims) idx[static_cast<size_t>(d)] = 0;
        const size_t o = static_cast<size_t>(ravel(idx, kept));
        s[o] += std::exp(in[0][static_cast<size_t>(i)] - m[o]);
      }
      for (size_t o = 0; o < s.size(); ++o) s[o] = m[o] + std::log(s[o]);
      return s;
    };
  };
  t.push_back({"logsumexp_last", {s234}, [](const TensorList& x) { return logsumexp(x[0], {-1}); }, {2, 3},
               lse_ref(s234, {2}), -2, 2, 0, true});
  t.push_back({"logsumexp_all_keepdim", {s234}, [](const TensorList& x) { return logsumexp(x[0], {}, true); }, {1, 1, 1},
               lse_ref(s234, {0, 1, 2})});
  // Variance and friends through the two-pass formula on plain loops.
  auto moment_ref = [](Shape shape, std::vector<int64_t> dims, double correction, int kind) {
    return [=](const std::vector<Values>& in) {
      Shape kept = shape;
      int64_t n = 1;
      for (int64_t d : dims) {
        kept[static_cast<size_t>(d)] = 1;
        n *= shape[static_cast<size_t>(d)];
      }
      Values mean(static_cast<size_t>(numel_of(kept)), 0.0), ss(mean.size(), 0.0);
      for (int pass = 0; pass < 2; ++pass)
        for (int64_t i = 0; i < numel_of(shape); ++i) {
          auto idx = unravel(i, shape);
          for (int64_t d : dims) idx[static_cast<size_t>(d)] = 0;
          const size_t o = static_cast<size_t>(ravel(idx, kept));
          const double v = in[0][static_cast<size_t>(i)];
          if (pass == 0) mean[o] += v / static_cast<double>(n);
          else ss[o] += kind == 2 ? v * v : (v - mean[o]) * (v - mean[o]);
        }
      for (double& v : ss) v = kind == 2 ? std::sqrt(v) : v / (static_cast<double>(n) - correction);
      if (kind == 1)
        for (double& v : ss) v = std::sqrt(v);
      return ss;
    };
  };
  t.push_back({"var_dim1", {s234}, [](const TensorList& x) { return var(x[0], {1}); }, {2, 4},
               moment_ref(s234, {1}, 1, 0), -2, 2, 0, true});
  t.push_back({"var_biased_keepdim", {s234}, [](const TensorList& x) { return var(x[0], {0, 2}, false, true); }, {1, 3, 1},
               moment_ref(s234, {0, 2}, 0, 0)});
  t.push_back({"std_all", {s234}, [](const TensorList& x) { return gg::std(x[0]); }, {}, moment_ref(s234, {0, 1, 2}, 1, 1),
               -2, 2, 0, true});
  t.push_back({"std_last", {s234}, [](const TensorList& x) { return gg::std(x[0], {-1}); }, {2, 3}, moment_ref(s234, {2}, 1, 1)});
  t.push_back({"norm2_dim1", {s234}, [](const TensorList& x) { return norm(x[0], 2, {1}); }, {2, 4},
               moment_ref(s234, {1}, 0, 2), -2, 2, 0, true});
  t.push_back({"frobenius_norm", {{3, 4}}, [](const TensorList& x) { return frobenius_norm(x[0]); }, {},
               moment_ref({3, 4}, {0, 1}, 0, 2)});
  t.push_back({"norm1", {s234}, [](const TensorList& x) { return norm(x[0], 1, {-1}, true); }, {2, 3, 1},
               reduce_ref(s234, {2}, 0, [](double a, double b) { return a + std::abs(b); }), -2, 2, 0.1});
  t.push_back({"norm_inf", {s234}, [](const TensorList& x) { return norm(x[0], std::numeric_limits<double>::infinity(), {0}); },
               {3, 4}, reduce_ref(s234, {0}, 0, [](double a, double b) { return std::max(a, std::abs(b)); }), -2, 2, 0.1});

  const Shape small = {1, 1, 3, 2};
  t.push_back({"attention_composite_small", {small, small, small},
               [](const TensorList& x) { return attention_composite(x[0], x[1], x[2], {std::nullopt, true}); }, small,
               [](const std::vector<Values>& in) { return attention_ref(in, 1, 3, 2, true); }, -2, 2, 0, true});
  return t;
}


std::vector<Values> op_inputs(const OpCase& c) {
  manual_seed(std::hash<std::string>{}(c.name));
  std::vector<Values> xs;
  for (const Shape& s : c.shapes) {
    Values v = rand(s, DType::f64).to_vector<double>();
    for (double& e : v) {
      e = c.lo + (c.hi - c.lo) * e;
      if (c.gap > 0 && std::abs(e) < c.gap) e = e < 0 ? e - c.gap : e + c.gap;
    }
    xs.push_back(v);
  }
  return xs;
}

}  // namespace gg::test
