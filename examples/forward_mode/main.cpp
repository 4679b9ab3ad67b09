// Forward-mode autodiff with gradgrad: a guided tour in four parts.
//
//   (a) Dual numbers: x + ε·ẋ (ε² = 0) pushed through a scalar function gives f(x) and f'(x)·ẋ in
//       one pass. Checked against the double-VJP JVP (a backward, then the backward of that
//       backward, the way a JVP was computed before forward mode) and central differences.
//   (b) Whole Jacobians: jacfwd takes one JVP per input, jacrev one VJP per output, so jacfwd
//       wins for few inputs and many outputs and jacrev for the reverse. Both are timed on a small
//       MLP in both shapes, and must agree.
//   (c) Hessian-vector products of a small network's loss: forward over reverse (func::hvp, one
//       backward carrying a tangent) against reverse over reverse (a gradient with create_graph,
//       then the gradient of ⟨∇f, v⟩): equal to 1e-12 in f64.
//   (d) A JVP through gg::attention (its forward-mode rule) against central differences and the
//       double-VJP JVP (through the fused backward and its backward), with and without the causal
//       mask and with grouped key/value heads.
//
// Everything runs in f64. The program prints a report and exits non-zero if any check fails.
// Output (--out): metrics.jsonl, one "check" record per check and the timings of (b) and (c).
#include <CLI/CLI.hpp>
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <string>
#include <vector>

#include "common/cli.h"
#include "common/metrics.h"
#include "common/run.h"
#include "gradgrad.h"

namespace {

constexpr gg::DType kF64 = gg::DType::f64;
gg::Device g_device = gg::Device::cpu();

gg::Tensor randn(const gg::Shape& shape) { return gg::randn(shape, kF64, g_device); }
double max_abs(const gg::Tensor& t) { return gg::max(gg::abs(t)).item(); }
// |a - b|∞ / max(|b|∞, 1e-300): the error of a against the reference b.
double rel_error(const gg::Tensor& a, const gg::Tensor& b) { return max_abs(a - b) / std::max(max_abs(b), 1e-300); }

// Milliseconds of the fastest of `reps` calls of fn (the minimum: the least disturbed run).
template <typename Fn>
double best_ms(int reps, Fn&& fn) {
  double best = 1e300;
  for (int r = 0; r < reps; ++r) {
    const auto t0 = std::chrono::steady_clock::now();
    fn();
    best = std::min(best, 1e3 * std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
  }
  return best;
}

// J(x)·v the old way, from reverse mode alone. g(u) = Jᵀu is linear in the cotangent u, so the
// gradient of ⟨g(u), v⟩ with respect to u is J·v: two backward passes and the first one's graph.
gg::Tensor jvp_by_double_vjp(const gg::TensorFn& f, const gg::Tensor& x, const gg::Tensor& v) {
  const gg::Tensor leaf = x.detach().requires_grad_();
  const gg::Tensor y = f(leaf);
  const gg::Tensor u = gg::zeros_like(y).requires_grad_();  // any value: g is linear in u
  const gg::Tensor g = gg::grad(y, leaf, u, std::nullopt, /*create_graph=*/true);
  return gg::grad(gg::sum(g * v), u);
}

// Central differences (f(x + hv) − f(x − hv)) / 2h = J·v + O(h²).
gg::Tensor jvp_by_finite_differences(const gg::TensorFn& f, const gg::Tensor& x, const gg::Tensor& v,
                                     double h = 1e-6) {
  gg::NoGradGuard no_grad;
  return (f(x + v * h) - f(x - v * h)) / (2.0 * h);
}

struct Check {
  std::string name;
  double error, tolerance;
  bool ok() const { return error <= tolerance; }
};

void report(const Check& c) {
  std::printf("    %-50s %9.2e  (tolerance %.0e)  %s\n", c.name.c_str(), c.error, c.tolerance, c.ok() ? "ok" : "FAILED");
}

// ==================================================================================== part (a)
// f(x) = sin(x)·exp(x/2) + x³, elementwise, at a few points: the tangent of the dual number is
// f'(x)·ẋ, here with ẋ = 1 so it is the derivative itself.
gg::Tensor f_a(const gg::Tensor& x) { return gg::sin(x) * gg::exp(x * 0.5) + gg::pow(x, 3.0); }

std::vector<Check> part_a() {
  std::printf("(a) Dual numbers on f(x) = sin(x) exp(x/2) + x^3\n\n");
  const gg::Tensor x = gg::from_vector({-1.5, -0.3, 0.0, 0.7, 2.0}, {5}, kF64, g_device);
  const gg::Tensor xdot = gg::ones_like(x);
  gg::Tensor tangent;
  {
    gg::fwd::DualLevel level;                              // tangents live as long as their level
    const gg::Tensor y = f_a(gg::fwd::make_dual(x, xdot));  // x + ε·ẋ through f: one pass
    tangent = gg::fwd::unpack_dual(y).tangent;              // f'(x)·ẋ
  }
  const gg::Tensor exact = gg::exp(x * 0.5) * (gg::cos(x) + 0.5 * gg::sin(x)) + 3.0 * x * x;
  const gg::Tensor bob = jvp_by_double_vjp(f_a, x, xdot);
  const gg::Tensor fd = jvp_by_finite_differences(f_a, x, xdot);
  std::printf("    %6s  %18s  %18s  %18s\n", "x", "dual tangent", "double-VJP", "finite diff");
  const auto xs = x.to_vector<double>(), ts = tangent.to_vector<double>(), bs = bob.to_vector<double>(),
             fs = fd.to_vector<double>();
  for (size_t i = 0; i < xs.size(); ++i) std::printf("    %6.2f  %18.12f  %18.12f  %18.12f\n", xs[i], ts[i], bs[i], fs[i]);
  std::printf("\n");
  return {{"a: dual tangent vs closed form f'(x)", rel_error(tangent, exact), 1e-14},
          {"a: dual tangent vs double-VJP JVP", rel_error(tangent, bob), 1e-14},
          {"a: dual tangent vs finite differences", rel_error(tangent, fd), 1e-8}};
}

// ==================================================================================== part (b)
// f: R^n -> R^m, f(z) = W2 tanh(W1 z + b1), a hidden layer of 32. jacfwd runs n forward passes
// carrying a basis tangent each, jacrev one recorded forward and m backward passes.
struct Mlp {
  gg::Tensor w1, b1, w2;
  gg::Tensor operator()(const gg::Tensor& z) const { return gg::matmul(w2, gg::tanh(gg::matmul(w1, z) + b1)); }
};

Mlp make_mlp(int64_t n, int64_t m, int64_t hidden = 32) {
  return {randn({hidden, n}) / std::sqrt(double(n)), randn({hidden}), randn({m, hidden}) / std::sqrt(double(hidden))};
}

std::vector<Check> part_b(examples::Metrics& metrics, bool smoke) {
  const int64_t few = 4, many = smoke ? 32 : 256;
  const int reps = smoke ? 1 : 5;
  std::printf("(b) jacfwd (one JVP per input) vs jacrev (one VJP per output), f(z) = W2 tanh(W1 z + b1)\n\n");
  std::printf("    %6s  %6s  %12s  %12s  %10s  %s\n", "n", "m", "jacfwd ms", "jacrev ms", "|fwd-rev|", "faster");
  std::vector<Check> checks;
  for (const auto& [n, m] : {std::pair{few, many}, std::pair{many, few}}) {
    const gg::TensorFn f = make_mlp(n, m);
    const gg::Tensor z = randn({n});
    gg::Tensor jf, jr;
    const double t_fwd = best_ms(reps, [&] { jf = gg::func::jacfwd(f, z); });
    const double t_rev = best_ms(reps, [&] { jr = gg::func::jacrev(f, z); });
    const double err = rel_error(jf, jr);
    std::printf("    %6lld  %6lld  %12.3f  %12.3f  %10.1e  %s\n", static_cast<long long>(n), static_cast<long long>(m),
                t_fwd, t_rev, err, t_fwd < t_rev ? "jacfwd" : "jacrev");
    metrics.write({{"phase", "timing"}, {"part", "jacobian"}, {"n", n}, {"m", m}, {"jacfwd_ms", t_fwd},
                   {"jacrev_ms", t_rev}});
    checks.push_back({"b: jacfwd vs jacrev, n " + std::to_string(n) + ", m " + std::to_string(m), err, 1e-12});
  }
  std::printf("\n    (the timings are not checked: they depend on the machine; see bench/bench_forward_mode.cpp)\n\n");
  return checks;
}

// ==================================================================================== part (c)
// The loss of a 4 -> 16 -> 16 -> 1 tanh network on 8 points, as a function of all its weights
// (a list of tensors, so func::hvp gives one product per weight).
gg::Tensor net_loss(const gg::TensorList& p, const gg::Tensor& inputs, const gg::Tensor& targets) {
  gg::Tensor h = gg::tanh(gg::matmul(inputs, p[0]) + p[1]);
  h = gg::tanh(gg::matmul(h, p[2]) + p[3]);
  return gg::mse_loss(gg::matmul(h, p[4]) + p[5], targets);
}

// H·v by reverse over reverse: ∇f recorded (create_graph), then the gradient of ⟨∇f, v⟩.
gg::TensorList hvp_by_reverse_over_reverse(const gg::func::ListScalarFn& f, const gg::TensorList& xs,
                                           const gg::TensorList& vs) {
  gg::TensorList leaves;
  for (const gg::Tensor& x : xs) leaves.push_back(x.detach().requires_grad_());
  const gg::TensorList g = gg::grad({f(leaves)}, leaves, {}, std::nullopt, /*create_graph=*/true);
  gg::Tensor gv = gg::sum(g[0] * vs[0]);
  for (size_t i = 1; i < g.size(); ++i) gv = gv + gg::sum(g[i] * vs[i]);
  return gg::grad({gv}, leaves);
}

std::vector<Check> part_c(examples::Metrics& metrics, bool smoke) {
  std::printf("(c) Hessian-vector product of a 4 -> 16 -> 16 -> 1 tanh network's loss (8 points, 369 weights)\n\n");
  const gg::Tensor inputs = randn({8, 4}), targets = randn({8, 1});
  const gg::TensorList params = {randn({4, 16}) * 0.5, randn({16}) * 0.1, randn({16, 16}) * 0.25,
                                 randn({16}) * 0.1, randn({16, 1}) * 0.25, randn({1}) * 0.1};
  gg::TensorList vs;
  for (const gg::Tensor& p : params) vs.push_back(gg::randn_like(p));
  const gg::func::ListScalarFn f = [&](const gg::TensorList& p) { return net_loss(p, inputs, targets); };
  gg::TensorList fwd, rev;
  const int reps = smoke ? 1 : 20;
  const double t_fwd = best_ms(reps, [&] { fwd = gg::func::hvp(f, params, vs); });
  const double t_rev = best_ms(reps, [&] { rev = hvp_by_reverse_over_reverse(f, params, vs); });
  double err = 0.0, scale = 0.0;
  for (size_t i = 0; i < fwd.size(); ++i) {
    err = std::max(err, max_abs(fwd[i] - rev[i]));
    scale = std::max(scale, max_abs(rev[i]));
  }
  std::printf("    forward over reverse %.3f ms, reverse over reverse %.3f ms, |Hv|inf = %.4f\n\n", t_fwd, t_rev, scale);
  metrics.write({{"phase", "timing"}, {"part", "hvp"}, {"forward_over_reverse_ms", t_fwd},
                 {"reverse_over_reverse_ms", t_rev}});
  return {{"c: fwd-over-rev vs rev-over-rev HVP (abs)", err, 1e-12}};
}

// ==================================================================================== part (d)
// O = attention(q, k, v) with tangents on q, k and v at once: Ȯ from attention's JVP rule,
// against central differences of the fused forward.
std::vector<Check> part_d() {
  std::printf("(d) JVP through gg::attention (q, k, v all carrying tangents), B 1, N 24, d 8\n\n");
  struct Case {
    const char* name;
    int64_t hq, hkv;
    bool causal;
  };
  std::vector<Check> checks;
  for (const Case& c : {Case{"full", 2, 2, false}, Case{"causal", 2, 2, true}, Case{"causal, GQA 4/2", 4, 2, true}}) {
    gg::AttentionOptions o;
    o.causal = c.causal;
    const gg::TensorList xs = {randn({1, c.hq, 24, 8}), randn({1, c.hkv, 24, 8}), randn({1, c.hkv, 24, 8})};
    const gg::TensorList vs = {randn({1, c.hq, 24, 8}), randn({1, c.hkv, 24, 8}), randn({1, c.hkv, 24, 8})};
    const auto attn = [&o](const gg::TensorList& p) { return gg::TensorList{gg::attention(p[0], p[1], p[2], o)}; };
    const gg::Tensor jvp = gg::func::jvp(attn, xs, vs).tangents[0];
    const double h = 1e-6;
    gg::TensorList plus, minus;
    for (size_t i = 0; i < 3; ++i) {
      plus.push_back(xs[i] + vs[i] * h);
      minus.push_back(xs[i] - vs[i] * h);
    }
    const gg::Tensor fd = (attn(plus)[0] - attn(minus)[0]) / (2.0 * h);
    // The double-VJP JVP through attention: its fused backward, then the backward of that.
    gg::TensorList leaves;
    for (const gg::Tensor& x : xs) leaves.push_back(x.detach().requires_grad_());
    const gg::Tensor y = attn(leaves)[0], u = gg::zeros_like(y).requires_grad_();
    const gg::TensorList g = gg::grad({y}, leaves, {u}, std::nullopt, /*create_graph=*/true);
    const gg::Tensor bob = gg::grad(gg::sum(g[0] * vs[0]) + gg::sum(g[1] * vs[1]) + gg::sum(g[2] * vs[2]), u);
    const double e_fd = rel_error(jvp, fd), e_bob = rel_error(jvp, bob);
    std::printf("    %-16s |J v|inf = %8.4f   vs finite differences %.1e, vs double-VJP %.1e\n", c.name, max_abs(jvp),
                e_fd, e_bob);
    checks.push_back({std::string("d: attention JVP vs finite diff, ") + c.name, e_fd, 1e-7});
    checks.push_back({std::string("d: attention JVP vs double-VJP, ") + c.name, e_bob, 1e-12});
  }
  std::printf("\n");
  return checks;
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"Forward-mode autodiff with gradgrad: dual numbers, jacfwd vs jacrev, forward-over-reverse HVPs, "
               "a JVP through attention (all f64, self-checking)"};
  std::string out_dir = "forward_mode_out", device_name;
  bool smoke = false;
  app.add_option("--out", out_dir, "output directory (metrics.jsonl)")->capture_default_str();
  examples::add_device_option(app, device_name);
  app.add_flag("--smoke", smoke, "the ctest's run: smaller Jacobians in (b), each timing taken once");
  CLI11_PARSE(app, argc, argv);

  std::printf("gradgrad forward mode: a worked example (f64, %s)\n", device_name.c_str());
  std::printf("==================================================\n\n");
  return examples::prepare_and_run(device_name, g_device, out_dir, [&] {
    examples::Metrics metrics(out_dir, "forward_mode", {{"device", device_name}, {"dtype", "f64"}, {"smoke", smoke}});
    gg::manual_seed(0);
    std::vector<Check> checks;
    for (const std::vector<Check>& part : {part_a(), part_b(metrics, smoke), part_c(metrics, smoke), part_d()})
      checks.insert(checks.end(), part.begin(), part.end());
    std::printf("Checks (relative error unless marked abs)\n\n");
    bool all_ok = true;
    for (const Check& c : checks) {
      report(c);
      all_ok = all_ok && c.ok();
      metrics.write({{"phase", "check"}, {"check", c.name}, {"error", c.error}, {"tolerance", c.tolerance},
                     {"ok", c.ok()}});
    }
    std::printf("\n%s\nmetrics: %s\n", all_ok ? "all checks passed" : "SOME CHECKS FAILED", metrics.path().c_str());
    return all_ok ? 0 : 1;
  });
}
