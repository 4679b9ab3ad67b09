// Forward mode on the CPU: what a JVP costs by forward mode and by the double-VJP trick, and where
// jacfwd and jacrev cross over. f32 unless --dtype f64.
//
// jvp: J·v of a function at one point, three ways, each timed on its own (median of --repeats runs
// after one warm-up run) with its peak tensor memory:
//   forward  f(x) alone, no tape                                          (the unit of cost)
//   jvp      gg::func::jvp: one pass of f with x carrying the tangent v    (true forward mode)
//   dvjp     the double-VJP JVP: y = f(x) recorded, g = grad(y, x, u) with create_graph for a
//            cotangent u that requires grad, then J·v = grad(⟨g, v⟩, u)   (a backward, then the
//            backward of that backward; gradgrad's jvp before forward mode)
// on an MLP x ↦ W3 tanh(W2 tanh(W1 x)) with x (64, width) for growing widths, and on fused
// attention (gg::attention, tangents on q, k and v at once) with B 1, H 1, d 64 at N 256 and 1024.
// jvp and dvjp must agree, and so must jacfwd and jacrev (each line carries their relative
// difference; the program exits 1 when one passes 1e-3 in f32 or 1e-10 in f64).
//
// hvp: H·v of the scalar f(q, k, v) = Σ sin(attention(q, k, v)) (B 1, H 1, d 64, the
// --attention-n sizes; tangents on q, k and v), two ways, each timed with its peak memory:
//   for      gg::func::hvp, forward over reverse: the gradient computed from inputs carrying the
//            tangents (attention's forward tangent, then its backward's, which is the BoB)
//   ror      reverse over reverse: g = grad(f) with create_graph, then grad(Σ⟨g, v⟩) (the BoB)
//
// jac: the whole Jacobian of f: Rⁿ → Rᵐ, f(z) = W2 tanh(W1 z + b1) with a hidden layer of 64, by
// gg::func::jacfwd (n forward-mode passes, one per input) and gg::func::jacrev (one recorded
// forward and m backward passes, one per output), for n and m in --sizes.
//
// Memory: gg::cpu::reset_peak_memory_stats() right before a run, then memory_stats().peak_bytes
// minus the bytes live before it: what the run adds on top of its inputs (tensor storage only).
//
// Run: ./build/bench/bench_forward_mode [--widths 64,256,1024] [--attention-n 256,1024]
//      [--sizes 4,16,64,256] [--repeats 7] [--json out.jsonl]   (scripts/bench-forward.sh)
#include <CLI/CLI.hpp>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <fstream>
#include <functional>
#include <string>
#include <vector>

#include "bench/median.h"
#include "gradgrad.h"

namespace {

using Clock = std::chrono::steady_clock;

struct Timing {
  double ms = 0.0;         // median
  int64_t peak_bytes = 0;  // max over runs of (peak during the run - live before it)
};

// One warm-up run, then `repeats` timed runs; the median time and the largest peak.
Timing measure(int repeats, const std::function<void()>& run) {
  Timing t;
  std::vector<double> ms;
  for (int r = 0; r <= repeats; ++r) {
    const int64_t live_before = gg::cpu::memory_stats().current_bytes;
    gg::cpu::reset_peak_memory_stats();
    const auto t0 = Clock::now();
    run();
    const double elapsed = 1e3 * std::chrono::duration<double>(Clock::now() - t0).count();
    t.peak_bytes = std::max(t.peak_bytes, gg::cpu::memory_stats().peak_bytes - live_before);
    if (r > 0) ms.push_back(elapsed);
  }
  t.ms = bench::median(ms);
  return t;
}

double g_worst_diff = 0.0;  // the largest relative difference of two ways to the same result

double rel_diff(const gg::Tensor& a, const gg::Tensor& b) {
  const double d = gg::max(gg::abs(a - b)).item() / std::max(gg::max(gg::abs(b)).item(), 1e-300);
  g_worst_diff = std::max(g_worst_diff, std::isnan(d) ? 1e300 : d);
  return d;
}

// J·v by the double-VJP trick, for f with several inputs and one output.
gg::Tensor jvp_by_double_vjp(const gg::func::ListFn& f, const gg::TensorList& xs, const gg::TensorList& vs) {
  gg::TensorList leaves;
  for (const gg::Tensor& x : xs) leaves.push_back(x.detach().requires_grad_());
  const gg::Tensor y = f(leaves)[0];
  const gg::Tensor u = gg::zeros_like(y).requires_grad_();  // any value: Jᵀu is linear in u
  const gg::TensorList g = gg::grad({y}, leaves, {u}, std::nullopt, /*create_graph=*/true);
  gg::Tensor gv = gg::sum(g[0] * vs[0]);
  for (size_t i = 1; i < g.size(); ++i) gv = gv + gg::sum(g[i] * vs[i]);
  return gg::grad(gv, u);
}

// H·v of a scalar f by reverse over reverse: the gradient recorded, then the gradient of its
// pairing with vs.
gg::TensorList hvp_by_reverse(const gg::func::ListScalarFn& f, const gg::TensorList& xs, const gg::TensorList& vs) {
  gg::TensorList leaves;
  for (const gg::Tensor& x : xs) leaves.push_back(x.detach().requires_grad_());
  const gg::TensorList g = gg::grad({f(leaves)}, leaves, {}, std::nullopt, /*create_graph=*/true);
  gg::Tensor gv = gg::sum(g[0] * vs[0]);
  for (size_t i = 1; i < g.size(); ++i) gv = gv + gg::sum(g[i] * vs[i]);
  return gg::grad({gv}, leaves);
}

struct Config {
  std::vector<int64_t> widths = {64, 256, 1024};
  std::vector<int64_t> attention_n = {256, 1024};
  std::vector<int64_t> sizes = {4, 16, 64, 256};
  int64_t batch = 64, hidden = 64, d = 64;
  int repeats = 7;
  std::string dtype = "f32";
  std::string json_path;
};

class Output {
 public:
  explicit Output(const std::string& path) {
    if (!path.empty()) file_.open(path);
    if (!path.empty() && !file_) throw std::runtime_error("cannot write " + path);
  }
  void line(const std::string& json) {
    std::printf("%s\n", json.c_str());
    if (file_) file_ << json << "\n";
  }

 private:
  std::ofstream file_;
};

std::string num(double x) {
  char buf[64];
  std::snprintf(buf, sizeof buf, "%.6g", x);
  return buf;
}

// One "jvp" line: the three timings and peaks of f at xs along vs.
void bench_jvp(Output& out, const Config& c, const std::string& fn_fields, const gg::func::ListFn& f,
               const gg::TensorList& xs, const gg::TensorList& vs) {
  gg::Tensor by_jvp, by_dvjp;
  const Timing fwd = measure(c.repeats, [&] {
    gg::NoGradGuard no_grad;
    f(xs);
  });
  const Timing jvp = measure(c.repeats, [&] { by_jvp = gg::func::jvp(f, xs, vs).tangents[0]; });
  const Timing dvjp = measure(c.repeats, [&] { by_dvjp = jvp_by_double_vjp(f, xs, vs); });
  out.line("{\"bench\":\"jvp\"," + fn_fields + ",\"dtype\":\"" + c.dtype + "\",\"fwd_ms\":" + num(fwd.ms) +
           ",\"jvp_ms\":" + num(jvp.ms) + ",\"dvjp_ms\":" + num(dvjp.ms) +
           ",\"fwd_peak_bytes\":" + std::to_string(fwd.peak_bytes) + ",\"jvp_peak_bytes\":" +
           std::to_string(jvp.peak_bytes) + ",\"dvjp_peak_bytes\":" + std::to_string(dvjp.peak_bytes) +
           ",\"rel_diff\":" + num(rel_diff(by_jvp, by_dvjp)) + ",\"repeats\":" + std::to_string(c.repeats) + "}");
}

void run(const Config& c) {
  Output out(c.json_path);
  const gg::DType dt = c.dtype == "f64" ? gg::DType::f64 : gg::DType::f32;
  gg::manual_seed(0);
  for (int64_t w : c.widths) {  // MLP of growing width; the weights are constants of f
    const gg::TensorList W = {gg::randn({w, w}, dt) / std::sqrt(double(w)), gg::randn({w, w}, dt) / std::sqrt(double(w)),
                              gg::randn({w, w}, dt) / std::sqrt(double(w))};
    const gg::func::ListFn f = [&W](const gg::TensorList& x) {
      const gg::Tensor h = gg::tanh(gg::matmul(gg::tanh(gg::matmul(x[0], W[0])), W[1]));
      return gg::TensorList{gg::matmul(h, W[2])};
    };
    bench_jvp(out, c, "\"fn\":\"mlp\",\"width\":" + std::to_string(w) + ",\"batch\":" + std::to_string(c.batch), f,
              {gg::randn({c.batch, w}, dt)}, {gg::randn({c.batch, w}, dt)});
  }
  for (int64_t n : c.attention_n) {  // fused attention, tangents on q, k and v
    const gg::func::ListFn f = [](const gg::TensorList& x) { return gg::TensorList{gg::attention(x[0], x[1], x[2])}; };
    gg::TensorList xs, vs;
    for (int i = 0; i < 3; ++i) {
      xs.push_back(gg::randn({1, 1, n, c.d}, dt));
      vs.push_back(gg::randn({1, 1, n, c.d}, dt));
    }
    bench_jvp(out, c, "\"fn\":\"attention\",\"N\":" + std::to_string(n) + ",\"d\":" + std::to_string(c.d), f, xs, vs);
  }
  for (int64_t n : c.attention_n) {  // H·v through fused attention, tangents on q, k and v
    const gg::func::ListScalarFn f = [](const gg::TensorList& x) { return gg::sum(gg::sin(gg::attention(x[0], x[1], x[2]))); };
    gg::TensorList xs, vs, by_for, by_ror;
    for (int i = 0; i < 3; ++i) {
      xs.push_back(gg::randn({1, 1, n, c.d}, dt));
      vs.push_back(gg::randn({1, 1, n, c.d}, dt));
    }
    const Timing fwd = measure(c.repeats, [&] {
      gg::NoGradGuard no_grad;
      f(xs);
    });
    const Timing fr = measure(c.repeats, [&] { by_for = gg::func::hvp(f, xs, vs); });
    const Timing rr = measure(c.repeats, [&] { by_ror = hvp_by_reverse(f, xs, vs); });
    double diff = 0;
    for (int i = 0; i < 3; ++i) diff = std::max(diff, rel_diff(by_for[i], by_ror[i]));
    out.line("{\"bench\":\"hvp\",\"fn\":\"attention\",\"N\":" + std::to_string(n) + ",\"d\":" + std::to_string(c.d) +
             ",\"dtype\":\"" + c.dtype + "\",\"fwd_ms\":" + num(fwd.ms) + ",\"for_ms\":" + num(fr.ms) +
             ",\"ror_ms\":" + num(rr.ms) + ",\"for_peak_bytes\":" + std::to_string(fr.peak_bytes) +
             ",\"ror_peak_bytes\":" + std::to_string(rr.peak_bytes) + ",\"rel_diff\":" + num(diff) +
             ",\"repeats\":" + std::to_string(c.repeats) + "}");
  }
  for (int64_t n : c.sizes)  // the whole Jacobian of R^n -> R^m
    for (int64_t m : c.sizes) {
      const gg::Tensor w1 = gg::randn({c.hidden, n}, dt) / std::sqrt(double(n)), b1 = gg::randn({c.hidden}, dt),
                       w2 = gg::randn({m, c.hidden}, dt) / std::sqrt(double(c.hidden)), z = gg::randn({n}, dt);
      const gg::TensorFn f = [&](const gg::Tensor& x) { return gg::matmul(w2, gg::tanh(gg::matmul(w1, x) + b1)); };
      gg::Tensor jf, jr;
      const Timing fwd = measure(c.repeats, [&] { jf = gg::func::jacfwd(f, z); });
      const Timing rev = measure(c.repeats, [&] { jr = gg::func::jacrev(f, z); });
      out.line("{\"bench\":\"jac\",\"n\":" + std::to_string(n) + ",\"m\":" + std::to_string(m) + ",\"hidden\":" +
               std::to_string(c.hidden) + ",\"dtype\":\"" + c.dtype + "\",\"jacfwd_ms\":" + num(fwd.ms) +
               ",\"jacrev_ms\":" + num(rev.ms) + ",\"rel_diff\":" + num(rel_diff(jf, jr)) +
               ",\"repeats\":" + std::to_string(c.repeats) + "}");
    }
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"Forward mode on the CPU: jvp vs the double-VJP JVP, jacfwd vs jacrev (JSON lines on stdout)"};
  Config c;
  app.add_option("--widths", c.widths, "MLP widths for the JVP timings")->delimiter(',')->capture_default_str();
  app.add_option("--attention-n", c.attention_n, "sequence lengths of the attention JVP")->delimiter(',')
      ->capture_default_str();
  app.add_option("--sizes", c.sizes, "input and output sizes n, m of the Jacobians")->delimiter(',')
      ->capture_default_str();
  app.add_option("--repeats", c.repeats, "timed runs after the warm-up (median)")->check(CLI::Range(1, 1000))
      ->capture_default_str();
  app.add_option("--dtype", c.dtype, "f32 or f64")->check(CLI::IsMember({"f32", "f64"}))->capture_default_str();
  app.add_option("--json", c.json_path, "also write the lines to this file");
  CLI11_PARSE(app, argc, argv);
  try {
    run(c);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "bench_forward_mode: %s\n", e.what());
    return 1;
  }
  const double tolerance = c.dtype == "f64" ? 1e-10 : 1e-3;
  if (g_worst_diff > tolerance) {
    std::fprintf(stderr, "bench_forward_mode: two ways to the same result differ by %.3g (tolerance %.0e)\n",
                 g_worst_diff, tolerance);
    return 1;
  }
  return 0;
}
