// Higher-order derivatives with gradgrad: a guided tour in three parts.
//
//   (a) Derivatives of tanh up to order 6, by calling gg::grad on its own result. Each call
//       with create_graph=true records the backward pass onto the tape, so the gradient is
//       itself a differentiable function of x. Checked against closed forms.
//   (b) A Hessian-vector product of a small neural network's loss with gg::hvp, checked
//       against central finite differences of the gradient.
//   (c) Newton's method on the Rosenbrock function, where every Newton step is solved by
//       conjugate gradient using only Hessian-vector products (the Hessian is never formed).
//
// Everything runs in f64: finite-difference checks in f32 are too coarse to judge anything.
// The program prints a report and exits non-zero if any check fails, so it doubles as a test.
// Output (--out): metrics.jsonl (the checks, and f at every Newton step as "loss") and a plot of
// the Newton path on Rosenbrock's contours with f per step (higher_order.png, with gnuplot).
#include <CLI/CLI.hpp>
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <fstream>
#include <string>
#include <vector>

#include "common/metrics.h"
#include "common/report.h"
#include "common/run.h"
#include "gradgrad.h"

namespace {

constexpr gg::DType kF64 = gg::DType::f64;

// A 0-dim f64 tensor holding `v`.
gg::Tensor scalar(double v) { return gg::scalar_tensor(v, kF64); }

// ==================================================================================== part (a)
// Teaches: nesting gg::grad. d/dx of tanh(x) is a tensor that still remembers how it was
// computed from x (create_graph=true), so we can differentiate it again, and again.

constexpr int kMaxOrder = 6;

// A polynomial in t as its coefficients: c[i] multiplies t^i.
using Poly = std::vector<double>;

double eval(const Poly& c, double t) {
  double r = 0.0;
  for (size_t i = c.size(); i-- > 0;) r = r * t + c[i];  // Horner's rule
  return r;
}

// With t = tanh(x) we have dt/dx = 1 - t², so by the chain rule any polynomial p(t) has
// d/dx p(t) = (1 - t²)·p'(t). Starting from p_0 = t this gives every derivative of tanh
// as a polynomial in t: p_{k+1} = (1 - t²)·p_k'.
Poly next_tanh_derivative(const Poly& p) {
  Poly dp(p.size() > 1 ? p.size() - 1 : 1, 0.0);  // p'
  for (size_t i = 1; i < p.size(); ++i) dp[i - 1] = static_cast<double>(i) * p[i];
  Poly q(dp.size() + 2, 0.0);                      // (1 - t²)·p'
  for (size_t i = 0; i < dp.size(); ++i) {
    q[i] += dp[i];
    q[i + 2] -= dp[i];
  }
  return q;
}

// Closed forms p_0 .. p_kMaxOrder.
std::vector<Poly> tanh_derivative_polys() {
  std::vector<Poly> polys{{0.0, 1.0}};  // p_0(t) = t
  for (int k = 0; k < kMaxOrder; ++k) polys.push_back(next_tanh_derivative(polys.back()));
  return polys;
}

// d^k tanh / dx^k at x for k = 0 .. kMaxOrder, by repeated gg::grad.
std::vector<double> tanh_derivatives_by_autograd(double x0) {
  gg::Tensor x = scalar(x0).requires_grad_();
  gg::Tensor d = gg::tanh(x);  // order 0
  std::vector<double> out{d.item()};
  for (int k = 1; k <= kMaxOrder; ++k) {
    // create_graph=true: the backward we are running is itself recorded, so `d` (the k-th
    // derivative) is again a function of x on the tape and the next grad call can use it.
    d = gg::grad(d, x, gg::Tensor(), std::nullopt, /*create_graph=*/true);
    out.push_back(d.item());
  }
  return out;
}

// Prints the table and returns the largest absolute error.
double part_a_tanh_derivatives() {
  std::printf("(a) Derivatives of tanh by nested gg::grad vs the closed form p_k(tanh x)\n");
  std::printf("    p_0 = t, p_{k+1} = (1 - t^2) p_k'(t); cells: autograd value  [|error|]\n\n");
  const std::vector<Poly> polys = tanh_derivative_polys();
  const double points[] = {-1.5, -0.3, 0.0, 0.7, 2.0};

  std::printf("    %-5s", "k");
  for (double x : points) {
    char label[32];
    std::snprintf(label, sizeof label, "x = %.1f", x);
    std::printf("  %-21s", label);
  }
  std::printf("\n");

  std::vector<std::vector<double>> by_point;
  for (double x : points) by_point.push_back(tanh_derivatives_by_autograd(x));

  double max_err = 0.0;
  for (int k = 0; k <= kMaxOrder; ++k) {
    std::printf("    %-5d", k);
    for (size_t j = 0; j < by_point.size(); ++j) {
      const double exact = eval(polys[static_cast<size_t>(k)], std::tanh(points[j]));
      const double got = by_point[j][static_cast<size_t>(k)];
      const double err = std::abs(got - exact);
      max_err = std::max(max_err, err);
      std::printf("  %10.6f [%8.1e]", got, err);
    }
    std::printf("\n");
  }
  std::printf("\n    max |error| = %.2e (tolerance 1e-9)\n\n", max_err);
  return max_err;
}

// ==================================================================================== part (b)
// Teaches: gg::hvp on a real model. The parameters of a 3 -> 8 -> 1 tanh network are packed
// into one vector theta so that the loss is a scalar function f(theta), the form gg::hvp wants.
// H·v costs about two gradient evaluations, never the n×n Hessian.

struct MlpData {
  gg::Tensor inputs;   // (kPoints, 3)
  gg::Tensor targets;  // (kPoints, 1)
};

constexpr int64_t kIn = 3, kHidden = 8, kOut = 1, kPoints = 6;
constexpr int64_t kNumParams = kIn * kHidden + kHidden + kHidden * kOut + kOut;  // 41

// Views of theta as the network's weights: slices are differentiable, so gradients with
// respect to W1, b1, ... flow back into the right entries of theta.
gg::Tensor mlp_loss(const gg::Tensor& theta, const MlpData& data) {
  int64_t at = 0;
  auto take = [&](const gg::Shape& shape) {
    const int64_t n = gg::numel_of(shape);
    gg::Tensor piece = gg::reshape(gg::slice(theta, 0, at, at + n), shape);
    at += n;
    return piece;
  };
  gg::Tensor w1 = take({kIn, kHidden}), b1 = take({kHidden});
  gg::Tensor w2 = take({kHidden, kOut}), b2 = take({kOut});
  gg::Tensor hidden = gg::tanh(gg::matmul(data.inputs, w1) + b1);  // (kPoints, kHidden)
  gg::Tensor prediction = gg::matmul(hidden, w2) + b2;             // (kPoints, kOut)
  return gg::mse_loss(prediction, data.targets);
}

// ∇f(theta) as plain numbers, through a fresh leaf so nothing is recorded on `theta`.
std::vector<double> gradient_at(const gg::ScalarFn& f, const gg::Tensor& theta) {
  gg::Tensor leaf = theta.detach().requires_grad_();
  return gg::grad(f(leaf), leaf).to_vector<double>();
}

// Returns the relative error of gg::hvp against finite differences.
double part_b_mlp_hvp() {
  std::printf("(b) Hessian-vector product of an MLP loss (3 -> 8 -> 1, tanh, MSE on %lld points)\n",
              static_cast<long long>(kPoints));
  gg::manual_seed(7);
  const MlpData data{gg::randn({kPoints, kIn}, kF64), gg::randn({kPoints, kOut}, kF64)};
  const gg::ScalarFn f = [&data](const gg::Tensor& theta) { return mlp_loss(theta, data); };
  const gg::Tensor theta = gg::randn({kNumParams}, kF64) * 0.5;
  const gg::Tensor v = gg::randn({kNumParams}, kF64);

  const std::vector<double> hv = gg::hvp(f, theta, v).to_vector<double>();

  // Central differences of the gradient along v: (∇f(θ + hv) − ∇f(θ − hv)) / 2h = H·v + O(h²).
  const double h = 1e-5;
  const std::vector<double> g_plus = gradient_at(f, theta + v * h);
  const std::vector<double> g_minus = gradient_at(f, theta - v * h);
  double diff2 = 0.0, ref2 = 0.0;
  for (size_t i = 0; i < hv.size(); ++i) {
    const double fd = (g_plus[i] - g_minus[i]) / (2.0 * h);
    diff2 += (hv[i] - fd) * (hv[i] - fd);
    ref2 += fd * fd;
  }
  const double rel = std::sqrt(diff2 / ref2);
  std::printf("    %lld parameters, f(theta) = %.6f, |H v| = %.6f\n", static_cast<long long>(kNumParams),
              f(theta).item(), std::sqrt(ref2));
  std::printf("    first entries  hvp: % .8f % .8f % .8f\n", hv[0], hv[1], hv[2]);
  std::printf("    finite diff (h=%g): % .8f % .8f % .8f\n", h, (g_plus[0] - g_minus[0]) / (2 * h),
              (g_plus[1] - g_minus[1]) / (2 * h), (g_plus[2] - g_minus[2]) / (2 * h));
  std::printf("    relative error |hvp - fd| / |fd| = %.2e (tolerance 1e-6)\n\n", rel);
  return rel;
}

// ==================================================================================== part (c)
// Teaches: a matrix-free second-order optimiser. Newton's step solves H·p = −∇f; conjugate
// gradient needs only products H·v, which gg::hvp supplies, so the Hessian is never built.

// Rosenbrock's banana: f(x, y) = (1 − x)² + 100 (y − x²)², minimum 0 at (1, 1).
gg::Tensor rosenbrock(const gg::Tensor& xy) {
  gg::Tensor x = gg::slice(xy, 0, 0, 1), y = gg::slice(xy, 0, 1, 2);
  gg::Tensor a = 1.0 - x, b = y - x * x;
  return gg::sum(a * a + 100.0 * b * b);
}

double dot(const gg::Tensor& a, const gg::Tensor& b) { return gg::sum(a * b).item(); }

struct CgResult {
  gg::Tensor p;
  int iterations;
};

// Conjugate gradient on H·p = −g, with H available only as v ↦ hvp(f, x, v). Stops on a small
// residual, or when it meets a direction of non-positive curvature (H not positive definite
// there): then it returns the step built so far, or −g on the first iteration, which is still
// a descent direction (the truncated Newton / Steihaug rule).
CgResult newton_direction_by_cg(const gg::ScalarFn& f, const gg::Tensor& x, const gg::Tensor& g) {
  gg::Tensor p = gg::zeros_like(g);
  gg::Tensor r = -g;  // residual −g − H·p with p = 0
  gg::Tensor d = r;
  double rr = dot(r, r);
  const double tol2 = 1e-24 * rr;  // relative residual 1e-12
  const int max_iter = 10 * static_cast<int>(g.numel());
  for (int it = 0; it < max_iter; ++it) {
    gg::Tensor hd = gg::hvp(f, x, d);  // the only access to the Hessian
    const double curvature = dot(d, hd);
    if (curvature <= 0.0) return {it == 0 ? -g : p, it};
    const double alpha = rr / curvature;
    p = p + d * alpha;
    r = r - hd * alpha;
    const double rr_new = dot(r, r);
    if (rr_new <= tol2) return {p, it + 1};
    d = r + d * (rr_new / rr);
    rr = rr_new;
  }
  return {p, max_iter};
}

// Backtracking (Armijo) line search: halve t until f decreases by a fraction of what the
// linear model predicts. Newton steps are usually accepted whole (t = 1) near the minimum.
double backtrack(const gg::ScalarFn& f, const gg::Tensor& x, double fx, const gg::Tensor& g, const gg::Tensor& p) {
  const double slope = dot(g, p);  // < 0 for a descent direction
  double t = 1.0;
  for (int i = 0; i < 60; ++i, t *= 0.5)
    if (f(x + p * t).item() <= fx + 1e-4 * t * slope) return t;
  return t;
}

// Returns true when Newton's method reached |∇f| < 1e-10 near (1, 1). Logs f at every step
// (as "loss") and appends each iterate to `path`.
bool part_c_newton_rosenbrock(examples::Metrics& metrics, std::vector<std::vector<double>>& path) {
  const auto start = std::chrono::steady_clock::now();
  std::printf("(c) Newton-CG on Rosenbrock f(x,y) = (1-x)^2 + 100(y-x^2)^2 from (-1.2, 1.0),\n");
  std::printf("    each step solved by conjugate gradient on gg::hvp (no Hessian formed)\n\n");
  std::printf("    %4s  %22s  %10s  %10s  %8s  %3s\n", "iter", "(x, y)", "f", "|grad f|", "step", "cg");
  const gg::ScalarFn f = rosenbrock;
  gg::Tensor x = gg::from_vector({-1.2, 1.0}, {2}, kF64);
  const int max_newton = 100;
  for (int it = 0; it <= max_newton; ++it) {
    gg::Tensor leaf = x.detach().requires_grad_();
    gg::Tensor fx_t = f(leaf);
    gg::Tensor g = gg::grad(fx_t, leaf);
    const double fx = fx_t.item(), gnorm = std::sqrt(dot(g, g));
    const std::vector<double> xv = x.to_vector<double>();
    path.push_back({xv[0], xv[1], fx});
    metrics.train("newton", it + 1, fx,
                  std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count(),
                  {{"grad_norm", gnorm}, {"x", xv[0]}, {"y", xv[1]}});
    if (gnorm < 1e-10) {
      std::printf("    %4d  (%9.6f, %9.6f)  %10.3e  %10.3e\n", it, xv[0], xv[1], fx, gnorm);
      const bool at_min = std::abs(xv[0] - 1.0) < 1e-8 && std::abs(xv[1] - 1.0) < 1e-8;
      std::printf("\n    converged in %d Newton steps to (%.12f, %.12f)%s\n\n", it, xv[0], xv[1],
                  at_min ? "" : " -- NOT the minimum (1, 1)");
      return at_min;
    }
    const CgResult step = newton_direction_by_cg(f, x, g);
    const double t = backtrack(f, x, fx, g, step.p);
    std::printf("    %4d  (%9.6f, %9.6f)  %10.3e  %10.3e  %8.4f  %3d\n", it, xv[0], xv[1], fx, gnorm, t,
                step.iterations);
    x = x + step.p * t;
  }
  std::printf("\n    did NOT converge in %d Newton steps\n\n", max_newton);
  return false;
}

// The Newton path on the contours of Rosenbrock's function, and f per step on a log scale.
std::string make_plot(const std::string& dir, const std::vector<std::vector<double>>& path) {
  {
    std::ofstream dat(dir + "/newton_path.dat");
    if (!dat) throw std::runtime_error("cannot write " + dir + "/newton_path.dat");
    dat << "# step x y f\n";
    for (size_t i = 0; i < path.size(); ++i)
      dat << i << " " << path[i][0] << " " << path[i][1] << " " << std::max(path[i][2], 1e-30) << "\n";
  }
  {
    std::ofstream gp(dir + "/higher_order.gp");
    if (!gp) throw std::runtime_error("cannot write " + dir + "/higher_order.gp");
    gp << "set terminal pngcairo size 1200,520 enhanced font 'Sans,11'\n"
       << "set output 'higher_order.png'\n"
       << "set multiplot layout 1,2 title \"Newton-CG on Rosenbrock, each step solved with gg::hvp (no Hessian "
          "formed)\"\n"
       << "set title 'path from (-1.2, 1) to the minimum (1, 1)'\n"
       << "set xrange [-1.5:1.5]\nset yrange [-0.5:1.5]\nset xlabel 'x'\nset ylabel 'y'\nset key bottom right\n"
       << "set isosamples 120,120\nset samples 120,120\nset view map\nset contour base\nunset surface\n"
       << "set cntrparam levels discrete 0.5,2,5,10,25,50,100,200\nset table 'contours.dat'\n"
       << "splot (1-x)**2 + 100*(y-x**2)**2\nunset table\n"
       << "plot 'contours.dat' with lines lc rgb '#bbbbbb' notitle, \\\n"
       << "     'newton_path.dat' using 2:3 with linespoints pt 7 ps 0.8 lw 2 lc rgb '#d62728' title 'Newton iterates'\n"
       << "set title 'f at every Newton step'\nset xrange [0:*]\nset yrange [*:*]\nset logscale y\nset format y '10^{%L}'\n"
       << "set xlabel 'Newton step'\nset ylabel 'f(x, y)'\nset grid\n"
       << "plot 'newton_path.dat' using 1:4 with linespoints pt 7 lw 2 lc rgb '#1f77b4' title 'f'\n"
       << "unset multiplot\n";
  }
  return examples::run_gnuplot(dir, "higher_order.gp", "higher_order.png");
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"Higher-order derivatives with gradgrad: nested grad on tanh, an MLP's Hessian-vector product, "
               "Newton-CG on Rosenbrock (all f64, self-checking)"};
  std::string out_dir = "higher_order_out";
  bool smoke = false;
  app.add_option("--out", out_dir, "output directory (metrics.jsonl, plot)")->capture_default_str();
  app.add_flag("--smoke", smoke, "the ctest's run (the example is small: the same work as without it)");
  CLI11_PARSE(app, argc, argv);

  std::printf("gradgrad higher-order derivatives: a worked example (f64)\n");
  std::printf("=========================================================\n\n");
  gg::Device device = gg::Device::cpu();
  return examples::prepare_and_run("cpu", device, out_dir, [&] {
    examples::Metrics metrics(out_dir, "higher_order",
                              {{"device", "cpu"}, {"dtype", "f64"}, {"smoke", smoke}, {"max_order", kMaxOrder},
                               {"start", {-1.2, 1.0}}});
    const double a_err = part_a_tanh_derivatives();
    const bool a_ok = a_err <= 1e-9;
    metrics.write({{"phase", "check"}, {"check", "tanh_derivatives"}, {"max_abs_error", a_err}, {"ok", a_ok}});
    const double b_err = part_b_mlp_hvp();
    const bool b_ok = b_err <= 1e-6;
    metrics.write({{"phase", "check"}, {"check", "mlp_hvp_vs_finite_differences"}, {"rel_error", b_err}, {"ok", b_ok}});
    std::vector<std::vector<double>> path;
    const bool c_ok = part_c_newton_rosenbrock(metrics, path);
    metrics.write({{"phase", "check"}, {"check", "newton_reaches_minimum"}, {"ok", c_ok}});
    std::printf("summary: (a) %s  (b) %s  (c) %s\n", a_ok ? "ok" : "FAILED", b_ok ? "ok" : "FAILED",
                c_ok ? "ok" : "FAILED");
    std::printf("%s\nmetrics: %s\n", make_plot(out_dir, path).c_str(), metrics.path().c_str());
    return a_ok && b_ok && c_ok ? 0 : 1;
  });
}
