// Forward mode against reverse mode, f64 on the CPU (docs/tutorial.md §7, the cost model).
//
// jvp: J·v of an MLP z ↦ tanh(W₂ tanh(W₁ z)) of width w, by forward mode (func::jvp, one pass of
// the network with the tangent beside each value) and by the double-VJP trick (reverse mode only:
// a recorded backward with a dummy cotangent, then a backward through it).
// jacobian: the whole Jacobian of z ↦ tanh(W z), W (m, n), by jacfwd (n JVPs) and jacrev (m VJPs)
// as the input size n and the output size m change; the crossover is where the two meet.
// hvp: H·v of Σ tanh(W z)², forward over reverse (func::hvp) against reverse over reverse.
//
// Run: ./build/bench/bench_forward --benchmark_min_time=0.2
#include <benchmark/benchmark.h>

#include "gradgrad.h"

namespace {

using gg::Tensor;
using gg::TensorList;

struct Mlp {
  Tensor w1, w2, z, v;
  explicit Mlp(int64_t width) {
    gg::manual_seed(0);
    w1 = gg::randn({width, width}, gg::DType::f64) * (1.0 / std::sqrt(static_cast<double>(width)));
    w2 = gg::randn({width, width}, gg::DType::f64) * (1.0 / std::sqrt(static_cast<double>(width)));
    z = gg::randn({width}, gg::DType::f64);
    v = gg::randn({width}, gg::DType::f64);
  }
  Tensor operator()(const Tensor& x) const { return gg::tanh(gg::matmul(w2, gg::tanh(gg::matmul(w1, x)))); }
};

void BM_jvp_forward_mode(benchmark::State& state) {
  const Mlp f(state.range(0));
  for (auto _ : state) benchmark::DoNotOptimize(gg::jvp(f, f.z, f.v));
}

void BM_jvp_double_vjp(benchmark::State& state) {
  const Mlp f(state.range(0));
  for (auto _ : state) {
    Tensor x = f.z.detach().requires_grad_();
    Tensor y = f(x);
    Tensor u = gg::zeros_like(y).requires_grad_();
    Tensor jt_u = gg::grad(y, x, u, /*retain_graph=*/true, /*create_graph=*/true);
    benchmark::DoNotOptimize(gg::grad(jt_u, u, f.v));
  }
}

struct Linear {
  Tensor w, z;
  Linear(int64_t n, int64_t m) {
    gg::manual_seed(1);
    w = gg::randn({m, n}, gg::DType::f64);
    z = gg::randn({n}, gg::DType::f64);
  }
  Tensor operator()(const Tensor& x) const { return gg::tanh(gg::matmul(w, x)); }
};

void BM_jacfwd(benchmark::State& state) {
  const Linear f(state.range(0), state.range(1));
  for (auto _ : state) benchmark::DoNotOptimize(gg::func::jacfwd(f, f.z));
}

void BM_jacrev(benchmark::State& state) {
  const Linear f(state.range(0), state.range(1));
  for (auto _ : state) benchmark::DoNotOptimize(gg::func::jacrev(f, f.z));
}

void BM_hvp_forward_over_reverse(benchmark::State& state) {
  const Mlp f(state.range(0));
  auto loss = [&](const Tensor& x) { return gg::sum(gg::pow(f(x), 2.0)); };
  for (auto _ : state) benchmark::DoNotOptimize(gg::func::hvp(loss, f.z, f.v));
}

void BM_hvp_reverse_over_reverse(benchmark::State& state) {
  const Mlp f(state.range(0));
  for (auto _ : state) {
    Tensor x = f.z.detach().requires_grad_();
    Tensor g = gg::grad(gg::sum(gg::pow(f(x), 2.0)), x, {}, /*retain_graph=*/true, /*create_graph=*/true);
    benchmark::DoNotOptimize(gg::grad(gg::sum(g * f.v), x));
  }
}

BENCHMARK(BM_jvp_forward_mode)->Arg(16)->Arg(256)->Unit(benchmark::kMicrosecond);
BENCHMARK(BM_jvp_double_vjp)->Arg(16)->Arg(256)->Unit(benchmark::kMicrosecond);
BENCHMARK(BM_hvp_forward_over_reverse)->Arg(16)->Arg(256)->Unit(benchmark::kMicrosecond);
BENCHMARK(BM_hvp_reverse_over_reverse)->Arg(16)->Arg(256)->Unit(benchmark::kMicrosecond);
// (n inputs, m outputs): n + m = 68, from 4 inputs and 64 outputs to the reverse
BENCHMARK(BM_jacfwd)->Args({4, 64})->Args({16, 52})->Args({34, 34})->Args({52, 16})->Args({64, 4})->Unit(benchmark::kMicrosecond);
BENCHMARK(BM_jacrev)->Args({4, 64})->Args({16, 52})->Args({34, 34})->Args({52, 16})->Args({64, 4})->Unit(benchmark::kMicrosecond);

}  // namespace
