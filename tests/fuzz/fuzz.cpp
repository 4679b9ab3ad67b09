// A seeded random-program fuzzer. Each program draws a few tensors (random shapes including
// 0-sized dims and 0-dim, dtypes f32/f64/i64, random views) and applies a random sequence of
// ops to them. Every op is also evaluated by a naive f64 reference (ref.h) on the reference
// values of its inputs; the invariant is:
//   - the reference says the op is invalid  -> gg throws a gg::Error (typed), nothing else;
//   - the reference says it is valid        -> gg returns a tensor of the reference's shape,
//     dtype and values (exact for views, copies and i64; within rounding for f32/f64 math);
//   - no crash, no sanitizer report (CI runs it under ASan/UBSan too).
// Every fourth program is also rebuilt from smooth differentiable ops on f64 leaves and passed
// to gradcheck (and every eighth to gradgradcheck).
//
//   gg_fuzz [--programs N | --seconds S] [--seed X] [--verbose]
// runs N programs (default kDefaultPrograms) from seed X (default 1): a fixed amount of work, the
// same verdict on any machine. --seconds S runs for S seconds instead, from a fresh seed unless
// --seed is given: for hunting, never for a pass/fail check. It prints the seed first, and at the
// end the number of programs, ops and programs per second.
// A failure prints the seed, the program number and the program's ops so far, and exits 1.
#include <csignal>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <random>
#include <sstream>
#include <string>
#include <unistd.h>

#include "ref.h"

namespace gg::fuzz {
namespace {

// The current program's text, printed by the signal handler if gg crashes.
char g_program_text[16384];
void on_crash(int sig) {
  const char* head = "\ngg_fuzz: crashed (signal) in the program:\n";
  ssize_t r = write(2, head, std::strlen(head));
  r = write(2, g_program_text, std::strlen(g_program_text));
  (void)r;
  std::signal(sig, SIG_DFL);
  std::raise(sig);
}

struct Failure {
  std::string what;
};

class Program {
 public:
  Program(uint64_t seed, bool verbose) : rng_(seed), verbose_(verbose) {}

  void run(int n_ops) {
    const int n_inputs = 1 + pick(3);
    for (int i = 0; i < n_inputs; ++i) add_input();
    for (int i = 0; i < n_ops; ++i) step();
  }
  int64_t ops() const { return ops_; }
  const std::string& text() const { return text_; }

  // ---- random draws
  int pick(int n) { return std::uniform_int_distribution<int>(0, n - 1)(rng_); }
  bool chance(double p) { return std::uniform_real_distribution<double>(0, 1)(rng_) < p; }
  int64_t range(int64_t lo, int64_t hi) { return std::uniform_int_distribution<int64_t>(lo, hi)(rng_); }

  Shape random_shape(int max_dims = 4) {
    Shape s(static_cast<size_t>(pick(max_dims + 1)));
    for (int64_t& d : s) d = chance(0.08) ? 0 : range(1, 4);
    return s;
  }
  DType random_dtype() {
    const int r = pick(10);
    return r < 6 ? DType::f64 : r < 9 ? DType::f32 : DType::i64;
  }

 private:
  struct Entry {
    Tensor t;
    Ref r;
  };

  void log(const std::string& line) {
    text_ += line + "\n";
    std::snprintf(g_program_text, sizeof g_program_text, "%s", text_.c_str());
    if (verbose_) std::printf("  %s\n", line.c_str());
  }

  void add_input() {
    Ref r;
    r.shape = random_shape();
    r.dtype = random_dtype();
    r.v.resize(static_cast<size_t>(prod(r.shape)));
    std::normal_distribution<double> normal;
    for (double& x : r.v) {
      if (r.dtype == DType::i64) x = static_cast<double>(range(-5, 5));
      else if (chance(0.02)) x = chance(0.5) ? NAN : (chance(0.5) ? INFINITY : -INFINITY);
      else x = round_to(normal(rng_), r.dtype);
    }
    Tensor t = from_vector(r.v, r.shape, r.dtype);
    log("x" + std::to_string(pool_.size()) + " = input " + shape_str(r.shape) + " " + dtype_name(r.dtype));
    pool_.push_back({t, r});
    // Sometimes view it through a transpose or a slice, so ops see strided inputs.
    if (r.shape.size() >= 2 && chance(0.3)) {
      int64_t a = pick(static_cast<int>(r.shape.size())), b = pick(static_cast<int>(r.shape.size()));
      apply("transpose(" + std::to_string(a) + ", " + std::to_string(b) + ")", pool_.size() - 1, [&](const Tensor& x) { return transpose(x, a, b); },
            [&](const Ref& x, Ref& y) { return ref_transpose(x, a, b, y); }, true);
    }
  }

  // Runs a one-input op on pool entry `i` and checks it against `ref`; a valid result joins the pool.
  template <typename F, typename R>
  void apply(const std::string& name, size_t i, F&& f, R&& ref, bool exact) {
    Ref want;
    const bool valid = ref(pool_[i].r, want);
    run_checked(name + " of x" + std::to_string(i), [&] { return f(pool_[i].t); }, valid, want, exact,
                scale_of(pool_[i].r));
  }

  template <typename F>
  void run_checked(const std::string& what, F&& f, bool valid, const Ref& want, bool exact, double scale) {
    ++ops_;
    log("x" + std::to_string(pool_.size()) + " = " + what + (valid ? "" : "  [expect a gg::Error]"));
    Tensor y;
    try {
      y = f();
    } catch (const gg::Error& e) {
      if (valid) throw Failure{what + " threw " + e.what() + " but the reference computes " + shape_str(want.shape)};
      if (std::strncmp(e.what(), "gg", 2) != 0) throw Failure{what + ": error message without the op: " + e.what()};
      return;
    }
    if (!valid) throw Failure{what + " returned shape " + shape_str(y.shape()) + " but the reference says it is invalid"};
    if (y.shape() != want.shape) throw Failure{what + ": shape " + shape_str(y.shape()) + ", reference " + shape_str(want.shape)};
    if (y.dtype() != want.dtype)
      throw Failure{what + ": dtype " + std::string(dtype_name(y.dtype())) + ", reference " + dtype_name(want.dtype)};
    const std::vector<double> got = y.to_vector<double>();
    const double rtol = exact ? 0 : (want.dtype == DType::f32 ? 2e-5 : 1e-12);
    for (size_t k = 0; k < got.size(); ++k) {
      const double a = got[k], b = want.v[k];
      const bool ok = (std::isnan(a) && std::isnan(b)) || a == b ||
                      (!exact && std::isfinite(b) && std::abs(a - b) <= rtol * (std::abs(b) + scale) * 8) ||
                      // Eigen's vectorised exp returns a subnormal (5.6e-309) instead of 0 far below
                      // the underflow threshold, e.g. exp(-inf); within the f64 subnormals it counts as 0.
                      (!exact && std::abs(a - b) < 1e-300);
      if (!ok) {
        std::ostringstream os;
        os << what << ": element " << k << " is " << a << ", reference " << b;
        throw Failure{os.str()};
      }
    }
    Ref keep = want;
    if (!exact) keep.v = got;  // continue from gg's rounding: errors do not compound
    pool_.push_back({y, keep});
  }

  static double scale_of(const Ref& r) {
    double m = 0;
    for (double x : r.v)
      if (std::isfinite(x)) m = std::max(m, std::abs(x));
    return m * static_cast<double>(std::max<int64_t>(r.numel(), 1));
  }

  // ---- reference ops
  static bool ref_unary(const Ref& x, Ref& y, double (*f)(double)) {
    if (!floating(x.dtype)) return false;
    y = x;
    for (double& v : y.v) v = round_to(f(v), x.dtype);
    return true;
  }
  static bool ref_transpose(const Ref& x, int64_t a, int64_t b, Ref& y) {
    const int64_t n = static_cast<int64_t>(x.shape.size());
    if (!wrap(a, n, true) || !wrap(b, n, true)) return false;
    std::vector<int64_t> perm(static_cast<size_t>(n));
    std::iota(perm.begin(), perm.end(), 0);
    if (n) std::swap(perm[static_cast<size_t>(a)], perm[static_cast<size_t>(b)]);
    return ref_permute(x, perm, y);
  }
  static bool ref_permute(const Ref& x, std::vector<int64_t> perm, Ref& y) {
    const int64_t n = static_cast<int64_t>(x.shape.size());
    if (static_cast<int64_t>(perm.size()) != n) return false;
    std::vector<char> seen(perm.size(), 0);
    for (int64_t& p : perm) {
      if (!wrap(p, n, false) || seen[static_cast<size_t>(p)]) return false;
      seen[static_cast<size_t>(p)] = 1;
    }
    y.dtype = x.dtype;
    y.shape.clear();
    for (int64_t p : perm) y.shape.push_back(x.shape[static_cast<size_t>(p)]);
    y.v.resize(x.v.size());
    for (int64_t i = 0; i < y.numel(); ++i) {
      auto oi = unravel(i, y.shape);
      std::vector<int64_t> ii(oi.size());
      for (size_t d = 0; d < perm.size(); ++d) ii[static_cast<size_t>(perm[d])] = oi[d];
      y.v[static_cast<size_t>(i)] = x.v[static_cast<size_t>(ravel(ii, x.shape))];
    }
    return true;
  }
  static bool ref_slice(const Ref& x, int64_t d, int64_t start, int64_t end, int64_t step, Ref& y) {
    if (!wrap(d, static_cast<int64_t>(x.shape.size()), false) || step <= 0) return false;
    const int64_t n = x.shape[static_cast<size_t>(d)];
    if (start < 0) start += n;
    if (end < 0) end += n;
    start = std::clamp<int64_t>(start, 0, n);
    end = std::clamp<int64_t>(end, start, n);
    std::vector<int64_t> keep;
    for (int64_t i = start; i < end; i += step) {
      keep.push_back(i);
      if (step > end - i) break;  // no overflow for huge steps
    }
    return ref_gather(x, d, keep, y);
  }
  static bool ref_gather(const Ref& x, int64_t d, const std::vector<int64_t>& keep, Ref& y) {
    y.dtype = x.dtype;
    y.shape = x.shape;
    y.shape[static_cast<size_t>(d)] = static_cast<int64_t>(keep.size());
    y.v.resize(static_cast<size_t>(prod(y.shape)));
    for (int64_t i = 0; i < y.numel(); ++i) {
      auto idx = unravel(i, y.shape);
      idx[static_cast<size_t>(d)] = keep[static_cast<size_t>(idx[static_cast<size_t>(d)])];
      y.v[static_cast<size_t>(i)] = x.v[static_cast<size_t>(ravel(idx, x.shape))];
    }
    return true;
  }
  static bool ref_expand(const Ref& x, const Shape& s, Ref& y) {
    if (s.size() < x.shape.size() || s.size() > 8) return false;
    const size_t lead = s.size() - x.shape.size();
    Shape out = s;
    for (size_t i = 0; i < s.size(); ++i) {
      if (i < lead) {
        if (s[i] < 0) return false;
        continue;
      }
      const int64_t have = x.shape[i - lead], want = s[i] == -1 ? have : s[i];
      if (want < 0 || (want != have && have != 1)) return false;
      out[i] = want;
    }
    y.dtype = x.dtype;
    y.shape = out;
    y.v.resize(static_cast<size_t>(prod(out)));
    for (int64_t i = 0; i < y.numel(); ++i) y.v[static_cast<size_t>(i)] = x.v[static_cast<size_t>(bindex(unravel(i, out), x.shape))];
    return true;
  }
  static bool ref_reshape(const Ref& x, Shape s, Ref& y) {
    if (s.size() > 8) return false;
    int infer = -1;
    int64_t known = 1;
    for (size_t i = 0; i < s.size(); ++i) {
      if (s[i] == -1) {
        if (infer >= 0) return false;
        infer = static_cast<int>(i);
      } else if (s[i] < 0) {
        return false;
      }
    }
    if (!fits(s)) return false;
    for (size_t i = 0; i < s.size(); ++i) {
      if (s[i] != -1) known *= s[i];
    }
    if (infer >= 0) {
      if (known == 0 || x.numel() % known) return false;
      s[static_cast<size_t>(infer)] = x.numel() / known;
    }
    if (!fits(s) || prod(s) != x.numel()) return false;
    y = x;
    y.shape = s;
    return true;
  }
  // dims empty = all; returns false for out-of-range or repeated dims, non-floating input, and
  // max over an empty set.
  static bool ref_reduce(const Ref& x, std::vector<int64_t> dims, bool keepdim, int kind, Ref& y) {
    const int64_t n = static_cast<int64_t>(x.shape.size());
    std::vector<char> red(static_cast<size_t>(n), dims.empty() ? 1 : 0);
    std::vector<int64_t> wrapped;
    for (int64_t d : dims) {
      if (!wrap(d, n, true)) return false;
      wrapped.push_back(d);
    }
    std::sort(wrapped.begin(), wrapped.end());
    if (std::adjacent_find(wrapped.begin(), wrapped.end()) != wrapped.end()) return false;
    if (!floating(x.dtype)) return false;
    if (n > 0)
      for (int64_t d : wrapped) red[static_cast<size_t>(d)] = 1;
    Shape kshape = x.shape, out;
    int64_t count = 1;
    for (size_t d = 0; d < x.shape.size(); ++d)
      if (red[d]) {
        count *= x.shape[d];
        kshape[d] = 1;
      } else {
        out.push_back(x.shape[d]);
      }
    if (kind == 2 && count == 0) return false;
    y.dtype = x.dtype;
    y.shape = keepdim ? kshape : out;
    y.v.assign(static_cast<size_t>(prod(kshape)), kind == 2 ? -INFINITY : 0.0);
    for (int64_t i = 0; i < x.numel(); ++i) {
      auto idx = unravel(i, x.shape);
      for (size_t d = 0; d < idx.size(); ++d)
        if (red[d]) idx[d] = 0;
      double& o = y.v[static_cast<size_t>(ravel(idx, kshape))];
      const double v = x.v[static_cast<size_t>(i)];
      if (kind == 2) o = (v > o || std::isnan(v) || std::isnan(o)) ? (std::isnan(o) ? o : v) : o;
      else o += v;
    }
    for (double& v : y.v) v = round_to(kind == 1 ? v / static_cast<double>(count) : v, x.dtype);
    return true;
  }
  static bool ref_binary(const Ref& a, const Ref& b, int op, Ref& y) {
    // op: 0 add, 1 sub, 2 mul, 3 div, 4 maximum, 5 lt, 6 eq, 7 ge, 8 minimum
    // The operands promote (ops/ops.h); sub refuses b8 operands and div a b8 result.
    const DType t = promote_ref(a.dtype, !a.shape.empty(), b.dtype, !b.shape.empty());
    if (op == 1 && (a.dtype == DType::b8 || b.dtype == DType::b8)) return false;
    if (op == 3 && t == DType::b8) return false;
    Shape s;
    if (!broadcast(a.shape, b.shape, s) || s.size() > 8) return false;
    const bool integer = !floating(t);
    const bool comparison = op >= 5 && op <= 7;
    y.dtype = comparison ? DType::b8 : t;
    y.shape = s;
    y.v.resize(static_cast<size_t>(prod(s)));
    for (int64_t i = 0; i < y.numel(); ++i) {
      auto idx = unravel(i, s);
      const double x = round_to(a.v[static_cast<size_t>(bindex(idx, a.shape))], t);
      const double z = round_to(b.v[static_cast<size_t>(bindex(idx, b.shape))], t);
      double r = 0;
      switch (op) {
        case 0: r = x + z; break;
        case 1: r = x - z; break;
        case 2: r = x * z; break;
        case 3:
          if (integer && z == 0) return false;
          r = integer ? std::trunc(x / z) : x / z;
          break;
        case 4: r = std::isnan(x) || std::isnan(z) ? NAN : std::max(x, z); break;
        case 5: r = x < z; break;
        case 6: r = x == z; break;
        case 7: r = x >= z; break;
        case 8: r = std::isnan(x) || std::isnan(z) ? NAN : std::min(x, z); break;
      }
      y.v[static_cast<size_t>(i)] = round_to(r, y.dtype);
    }
    return true;
  }
  static bool ref_matmul(const Ref& a, const Ref& b, Ref& y) {
    if (a.dtype != b.dtype || !floating(a.dtype) || a.shape.empty() || b.shape.empty()) return false;
    Shape sa = a.shape, sb = b.shape;
    const bool va = sa.size() == 1, vb = sb.size() == 1;
    if (va) sa.insert(sa.begin(), 1);
    if (vb) sb.push_back(1);
    const int64_t M = sa[sa.size() - 2], K = sa.back(), N = sb.back();
    if (sb[sb.size() - 2] != K) return false;
    Shape ba(sa.begin(), sa.end() - 2), bb(sb.begin(), sb.end() - 2), batch;
    if (!broadcast(ba, bb, batch) || batch.size() + 2 > 8) return false;
    Shape full = batch;
    full.push_back(M);
    full.push_back(N);
    y.dtype = a.dtype;
    y.v.assign(static_cast<size_t>(prod(full)), 0.0);
    for (int64_t bi = 0; bi < prod(batch); ++bi) {
      auto idx = unravel(bi, batch);
      const int64_t oa = bindex(idx, ba) * M * K, ob = bindex(idx, bb) * K * N;
      for (int64_t m = 0; m < M; ++m)
        for (int64_t n = 0; n < N; ++n) {
          double s = 0;
          for (int64_t k = 0; k < K; ++k) s += a.v[static_cast<size_t>(oa + m * K + k)] * b.v[static_cast<size_t>(ob + k * N + n)];
          y.v[static_cast<size_t>(bi * M * N + m * N + n)] = round_to(s, a.dtype);
        }
    }
    y.shape = batch;
    if (!va) y.shape.push_back(M);
    if (!vb) y.shape.push_back(N);
    return true;
  }
  static bool ref_softmax(const Ref& x, int64_t d, Ref& y) {
    const int64_t n = static_cast<int64_t>(x.shape.size());
    if (!wrap(d, n, true) || !floating(x.dtype)) return false;
    y = x;
    if (n == 0) {
      const double e = std::exp(x.v[0] - x.v[0]);  // NaN for ±inf, as the row formula gives
      y.v[0] = round_to(e / e, x.dtype);
      return true;
    }
    const int64_t len = x.shape[static_cast<size_t>(d)];
    for (int64_t i = 0; i < x.numel(); ++i) {
      auto idx = unravel(i, x.shape);
      if (idx[static_cast<size_t>(d)] != 0) continue;
      double m = -INFINITY, s = 0;
      std::vector<int64_t> at;
      for (int64_t j = 0; j < len; ++j) {
        idx[static_cast<size_t>(d)] = j;
        at.push_back(ravel(idx, x.shape));
        const double v = x.v[static_cast<size_t>(at.back())];
        m = std::isnan(v) || std::isnan(m) ? NAN : std::max(m, v);
      }
      for (int64_t k : at) s += std::exp(x.v[static_cast<size_t>(k)] - m);
      for (int64_t k : at) y.v[static_cast<size_t>(k)] = round_to(std::exp(x.v[static_cast<size_t>(k)] - m) / s, x.dtype);
    }
    return true;
  }

  size_t any() { return static_cast<size_t>(pick(static_cast<int>(pool_.size()))); }
  int64_t any_dim(const Ref& r) {  // mostly valid, sometimes out of range
    const int64_t n = static_cast<int64_t>(r.shape.size());
    return chance(0.1) ? range(-n - 2, n + 1) : (n == 0 ? (chance(0.5) ? 0 : -1) : range(-n, n - 1));
  }

  void step() {
    const size_t i = any();
    const Ref& r = pool_[i].r;
    using std::to_string;
    const int op = pick(18);
    switch (op) {
      case 0: {  // smooth unary
        static const char* names[] = {"neg", "exp", "tanh", "sin", "sigmoid", "abs", "relu", "mul_scalar(-1.5)", "add_scalar(0.25)"};
        const int u = pick(9);
        static double (*const refs[])(double) = {
            [](double v) { return -v; }, [](double v) { return std::exp(v); }, [](double v) { return std::tanh(v); },
            [](double v) { return std::sin(v); }, [](double v) { return 1 / (1 + std::exp(-v)); },
            [](double v) { return std::abs(v); }, [](double v) { return v > 0 ? v : (std::isnan(v) ? v : 0.0); },
            [](double v) { return v * -1.5; }, [](double v) { return v + 0.25; }};
        static Tensor (*const fns[])(const Tensor&) = {
            [](const Tensor& x) { return neg(x); }, [](const Tensor& x) { return exp(x); }, [](const Tensor& x) { return tanh(x); },
            [](const Tensor& x) { return sin(x); }, [](const Tensor& x) { return sigmoid(x); }, [](const Tensor& x) { return abs(x); },
            [](const Tensor& x) { return relu(x); }, [](const Tensor& x) { return mul_scalar(x, -1.5); },
            [](const Tensor& x) { return add_scalar(x, 0.25); }};
        apply(names[u], i, fns[u], [&](const Ref& x, Ref& y) { return ref_unary(x, y, refs[u]); }, false);
        break;
      }
      case 1:
      case 2: {  // binary, with a partner of a compatible (or not) shape
        size_t j = any();
        if (chance(0.5)) {  // a fresh partner broadcastable against x
          Shape s = r.shape;
          for (int64_t& d : s)
            if (chance(0.3)) d = 1;
          if (chance(0.3) && !s.empty()) s.erase(s.begin());
          Ref pr;
          pr.shape = s;
          pr.dtype = r.dtype;
          pr.v.resize(static_cast<size_t>(prod(s)));
          for (double& v : pr.v) v = r.dtype == DType::i64 ? static_cast<double>(range(-3, 3)) : round_to(std::normal_distribution<double>()(rng_), r.dtype);
          log("x" + to_string(pool_.size()) + " = input " + shape_str(s) + " " + dtype_name(r.dtype));
          pool_.push_back({from_vector(pr.v, s, pr.dtype), pr});
          j = pool_.size() - 1;
        }
        const int b = pick(9);
        static const char* names[] = {"add", "sub", "mul", "div", "maximum", "lt", "eq", "ge", "minimum"};
        const Ref &ra = pool_[i].r, &rb = pool_[j].r;
        Ref want;
        const bool valid = ref_binary(ra, rb, b, want);
        if (valid && want.dtype == DType::i64)
          for (double v : want.v)
            if (std::abs(v) > 1e12) return;  // keep i64 arithmetic far from overflow
        Tensor ta = pool_[i].t, tb = pool_[j].t;
        run_checked(std::string(names[b]) + "(x" + to_string(i) + ", x" + to_string(j) + ")", [&] {
          switch (b) {
            case 0: return add(ta, tb);
            case 1: return sub(ta, tb);
            case 2: return mul(ta, tb);
            case 3: return div(ta, tb);
            case 4: return maximum(ta, tb);
            case 5: return lt(ta, tb);
            case 6: return eq(ta, tb);
            case 7: return ge(ta, tb);
            default: return minimum(ta, tb);
          }
        }, valid, want, /*exact=*/!floating(want.dtype) || b >= 4, scale_of(ra) + scale_of(rb));
        break;
      }
      case 3: {  // reductions
        std::vector<int64_t> dims;
        const int nd = pick(3);
        for (int k = 0; k < nd; ++k) dims.push_back(any_dim(r));
        const bool keep = chance(0.5);
        const int kind = pick(3);
        std::string ds;
        for (int64_t d : dims) ds += to_string(d) + " ";
        apply(std::string(kind == 0 ? "sum" : kind == 1 ? "mean" : "max") + "(dims " + ds + (keep ? "keepdim)" : ")"), i,
              [&](const Tensor& x) { return kind == 0 ? sum(x, dims, keep) : kind == 1 ? mean(x, dims, keep) : max(x, dims, keep); },
              [&](const Ref& x, Ref& y) { return ref_reduce(x, dims, keep, kind, y); }, kind == 2);
        break;
      }
      case 4: {
        const int64_t a = any_dim(r), b = any_dim(r);
        apply("transpose(" + to_string(a) + ", " + to_string(b) + ")", i, [&](const Tensor& x) { return transpose(x, a, b); },
              [&](const Ref& x, Ref& y) { return ref_transpose(x, a, b, y); }, true);
        break;
      }
      case 5: {
        std::vector<int64_t> perm(r.shape.size());
        std::iota(perm.begin(), perm.end(), 0);
        std::shuffle(perm.begin(), perm.end(), rng_);
        if (chance(0.1)) perm.push_back(0);
        apply("permute", i, [&](const Tensor& x) { return permute(x, perm); }, [&](const Ref& x, Ref& y) { return ref_permute(x, perm, y); }, true);
        break;
      }
      case 6: {
        const int64_t d = any_dim(r);
        const int64_t start = chance(0.1) ? INT64_MIN : range(-5, 5), end = chance(0.1) ? INT64_MAX : range(-5, 6);
        const int64_t step = chance(0.05) ? range(-1, 0) : chance(0.1) ? INT64_MAX : range(1, 3);
        apply("slice(" + to_string(d) + ", " + to_string(start) + ", " + to_string(end) + ", " + to_string(step) + ")", i,
              [&](const Tensor& x) { return slice(x, d, start, end, step); },
              [&](const Ref& x, Ref& y) { return ref_slice(x, d, start, end, step, y); }, true);
        break;
      }
      case 7: {
        Shape s;
        const int lead = pick(3);
        for (int k = 0; k < lead; ++k) s.push_back(chance(0.1) ? 0 : range(1, 3));
        for (int64_t d : r.shape) s.push_back(d == 1 ? (chance(0.5) ? range(0, 3) : -1) : (chance(0.1) ? d + 1 : d));
        if (chance(0.05)) s.push_back(-2);
        apply("expand " + shape_str(s), i, [&](const Tensor& x) { return expand(x, s); }, [&](const Ref& x, Ref& y) { return ref_expand(x, s, y); }, true);
        break;
      }
      case 8: {
        const int64_t n = static_cast<int64_t>(r.shape.size());
        const int64_t d = range(-n - 2, n + 1);
        const bool sq = chance(0.5);
        apply(std::string(sq ? "squeeze(" : "unsqueeze(") + to_string(d) + ")", i,
              [&](const Tensor& x) { return sq ? squeeze(x, d) : unsqueeze(x, d); },
              [&](const Ref& x, Ref& y) {
                int64_t dd = d;
                y = x;
                if (sq) {
                  if (!wrap(dd, n, true)) return false;
                  if (n > 0 && x.shape[static_cast<size_t>(dd)] == 1) y.shape.erase(y.shape.begin() + dd);
                  return true;
                }
                if (!wrap(dd, n + 1, false) || n + 1 > 8) return false;
                y.shape.insert(y.shape.begin() + dd, 1);
                return true;
              }, true);
        break;
      }
      case 9: {
        Shape s;
        const int64_t n = r.numel();
        if (chance(0.2)) s = random_shape();
        else if (n == 0) s = {0, range(0, 3)};
        else {
          int64_t rest = n;
          for (int64_t f = 2; f <= rest; ++f)
            while (rest % f == 0 && chance(0.7)) {
              s.push_back(f);
              rest /= f;
            }
          s.push_back(rest);
          std::shuffle(s.begin(), s.end(), rng_);
          if (chance(0.3)) s[static_cast<size_t>(pick(static_cast<int>(s.size())))] = -1;
        }
        if (chance(0.03)) s = {0, int64_t{1} << 62, 4};
        apply("reshape " + shape_str(s), i, [&](const Tensor& x) { return reshape(x, s); }, [&](const Ref& x, Ref& y) { return ref_reshape(x, s, y); }, true);
        break;
      }
      case 10: {  // cat / stack of x with a slice of itself
        const int64_t d = any_dim(r);
        const bool st = chance(0.3);
        Ref want;
        bool valid;
        if (st) {
          int64_t dd = d;
          valid = wrap(dd, static_cast<int64_t>(r.shape.size()) + 1, false) && r.shape.size() + 1 <= 8;
          if (valid) {
            Ref u = r;
            u.shape.insert(u.shape.begin() + dd, 1);
            valid = ref_cat(u, u, dd, want);
          }
        } else {
          int64_t dd = d;
          valid = r.shape.size() > 0 && wrap(dd, static_cast<int64_t>(r.shape.size()), false) && ref_cat(r, r, dd, want);
        }
        Tensor t = pool_[i].t;
        run_checked(std::string(st ? "stack" : "cat") + "(x" + to_string(i) + ", x" + to_string(i) + "; " + to_string(d) + ")",
                    [&] { return st ? stack({t, t}, d) : cat({t, t}, d); }, valid, want, true, 0);
        break;
      }
      case 11: {
        const int64_t d = any_dim(r);
        int64_t dd = d;
        const bool dim_ok = wrap(dd, static_cast<int64_t>(r.shape.size()), false);
        const int64_t size = dim_ok ? r.shape[static_cast<size_t>(dd)] : 1;
        std::vector<int64_t> idx(static_cast<size_t>(pick(4)));
        for (int64_t& k : idx) k = chance(0.05) ? size : range(0, std::max<int64_t>(size - 1, 0));
        bool in_range = true;
        for (int64_t k : idx) in_range = in_range && k >= 0 && k < size;
        Tensor index = from_indices(idx, {static_cast<int64_t>(idx.size())});
        apply("index_select(" + to_string(d) + ", " + std::to_string(idx.size()) + " indices)", i,
              [&](const Tensor& x) { return index_select(x, d, index); },
              [&](const Ref& x, Ref& y) { return dim_ok && in_range && ref_gather(x, dd, idx, y); }, true);
        break;
      }
      case 12: {  // matmul against a fresh operand whose K matches (or not)
        Shape s;
        const int64_t K = r.shape.empty() ? 1 : r.shape.back();
        if (chance(0.5)) s = {chance(0.1) ? K + 1 : K};
        else s = {chance(0.1) ? K + 1 : K, range(0, 3)};
        if (chance(0.2)) s.insert(s.begin(), range(1, 2));
        Ref pr;
        pr.shape = s;
        pr.dtype = r.dtype;
        pr.v.resize(static_cast<size_t>(prod(s)));
        for (double& v : pr.v) v = round_to(std::normal_distribution<double>()(rng_), r.dtype);
        log("x" + to_string(pool_.size()) + " = input " + shape_str(s) + " " + dtype_name(r.dtype));
        pool_.push_back({from_vector(pr.v, s, pr.dtype), pr});
        const size_t j = pool_.size() - 1;
        Ref want;
        const bool valid = ref_matmul(pool_[i].r, pr, want);
        Tensor ta = pool_[i].t, tb = pool_[j].t;
        run_checked("matmul(x" + to_string(i) + ", x" + to_string(j) + ")", [&] { return matmul(ta, tb); }, valid, want, false,
                    scale_of(pool_[i].r) + scale_of(pr));
        break;
      }
      case 13: {
        const int64_t d = any_dim(r);
        apply("softmax(" + to_string(d) + ")", i, [&](const Tensor& x) { return softmax(x, d); },
              [&](const Ref& x, Ref& y) { return ref_softmax(x, d, y); }, false);
        break;
      }
      case 14: {
        const DType to_t = random_dtype();
        apply(std::string("to ") + dtype_name(to_t), i, [&](const Tensor& x) { return to(x, to_t); },
              [&](const Ref& x, Ref& y) {
                y = x;
                y.dtype = to_t;
                for (double& v : y.v) v = round_to(v, to_t);
                return true;
              }, true);
        break;
      }
      case 15: {
        apply("clone", i, [](const Tensor& x) { return clone(x); }, [](const Ref& x, Ref& y) { y = x; return true; }, true);
        break;
      }
      case 16: {  // where(cond, a, b) with a random b8 mask of a shape broadcastable (or not) to a
        const size_t j = any();
        Shape cs = r.shape;
        for (int64_t& d : cs)
          if (chance(0.3)) d = 1;
        if (chance(0.1) && cs.size() < 8) cs.push_back(2);  // a mask of one more dim (within the 8-dim limit)
        Ref cond;
        cond.shape = cs;
        cond.dtype = DType::b8;
        cond.v.resize(static_cast<size_t>(prod(cs)));
        for (double& c : cond.v) c = chance(0.5) ? 1 : 0;
        Tensor tc = to(from_vector(cond.v, cs, DType::f64), DType::b8);
        const Ref &ra = pool_[i].r, &rb = pool_[j].r;
        Shape s1, s2;
        const bool valid = broadcast(cs, ra.shape, s1) && broadcast(s1, rb.shape, s2) && s2.size() <= 8;
        Ref want;
        if (valid) {
          want.shape = s2;
          want.dtype = promote_ref(ra.dtype, !ra.shape.empty(), rb.dtype, !rb.shape.empty());
          want.v.resize(static_cast<size_t>(prod(s2)));
          for (int64_t k = 0; k < want.numel(); ++k) {
            auto idx = unravel(k, s2);
            want.v[static_cast<size_t>(k)] = round_to(cond.v[static_cast<size_t>(bindex(idx, cs))] != 0
                                                           ? ra.v[static_cast<size_t>(bindex(idx, ra.shape))]
                                                           : rb.v[static_cast<size_t>(bindex(idx, rb.shape))],
                                                       want.dtype);
          }
        }
        Tensor ta = pool_[i].t, tb = pool_[j].t;
        run_checked("where(mask " + shape_str(cs) + ", x" + to_string(i) + ", x" + to_string(j) + ")",
                    [&] { return where(tc, ta, tb); }, valid, want, true, 0);
        break;
      }
      default: {  // copy_ / add_ into a clone, from another pool tensor
        const size_t j = any();
        const bool is_copy = chance(0.5);
        const Ref &rd = pool_[i].r, &rs = pool_[j].r;
        Shape s;
        bool valid = broadcast(rs.shape, rd.shape, s) && s == rd.shape;
        Ref want = rd;
        // add_ computes in the promoted type, which must not leave the destination's category.
        const DType t = promote_ref(rd.dtype, !rd.shape.empty(), rs.dtype, !rs.shape.empty());
        auto category = [](DType d) { return d == DType::b8 ? 0 : d == DType::i64 ? 1 : 2; };
        if (!is_copy) valid = valid && category(t) <= category(rd.dtype);
        if (valid)
          for (int64_t k = 0; k < want.numel(); ++k) {
            const double src = rs.v[static_cast<size_t>(bindex(unravel(k, rd.shape), rs.shape))];
            double& o = want.v[static_cast<size_t>(k)];
            o = round_to(is_copy ? src : round_to(round_to(o, t) + round_to(src, t), t), rd.dtype);
            if (!is_copy && rd.dtype == DType::i64 && std::abs(o) > 1e12) return;
          }
        Tensor dst, src = pool_[j].t;
        {
          NoGradGuard ng;
          dst = clone(pool_[i].t);
        }
        run_checked(std::string(is_copy ? "copy_" : "add_") + "(clone of x" + to_string(i) + ", x" + to_string(j) + ")", [&] {
          NoGradGuard ng;
          if (is_copy) copy_(dst, src);
          else add_(dst, src);
          return dst;
        }, valid, want, is_copy || !floating(t), scale_of(rd) + scale_of(rs));
        break;
      }
    }
  }

  static bool ref_cat(const Ref& a, const Ref& b, int64_t d, Ref& y) {
    y.dtype = a.dtype;
    y.shape = a.shape;
    const int64_t na = a.shape[static_cast<size_t>(d)], nb = b.shape[static_cast<size_t>(d)];
    y.shape[static_cast<size_t>(d)] = na + nb;
    y.v.resize(static_cast<size_t>(prod(y.shape)));
    for (int64_t i = 0; i < y.numel(); ++i) {
      auto idx = unravel(i, y.shape);
      int64_t& k = idx[static_cast<size_t>(d)];
      const Ref& src = k < na ? a : b;
      if (k >= na) k -= na;
      y.v[static_cast<size_t>(i)] = src.v[static_cast<size_t>(ravel(idx, src.shape))];
    }
    return true;
  }

  std::mt19937_64 rng_;
  bool verbose_;
  std::vector<Entry> pool_;
  std::string text_;
  int64_t ops_ = 0;
};

// A random composition of smooth differentiable ops of f64 leaves, for gradcheck: the ops are
// drawn once and replayed on whatever inputs gradcheck passes in.
struct SmoothProgram {
  std::vector<Shape> shapes;
  std::vector<std::function<TensorList(const TensorList&)>> steps;  // pool -> pool with one more entry
  std::string text;
};

SmoothProgram smooth_program(std::mt19937_64& rng) {
  auto pick = [&](int n) { return std::uniform_int_distribution<int>(0, n - 1)(rng); };
  SmoothProgram p;
  const int n_in = 1 + pick(2);
  Shape base(static_cast<size_t>(pick(3)));
  for (int64_t& d : base) d = pick(4);  // includes 0
  for (int i = 0; i < n_in; ++i) p.shapes.push_back(base);
  p.text = "smooth program on " + std::to_string(n_in) + " leaves of shape " + shape_str(base) + ":";
  const int n_ops = 2 + pick(5);
  for (int k = 0; k < n_ops; ++k) {
    const int op = pick(9);
    const int a = pick(n_in + k), b = pick(n_in + k);
    static const char* names[] = {"tanh", "sin", "sigmoid", "add", "mul", "exp∘tanh", "transpose", "softmax", "sum(keepdim)"};
    p.text += std::string(" ") + names[op];
    p.steps.push_back([op, a, b](const TensorList& pool) {
      const Tensor &x = pool[static_cast<size_t>(a)], &y = pool[static_cast<size_t>(b)];
      Tensor r;
      switch (op) {
        case 0: r = tanh(x); break;
        case 1: r = sin(x); break;
        case 2: r = sigmoid(x); break;
        case 3: r = x.shape() == y.shape() ? x + y : x + x; break;
        case 4: r = x.shape() == y.shape() ? x * y : x * x; break;
        case 5: r = exp(tanh(x)); break;
        case 6: r = x.dim() >= 2 ? transpose(x, 0, -1) : x; break;
        case 7: r = x.dim() >= 1 ? softmax(x, -1) : softmax(x, 0); break;
        default: r = sum(x, {0}, true); break;
      }
      TensorList out = pool;
      out.push_back(r);
      return out;
    });
  }
  return p;
}

}  // namespace
}  // namespace gg::fuzz

int main(int argc, char** argv) {
  using namespace gg::fuzz;
  constexpr int64_t kDefaultPrograms = 400000;
  double seconds = -1;  // < 0: stop after max_programs
  int64_t max_programs = kDefaultPrograms;
  bool seed_given = false;
  uint64_t seed = 1;
  bool verbose = false;
  for (int i = 1; i < argc; ++i) {
    std::string a = argv[i];
    if (a == "--seconds" && i + 1 < argc) seconds = std::atof(argv[++i]);
    else if (a == "--programs" && i + 1 < argc) max_programs = std::atoll(argv[++i]);
    else if (a == "--seed" && i + 1 < argc) seed = std::strtoull(argv[++i], nullptr, 0), seed_given = true;
    else if (a == "--verbose") verbose = true;
    else {
      std::fprintf(stderr, "usage: %s [--programs N | --seconds S] [--seed X] [--verbose]\n", argv[0]);
      return 2;
    }
  }
  if (seconds >= 0) {
    max_programs = -1;
    if (!seed_given) seed = static_cast<uint64_t>(std::chrono::steady_clock::now().time_since_epoch().count());
  }
  std::printf("gg_fuzz: seed %llu (rerun with --seed %llu)\n", static_cast<unsigned long long>(seed),
              static_cast<unsigned long long>(seed));
  std::fflush(stdout);
  for (int s : {SIGSEGV, SIGBUS, SIGFPE, SIGILL, SIGABRT}) std::signal(s, on_crash);
  const auto t0 = std::chrono::steady_clock::now();
  int64_t programs = 0, ops = 0, gradchecks = 0;
  std::mt19937_64 master(seed);
  while (true) {
    const double elapsed = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    if ((max_programs >= 0 && programs >= max_programs) || (max_programs < 0 && elapsed >= seconds)) break;
    const uint64_t program_seed = master();
    if (verbose) std::printf("program %lld (seed %llu)\n", static_cast<long long>(programs), static_cast<unsigned long long>(program_seed));
    Program p(program_seed, verbose);
    try {
      p.run(4 + static_cast<int>(program_seed % 9));
      if (programs % 4 == 0) {
        std::mt19937_64 rng(program_seed);
        SmoothProgram sp = smooth_program(rng);
        std::snprintf(g_program_text, sizeof g_program_text, "%s\n", sp.text.c_str());
        gg::TensorList leaves;
        for (const gg::Shape& s : sp.shapes) leaves.push_back(gg::randn(s, gg::DType::f64).requires_grad_());
        gg::SingleFn f = [&sp](const gg::TensorList& xs) {
          gg::TensorList pool = xs;
          for (const auto& st : sp.steps) pool = st(pool);
          return pool.back();
        };
        gg::GradcheckResult r = programs % 8 == 0 ? gg::gradgradcheck(f, leaves) : gg::gradcheck(f, leaves);
        if (!r.ok) throw Failure{"gradcheck failed on " + sp.text + ": " + r.message};
        ++gradchecks;
      }
    } catch (const Failure& f) {
      std::fprintf(stderr, "gg_fuzz: FAILED (seed %llu, program %lld): %s\nprogram:\n%s", static_cast<unsigned long long>(seed),
                   static_cast<long long>(programs), f.what.c_str(), p.text().c_str());
      return 1;
    } catch (const std::exception& e) {
      std::fprintf(stderr, "gg_fuzz: FAILED (seed %llu, program %lld): unexpected %s\nprogram:\n%s",
                   static_cast<unsigned long long>(seed), static_cast<long long>(programs), e.what(), p.text().c_str());
      return 1;
    }
    ops += p.ops();
    ++programs;
  }
  const double elapsed = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  std::printf("gg_fuzz: %lld programs (%lld ops, %lld gradchecks) in %.1f s: %.0f programs/s, seed %llu\n",
              static_cast<long long>(programs), static_cast<long long>(ops), static_cast<long long>(gradchecks), elapsed,
              programs / std::max(elapsed, 1e-9), static_cast<unsigned long long>(seed));
  return 0;
}
