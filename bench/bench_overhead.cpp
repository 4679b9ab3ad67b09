// Per-op overhead of the tape and the dispatch layer, f32 on the CPU.
//
// The tiny-MLP benchmarks do almost no arithmetic (40×40 matrices), so their time per op is
// the fixed cost every op pays: shape checks, allocation, the dispatch call, and, when some
// input requires grad, a tape node (make_shared, edges, saved tensors, a std::function).
// "ops" counts the nodes recorded on the tape in one iteration; "time_per_op" is wall time
// divided by it. The 1-element add isolates one recorded op against the same op off the tape.
// The 256×256 matmul shows the other end: a kernel that dominates its overhead.
// maml_sine_step is one meta-iteration of examples/maml_sine (second order, and first order), the
// small step that the CPU half of issue 24's speed goal is about; "ops" counts its recorded nodes.
//
// Run: ./build/bench/bench_overhead --benchmark_min_time=0.2
#include <benchmark/benchmark.h>

#include <unordered_set>
#include <vector>

#include "gradgrad.h"

namespace {

// ------------------------------------------------------------------------- counting the tape

// Distinct FunctionNodes (recorded ops) reachable from `roots` by Node::next_edges, added to
// `seen`. Iterative (an explicit stack), so a long tape cannot overflow the call stack.
// AccumulateGrad nodes are the leaves' gradient sinks, not ops, and are not counted.
void collect_ops(const gg::TensorList& roots, std::unordered_set<const gg::Node*>& seen) {
  std::vector<const gg::Node*> stack;
  for (const gg::Tensor& t : roots)
    if (t.defined() && t.grad_fn()) stack.push_back(t.grad_fn().get());
  while (!stack.empty()) {
    const gg::Node* n = stack.back();
    stack.pop_back();
    if (!seen.insert(n).second) continue;
    for (const gg::Edge& e : n->next_edges)
      if (e.valid() && dynamic_cast<const gg::AccumulateGrad*>(e.node.get()) == nullptr)
        stack.push_back(e.node.get());
  }
}

int64_t count_ops(const gg::TensorList& roots) {
  std::unordered_set<const gg::Node*> seen;
  collect_ops(roots, seen);
  return static_cast<int64_t>(seen.size());
}

// Sets the "ops" and "time_per_op" counters. kIsIterationInvariantRate makes the counter
// ops × iterations / time; kInvert turns that rate into seconds per op.
void report_ops(benchmark::State& state, int64_t ops) {
  state.counters["ops"] = static_cast<double>(ops);
  state.counters["time_per_op"] = benchmark::Counter(
      static_cast<double>(ops), benchmark::Counter::kIsIterationInvariantRate | benchmark::Counter::kInvert);
}

// ------------------------------------------------------------------------- a tiny MLP

constexpr int64_t kWidth = 40;

// 40 → 40 → 40 → 1 with tanh between layers: 8 forward ops (3 matmul, 3 add, 2 tanh).
struct TinyMlp {
  gg::Tensor input;   // (1, 40), no grad
  gg::TensorList params;  // w1 (40, 40), b1 (40), w2 (40, 40), b2 (40), w3 (40, 1), b3 (1)

  TinyMlp() {
    gg::manual_seed(0);
    input = gg::randn({1, kWidth});
    const gg::Shape shapes[] = {{kWidth, kWidth}, {kWidth}, {kWidth, kWidth}, {kWidth}, {kWidth, 1}, {1}};
    for (const gg::Shape& s : shapes) params.push_back((gg::randn(s) * 0.1).detach().requires_grad_());
  }

  gg::Tensor forward() const {  // (1, 1)
    gg::Tensor h = gg::tanh(gg::matmul(input, params[0]) + params[1]);
    h = gg::tanh(gg::matmul(h, params[2]) + params[3]);
    return gg::matmul(h, params[4]) + params[5];
  }
};

// Σ g² over a list of gradients: the scalar whose gradient is the double backward.
gg::Tensor sum_of_squares(const gg::TensorList& gs) {
  gg::Tensor total;
  for (const gg::Tensor& g : gs) {
    gg::Tensor s = gg::sum(g * g);
    total = total.defined() ? total + s : s;
  }
  return total;
}

// One iteration of each benchmark body, with every stage recorded (create_graph on the last
// backward too) so that the ops it runs can be counted from the tape. Ops whose inputs are all
// constants (e.g. the ones_like seed) are not recorded and not counted, which makes the
// reported time per op a slight overestimate.
int64_t count_mlp_ops(int stages) {
  TinyMlp m;
  gg::Tensor y = m.forward();
  if (stages == 1) return count_ops({y});
  gg::TensorList g = gg::grad({y}, m.params, {}, std::nullopt, /*create_graph=*/true);
  gg::TensorList roots = g;
  roots.push_back(y);
  if (stages == 2) return count_ops(roots);
  gg::Tensor s = sum_of_squares(g);
  gg::TensorList gg2 = gg::grad({s}, m.params, {}, std::nullopt, /*create_graph=*/true, /*allow_unused=*/true);
  roots.push_back(s);
  roots.insert(roots.end(), gg2.begin(), gg2.end());
  return count_ops(roots);
}

void BM_mlp_forward(benchmark::State& state) {
  TinyMlp m;
  for (auto _ : state) {
    gg::Tensor y = m.forward();
    benchmark::DoNotOptimize(y.impl_ptr().get());
  }
  report_ops(state, count_mlp_ops(1));
}

void BM_mlp_forward_backward(benchmark::State& state) {
  TinyMlp m;
  for (auto _ : state) {
    gg::TensorList g = gg::grad({m.forward()}, m.params);
    benchmark::DoNotOptimize(g[0].impl_ptr().get());
  }
  report_ops(state, count_mlp_ops(2));
}

void BM_mlp_double_backward(benchmark::State& state) {
  TinyMlp m;
  for (auto _ : state) {
    gg::TensorList g = gg::grad({m.forward()}, m.params, {}, std::nullopt, /*create_graph=*/true);
    // b3's gradient is the constant 1, so Σ g² does not depend on b3: allow_unused.
    gg::TensorList g2 = gg::grad({sum_of_squares(g)}, m.params, {}, std::nullopt, /*create_graph=*/false, /*allow_unused=*/true);
    benchmark::DoNotOptimize(g2[0].impl_ptr().get());
  }
  report_ops(state, count_mlp_ops(3));
}

// ------------------------------------------------------------------------- the minimal op

void add_one_element(benchmark::State& state, bool requires_grad) {
  gg::Tensor a = gg::ones({1}), b = gg::ones({1});
  if (requires_grad) {
    a.requires_grad_();
    b.requires_grad_();
  }
  for (auto _ : state) {
    gg::Tensor y = gg::add(a, b);
    benchmark::DoNotOptimize(y.impl_ptr().get());
  }
  report_ops(state, 1);
}

void BM_add_1elem_tape(benchmark::State& state) { add_one_element(state, true); }
void BM_add_1elem_no_tape(benchmark::State& state) { add_one_element(state, false); }

// ------------------------------------------------------------------------- a real kernel

constexpr int64_t kMatN = 256;
constexpr double kMatmulFlops = 2.0 * kMatN * kMatN * kMatN;

void BM_matmul256_forward(benchmark::State& state) {
  gg::manual_seed(0);
  gg::Tensor a = gg::randn({kMatN, kMatN}), b = gg::randn({kMatN, kMatN});
  for (auto _ : state) {
    gg::Tensor y = gg::matmul(a, b);
    benchmark::DoNotOptimize(y.impl_ptr().get());
  }
  state.counters["flops"] = benchmark::Counter(kMatmulFlops, benchmark::Counter::kIsIterationInvariantRate);
}

void BM_matmul256_forward_backward(benchmark::State& state) {
  gg::manual_seed(0);
  gg::Tensor a = gg::randn({kMatN, kMatN}).requires_grad_(), b = gg::randn({kMatN, kMatN}).requires_grad_();
  const gg::Tensor dy = gg::ones({kMatN, kMatN});
  for (auto _ : state) {
    gg::TensorList g = gg::grad({gg::matmul(a, b)}, {a, b}, {dy});  // dA = dY·Bᵀ, dB = Aᵀ·dY
    benchmark::DoNotOptimize(g[0].impl_ptr().get());
  }
  state.counters["flops"] = benchmark::Counter(3 * kMatmulFlops, benchmark::Counter::kIsIterationInvariantRate);
}

// ------------------------------------------------------------------------- the MAML sinusoid step

// One meta-iteration of examples/maml_sine: 25 tasks of 10 support and 10 query points, the
// 1-40-40-1 ReLU MLP called on per-task weights (expand_params: stride-0 views), one inner SGD
// step through gg::grad (create_graph for second order), the outer gradient and Adam. The data
// is fixed: the work does not depend on its values.
struct MamlSine {
  static constexpr int64_t kTasks = 25, kShots = 10;
  gg::nn::MLP net{std::vector<int64_t>{1, 40, 40, 1}, gg::nn::Activation::relu};
  gg::optim::Adam adam{net.parameters(), {1e-3}};
  gg::Tensor sx, sy, qx, qy;

  MamlSine() {
    gg::manual_seed(0);
    sx = gg::randn({kTasks, kShots, 1}) * 3.0;
    qx = gg::randn({kTasks, kShots, 1}) * 3.0;
    sy = gg::sin(sx);
    qy = gg::sin(qx);
  }

  gg::Tensor meta_loss(bool second_order) const {
    const gg::nn::NamedTensors task = gg::nn::expand_params(net.named_parameters(), kTasks);
    const gg::TensorList theta = gg::nn::values(task);
    const gg::Tensor inner = gg::mse_loss(net(task, sx), sy) * static_cast<double>(kTasks);
    const gg::TensorList g = gg::grad({inner}, theta, {}, std::nullopt, /*create_graph=*/second_order);
    const gg::nn::NamedTensors adapted = gg::nn::with_values(task, gg::optim::sgd_update(theta, g, 0.01));
    return gg::mse_loss(net(adapted, qx), qy);
  }
};

void BM_maml_sine_step(benchmark::State& state) {
  const bool second_order = state.range(0) == 2;
  MamlSine m;
  for (auto _ : state) {
    gg::TensorList g = gg::grad({m.meta_loss(second_order)}, m.adam.params());
    m.adam.step(g);
    benchmark::DoNotOptimize(g[0].impl_ptr().get());
  }
  // The forward, the inner backward (recorded when second order) and the outer gradient's ops.
  const gg::Tensor loss = m.meta_loss(second_order);
  const gg::TensorList g = gg::grad({loss}, m.adam.params(), {}, std::nullopt, /*create_graph=*/true);
  gg::TensorList roots = g;
  roots.push_back(loss);
  report_ops(state, count_ops(roots));
}

}  // namespace

BENCHMARK(BM_mlp_forward);
BENCHMARK(BM_mlp_forward_backward);
BENCHMARK(BM_mlp_double_backward);
BENCHMARK(BM_add_1elem_tape);
BENCHMARK(BM_add_1elem_no_tape);
BENCHMARK(BM_matmul256_forward)->Unit(benchmark::kMicrosecond);
BENCHMARK(BM_matmul256_forward_backward)->Unit(benchmark::kMicrosecond);
BENCHMARK(BM_maml_sine_step)->Arg(2)->Arg(1)->ArgName("order")->Unit(benchmark::kMicrosecond);
