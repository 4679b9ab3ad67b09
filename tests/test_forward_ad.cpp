// Forward mode (autograd/forward_ad.h). The op table's JVP column: every row's JVP rule against
// the double-VJP (u ↦ Jᵀu is linear, so ∂⟨Jᵀu, v⟩/∂u = J·v) and finite differences; at order 2,
// the JVP of a gradient (forward over reverse), reverse over forward and forward over forward
// against reverse over reverse and differences of the gradient, all in f64. Then the fused
// attention's rules at every option and the write-into form of its forward's, the dual-tensor API
// (nesting, errors, an op without a rule) and the transforms built on it (jvp, jacfwd, hvp).
#include <cmath>
#include <string>

#include "op_table.h"

namespace gg::test {
namespace {

Values vals(const Tensor& t) { return contiguous(t).to_vector<double>(); }
Tensor or_zeros(const Tensor& t, const Tensor& like) { return t.defined() ? t : zeros_like(like); }

TensorList table_inputs(const OpCase& c) {
  const std::vector<Values> vs = op_inputs(c);
  TensorList xs;
  for (size_t i = 0; i < vs.size(); ++i) xs.push_back(from_vector(vs[i], c.shapes[i], DType::f64));
  return xs;
}

TensorList random_like(const TensorList& xs, uint64_t seed) {
  manual_seed(seed);
  TensorList out;
  for (const Tensor& x : xs) out.push_back(randn(x.shape(), DType::f64));
  return out;
}

TensorList leaves_of(const TensorList& xs) {
  TensorList out;
  for (const Tensor& x : xs) out.push_back(leaf(x));
  return out;
}

// ---------------------------------------------------------------- the references

// J·v by forward mode: one pass with the inputs carrying vs.
Tensor forward_jvp(const Fn& fn, const TensorList& xs, const TensorList& vs) {
  fwd::DualLevel level;
  TensorList duals;
  for (size_t i = 0; i < xs.size(); ++i) duals.push_back(fwd::make_dual(xs[i].detach(), vs[i]));
  const Tensor y = fn(duals);
  return or_zeros(fwd::unpack_dual(y).tangent, y);
}

// J·v by the double-VJP trick, reverse mode only.
Tensor double_vjp_jvp(const Fn& fn, const TensorList& xs, const TensorList& vs) {
  const TensorList in = leaves_of(xs);
  const Tensor y = fn(in);
  const Tensor u = zeros_like(y).requires_grad_(true);
  const TensorList g = grad({y}, in, {u}, true, true, /*allow_unused=*/true);
  Tensor inner = zeros({}, DType::f64);
  for (size_t i = 0; i < g.size(); ++i)
    if (g[i].defined()) inner = inner + sum(g[i] * vs[i]);
  if (!inner.requires_grad()) return zeros_like(y);
  return or_zeros(grad({inner}, {u}, {}, std::nullopt, false, true)[0], y);
}

// (f(x + h·v) − f(x − h·v)) / 2h.
Values fd_jvp(const Fn& fn, const TensorList& xs, const TensorList& vs, double h = 1e-6) {
  NoGradGuard ng;
  TensorList plus, minus;
  for (size_t i = 0; i < xs.size(); ++i) {
    plus.push_back(xs[i] + vs[i] * h);
    minus.push_back(xs[i] - vs[i] * h);
  }
  Values p = vals(fn(plus)), m = vals(fn(minus)), out(p.size());
  for (size_t i = 0; i < p.size(); ++i) out[i] = (p[i] - m[i]) / (2 * h);
  return out;
}

// ∇⟨w, f⟩ at xs, zeros for an unused input.
TensorList gradient(const Fn& fn, const TensorList& xs, const Tensor& w) {
  const TensorList in = leaves_of(xs);
  const Tensor y = fn(in);
  TensorList g = y.requires_grad() ? grad({y}, in, {w}, std::nullopt, false, true) : TensorList(in.size());
  for (size_t i = 0; i < g.size(); ++i) g[i] = or_zeros(g[i], xs[i]);
  return g;
}

// H_w·v, H_w the Hessian of ⟨w, f⟩, by reverse over reverse: ∇⟨∇⟨w, f⟩, v⟩.
TensorList reverse_over_reverse(const Fn& fn, const TensorList& xs, const Tensor& w, const TensorList& vs) {
  const TensorList in = leaves_of(xs);
  const Tensor y = fn(in);
  TensorList out(xs.size());
  if (y.requires_grad()) {
    const TensorList g = grad({y}, in, {w}, true, true, true);
    Tensor inner = zeros({}, DType::f64);
    for (size_t i = 0; i < g.size(); ++i)
      if (g[i].defined()) inner = inner + sum(g[i] * vs[i]);
    if (inner.requires_grad()) out = grad({inner}, in, {}, std::nullopt, false, true);
  }
  for (size_t i = 0; i < out.size(); ++i) out[i] = or_zeros(out[i], xs[i]);
  return out;
}

// H_w·v by forward over reverse: the gradient of dual inputs carries H_w·v as its tangent.
TensorList forward_over_reverse(const Fn& fn, const TensorList& xs, const Tensor& w, const TensorList& vs) {
  fwd::DualLevel level;
  TensorList duals;
  for (size_t i = 0; i < xs.size(); ++i) duals.push_back(fwd::make_dual(leaf(xs[i]), vs[i]));
  const Tensor y = fn(duals);
  TensorList out(xs.size());
  if (y.requires_grad()) {
    const TensorList g = grad({y}, duals, {w}, std::nullopt, false, true);
    for (size_t i = 0; i < g.size(); ++i)
      if (g[i].defined()) out[i] = fwd::unpack_dual(g[i]).tangent;
  }
  for (size_t i = 0; i < out.size(); ++i) out[i] = or_zeros(out[i], xs[i]);
  return out;
}

// H_w·v by reverse over forward: ∇⟨w, J·v⟩, the tangent differentiated in reverse mode.
TensorList reverse_over_forward(const Fn& fn, const TensorList& xs, const Tensor& w, const TensorList& vs) {
  const TensorList in = leaves_of(xs);
  TensorList out(xs.size());
  {
    fwd::DualLevel level;
    TensorList duals;
    for (size_t i = 0; i < xs.size(); ++i) duals.push_back(fwd::make_dual(in[i], vs[i]));
    const Tensor t = fwd::unpack_dual(fn(duals)).tangent;
    if (t.defined() && t.requires_grad()) out = grad({t}, in, {w}, std::nullopt, false, true);
  }
  for (size_t i = 0; i < out.size(); ++i) out[i] = or_zeros(out[i], xs[i]);
  return out;
}

// ⟨w, ∂²f[v, v2]⟩ by forward over forward: the outer tangent of the inner tangent.
double forward_over_forward(const Fn& fn, const TensorList& xs, const Tensor& w, const TensorList& vs,
                            const TensorList& v2s) {
  fwd::DualLevel outer;
  TensorList a;
  for (size_t i = 0; i < xs.size(); ++i) a.push_back(fwd::make_dual(xs[i], v2s[i], outer));
  fwd::DualLevel inner;
  TensorList b;
  for (size_t i = 0; i < xs.size(); ++i) b.push_back(fwd::make_dual(a[i], vs[i], inner));
  const Tensor t = fwd::unpack_dual(fn(b), inner).tangent;
  if (!t.defined()) return 0.0;
  const Tensor tt = fwd::unpack_dual(t, outer).tangent;
  return tt.defined() ? sum(w * tt).item() : 0.0;
}

Values flat(const TensorList& ts) {
  Values out;
  for (const Tensor& t : ts) {
    const Values v = vals(t);
    out.insert(out.end(), v.begin(), v.end());
  }
  return out;
}

// ---------------------------------------------------------------- the op table's JVP column

class OpTableJvp : public ::testing::TestWithParam<OpCase> {};

TEST_P(OpTableJvp, MatchesDoubleVjpAndFiniteDifferences) {
  const OpCase& c = GetParam();
  const TensorList xs = table_inputs(c), vs = random_like(xs, 11);
  const Tensor jv = forward_jvp(c.fn, xs, vs);
  EXPECT_EQ(jv.shape(), c.out_shape);
  EXPECT_EQ(jv.dtype(), DType::f64);
  expect_close(vals(jv), vals(double_vjp_jvp(c.fn, xs, vs)), 1e-12, 1e-12, c.name + ": jvp vs double vjp");
  expect_close(vals(jv), fd_jvp(c.fn, xs, vs), 1e-6, 1e-7, c.name + ": jvp vs finite differences");
}

// Only input i dual: the rule gets undefined tangents for the others and skips their terms.
Tensor forward_jvp_only(const Fn& fn, const TensorList& xs, const TensorList& vs, size_t i) {
  fwd::DualLevel level;
  TensorList in = xs;
  in[i] = fwd::make_dual(xs[i], vs[i]);
  const Tensor y = fn(in);
  return or_zeros(fwd::unpack_dual(y).tangent, y);
}

TEST_P(OpTableJvp, OneDualInputAtATime) {
  const OpCase& c = GetParam();
  const TensorList xs = table_inputs(c), vs = random_like(xs, 15);
  if (xs.size() < 2) GTEST_SKIP() << "one input";
  for (size_t i = 0; i < xs.size(); ++i) {
    TensorList only = vs;
    for (size_t j = 0; j < xs.size(); ++j)
      if (j != i) only[j] = zeros_like(vs[j]);
    expect_close(vals(forward_jvp_only(c.fn, xs, vs, i)), vals(double_vjp_jvp(c.fn, xs, only)), 1e-12, 1e-12,
                 c.name + ": only input " + std::to_string(i) + " dual");
  }
}

TEST_P(OpTableJvp, SecondOrderEveryWay) {
  const OpCase& c = GetParam();
  const TensorList xs = table_inputs(c), vs = random_like(xs, 12), v2s = random_like(xs, 13);
  manual_seed(14);
  const Tensor w = randn(c.out_shape, DType::f64);
  const Values want = flat(reverse_over_reverse(c.fn, xs, w, vs));
  // differences of the gradient along v
  Values fd;
  {
    const double h = 1e-5;
    TensorList plus, minus;
    for (size_t i = 0; i < xs.size(); ++i) {
      plus.push_back(xs[i] + vs[i] * h);
      minus.push_back(xs[i] - vs[i] * h);
    }
    const Values gp = flat(gradient(c.fn, plus, w)), gm = flat(gradient(c.fn, minus, w));
    for (size_t i = 0; i < gp.size(); ++i) fd.push_back((gp[i] - gm[i]) / (2 * h));
  }
  expect_close(want, fd, 1e-6, 1e-6, c.name + ": reverse over reverse vs differences of the gradient");
  expect_close(flat(forward_over_reverse(c.fn, xs, w, vs)), want, 1e-11, 1e-11, c.name + ": forward over reverse");
  expect_close(flat(reverse_over_forward(c.fn, xs, w, vs)), want, 1e-11, 1e-11, c.name + ": reverse over forward");
  double contracted = 0;  // ⟨H_w·v, v2⟩
  const Values v2 = flat(v2s);
  for (size_t i = 0; i < want.size(); ++i) contracted += want[i] * v2[i];
  EXPECT_NEAR(forward_over_forward(c.fn, xs, w, vs, v2s), contracted, 1e-10 * (1 + std::abs(contracted)))
      << c.name << ": forward over forward";
}

std::string row_name(const ::testing::TestParamInfo<OpCase>& info) { return info.param.name; }
INSTANTIATE_TEST_SUITE_P(Ops, OpTableJvp, ::testing::ValuesIn(op_table()), row_name);

// ---------------------------------------------------------------- fused attention

struct AttentionCase {
  std::string name;
  int64_t B, Hq, Hkv, Nq, Nk, d;
  AttentionOptions o;
};

std::vector<AttentionCase> attention_cases() {
  return {
      {"dense", 1, 2, 2, 4, 4, 3, {}},
      {"causal", 2, 1, 1, 5, 5, 2, {std::nullopt, true}},
      {"gqa_nq_lt_nk", 1, 4, 2, 3, 5, 2, {}},
      {"mqa_causal_nq_gt_nk", 1, 2, 1, 5, 3, 2, {std::nullopt, true}},  // the first two rows see no key
      {"window", 1, 2, 1, 6, 6, 3, {0.7, false, 1, 2}},
  };
}

void PrintTo(const AttentionCase& c, std::ostream* os) { *os << c.name; }

class AttentionJvp : public ::testing::TestWithParam<AttentionCase> {
 protected:
  TensorList inputs(uint64_t seed) const {
    const AttentionCase& c = GetParam();
    manual_seed(seed);
    return {randn({c.B, c.Hq, c.Nq, c.d}, DType::f64), randn({c.B, c.Hkv, c.Nk, c.d}, DType::f64),
            randn({c.B, c.Hkv, c.Nk, c.d}, DType::f64)};
  }
  // O and L as one vector, so one function checks both outputs' tangents.
  Fn fused() const {
    const AttentionOptions o = GetParam().o;
    return [o](const TensorList& x) {
      AttentionForward f = attention_forward(x[0], x[1], x[2], o);
      return cat({reshape(f.O, {-1}), reshape(where(isfinite_mask(f.L), f.L, 0.0), {-1})}, 0);
    };
  }
  Fn composite() const {
    const AttentionOptions o = GetParam().o;
    return [o](const TensorList& x) {
      AttentionForward f = attention_composite_forward(x[0], x[1], x[2], o);
      return cat({reshape(f.O, {-1}), reshape(where(isfinite_mask(f.L), f.L, 0.0), {-1})}, 0);
    };
  }
  static Tensor isfinite_mask(const Tensor& L) {  // L = -inf in a row that sees no key
    NoGradGuard ng;
    return gt(L.detach(), -1e300);
  }
};

TEST_P(AttentionJvp, ForwardRuleMatchesCompositeDoubleVjpAndDifferences) {
  const TensorList xs = inputs(1), vs = inputs(2);
  const Tensor jv = forward_jvp(fused(), xs, vs);
  expect_close(vals(jv), vals(forward_jvp(composite(), xs, vs)), 1e-12, 1e-12, "fused vs composite forward mode");
  expect_close(vals(jv), vals(double_vjp_jvp(fused(), xs, vs)), 1e-12, 1e-12, "fused: jvp vs double vjp");
  expect_close(vals(jv), fd_jvp(fused(), xs, vs), 1e-6, 1e-7, "fused: jvp vs finite differences");
  for (size_t i = 0; i < 3; ++i) {  // one of q, k, v dual at a time
    TensorList only = vs;
    for (size_t j = 0; j < 3; ++j)
      if (j != i) only[j] = zeros_like(vs[j]);
    expect_close(vals(forward_jvp_only(fused(), xs, vs, i)), vals(double_vjp_jvp(fused(), xs, only)), 1e-12, 1e-12,
                 "fused: only input " + std::to_string(i) + " dual");
  }
  // The public function is the rule itself.
  const AttentionForward t = attention_forward_jvp(xs[0], xs[1], xs[2], vs[0], vs[1], vs[2], GetParam().o);
  const Tensor direct = cat({reshape(t.O, {-1}), reshape(t.L, {-1})}, 0);
  expect_close(vals(direct), vals(jv), 1e-14, 1e-14, "attention_forward_jvp");
}

TEST_P(AttentionJvp, ForwardOverReverseRunsTheFusedBackwardAndMatchesEveryOtherWay) {
  const TensorList xs = inputs(3), vs = inputs(4);
  const AttentionOptions o = GetParam().o;
  const Fn fo = [o](const TensorList& x) { return attention(x[0], x[1], x[2], o); };
  const Fn co = [o](const TensorList& x) { return attention_composite(x[0], x[1], x[2], o); };
  manual_seed(5);
  const Tensor w = randn(xs[0].shape(), DType::f64);
  const Values want = flat(reverse_over_reverse(co, xs, w, vs));
  expect_close(flat(forward_over_reverse(fo, xs, w, vs)), want, 1e-11, 1e-11, "fused forward over reverse");
  expect_close(flat(reverse_over_forward(fo, xs, w, vs)), want, 1e-11, 1e-11, "fused reverse over forward");
  expect_close(flat(reverse_over_reverse(fo, xs, w, vs)), want, 1e-11, 1e-11, "fused reverse over reverse (BoB)");
  const TensorList v2s = inputs(6);
  double contracted = 0;
  const Values v2 = flat(v2s);
  for (size_t i = 0; i < want.size(); ++i) contracted += want[i] * v2[i];
  EXPECT_NEAR(forward_over_forward(fo, xs, w, vs, v2s), contracted, 1e-10 * (1 + std::abs(contracted)));
}

// A loss nonlinear in O and L: the cotangents dO, dL reaching the fused backward carry tangents
// themselves, so its rule's second half (the backward of dȮ, dL̇) is exercised.
TEST_P(AttentionJvp, ForwardOverReverseWithCotangentsThatDependOnTheInputs) {
  const TensorList xs = inputs(11), vs = inputs(12);
  const Fn f = fused(), c = composite();
  const Fn fused_sq = [f](const TensorList& x) { const Tensor y = f(x); return y * y; };
  const Fn composite_sq = [c](const TensorList& x) { const Tensor y = c(x); return y * y; };
  manual_seed(13);
  const Tensor w = randn(f(xs).shape(), DType::f64);
  const Values want = flat(reverse_over_reverse(composite_sq, xs, w, vs));
  expect_close(flat(forward_over_reverse(fused_sq, xs, w, vs)), want, 1e-11, 1e-11, "fused forward over reverse");
  expect_close(flat(reverse_over_reverse(fused_sq, xs, w, vs)), want, 1e-11, 1e-11, "fused reverse over reverse");
}

// Order 3 through the fused chain: the tangent of the BoB's outputs (its rule differentiates the
// composite BoB) against reverse mode all the way through the composite.
TEST_P(AttentionJvp, ThirdOrderForwardOverReverseOverReverse) {
  const TensorList xs = inputs(7), vs = inputs(8), cs = inputs(9);
  const AttentionOptions o = GetParam().o;
  manual_seed(10);
  const Tensor w = randn(xs[0].shape(), DType::f64);
  // g2(x) = ∇⟨∇⟨w, O⟩, c⟩; the quantity is the derivative of g2 along v.
  auto g2 = [&](const TensorList& in, bool fused_op) {
    const Tensor out = fused_op ? attention(in[0], in[1], in[2], o) : attention_composite(in[0], in[1], in[2], o);
    const TensorList g = grad({out}, in, {w}, true, true);
    Tensor s = zeros({}, DType::f64);
    for (size_t i = 0; i < 3; ++i) s = s + sum(g[i] * cs[i]);
    return grad({s}, in, {}, true, true, true);
  };
  Values fwd_vals;
  {
    fwd::DualLevel level;
    TensorList duals;
    for (size_t i = 0; i < 3; ++i) duals.push_back(fwd::make_dual(leaf(xs[i]), vs[i]));
    for (const Tensor& g : g2(duals, true)) {
      const Values v = vals(or_zeros(fwd::unpack_dual(g).tangent, g));
      fwd_vals.insert(fwd_vals.end(), v.begin(), v.end());
    }
  }
  const TensorList in = leaves_of(xs);
  const TensorList g = g2(in, false);
  Tensor s = zeros({}, DType::f64);
  for (size_t i = 0; i < 3; ++i) s = s + sum(g[i] * vs[i]);
  TensorList want = grad({s}, in, {}, std::nullopt, false, true);  // H symmetric: ∇⟨g2, v⟩ = ∂g2·v
  for (size_t i = 0; i < 3; ++i) want[i] = or_zeros(want[i], xs[i]);
  expect_close(fwd_vals, flat(want), 1e-10, 1e-10, "third order");
}

// The write-into form on the CPU runs the fused kernel into the given tensors: the only storage it
// allocates is the kernel's O and L scratch, and it gives attention_forward_jvp's tangents where
// that runs the kernel too (nothing recorded), in f64 and f32, and the composite formula's in f64
// (inputs that require grad keep attention_forward_jvp on it). Undefined tangents are zeros.
TEST_P(AttentionJvp, OutFormWritesTheKernelsTangentsIntoTheGivenTensors) {
  const AttentionCase& c = GetParam();
  const TensorList xs = inputs(21), vs = inputs(22);
  const Shape lse = {c.B, c.Hq, c.Nq};
  for (DType dt : {DType::f64, DType::f32}) {
    TensorList x, t;
    for (size_t i = 0; i < 3; ++i) {
      x.push_back(to(xs[i], dt));
      t.push_back(to(vs[i], dt));
    }
    const Tensor Ot = empty(xs[0].shape(), dt), Lt = empty(lse, dt);
    const int64_t allocations = cpu::memory_stats().allocations;
    attention_forward_jvp_out(x[0], x[1], x[2], t[0], t[1], t[2], Ot, Lt, c.o);
    EXPECT_EQ(cpu::memory_stats().allocations - allocations, 2) << dtype_name(dt);
    EXPECT_EQ(Ot.version(), 1u);
    EXPECT_EQ(Lt.version(), 1u);
    const AttentionForward want = attention_forward_jvp(x[0], x[1], x[2], t[0], t[1], t[2], c.o);
    EXPECT_EQ(vals(Ot), vals(want.O)) << dtype_name(dt);
    EXPECT_EQ(vals(Lt), vals(want.L)) << dtype_name(dt);
  }
  const Tensor Ot = empty(xs[0].shape(), DType::f64), Lt = empty(lse, DType::f64);
  attention_forward_jvp_out(xs[0], xs[1], xs[2], vs[0], vs[1], vs[2], Ot, Lt, c.o);
  const TensorList tracked = leaves_of(xs);
  const AttentionForward composite =
      attention_forward_jvp(tracked[0], tracked[1], tracked[2], vs[0], vs[1], vs[2], c.o);
  ASSERT_TRUE(composite.O.requires_grad());  // the composite formula ran
  expect_close(vals(Ot), vals(composite.O), 1e-12, 1e-12, "Ot vs composite");
  expect_close(vals(Lt), vals(composite.L), 1e-12, 1e-12, "Lt vs composite");
  // q̇ alone: k̇ and v̇ undefined, as zeros.
  attention_forward_jvp_out(xs[0], xs[1], xs[2], vs[0], Tensor(), Tensor(), Ot, Lt, c.o);
  const AttentionForward zeros_given =
      attention_forward_jvp(xs[0], xs[1], xs[2], vs[0], zeros_like(vs[1]), zeros_like(vs[2]), c.o);
  expect_close(vals(Ot), vals(zeros_given.O), 1e-15, 1e-15, "Ot with q-dot alone");
  expect_close(vals(Lt), vals(zeros_given.L), 1e-15, 1e-15, "Lt with q-dot alone");
}

std::string attention_name(const ::testing::TestParamInfo<AttentionCase>& info) { return info.param.name; }
INSTANTIATE_TEST_SUITE_P(Options, AttentionJvp, ::testing::ValuesIn(attention_cases()), attention_name);

// The write-into form's bad arguments: typed errors naming the op, the argument and its values.
TEST(AttentionJvpOut, BadArgumentsAreNamed) {
  manual_seed(23);
  const Shape sq = {1, 4, 5, 8}, sk = {1, 2, 7, 8}, lse = {1, 4, 5};
  TensorList x, t;
  for (const Shape& s : {sq, sk, sk}) {
    x.push_back(randn(s, DType::f64));
    t.push_back(randn(s, DType::f64));
  }
  const AttentionOptions o{0.3, false, 2, 1};
  const char* op = "gg::attention_forward_jvp_out: ";
  const Tensor O64 = empty(sq, DType::f64), L64 = empty(lse, DType::f64);
  expect_error<ShapeError>([&] { attention_forward_jvp_out(x[0], x[1], x[2], t[1], t[1], t[2], O64, L64, o); },
                           std::string(op) + "qt has shape [1, 2, 7, 8], expected [1, 4, 5, 8]");
  expect_error<DTypeError>(
      [&] { attention_forward_jvp_out(x[0], x[1], x[2], t[0], to(t[1], DType::f32), t[2], O64, L64, o); },
      std::string(op) + "kt has dtype f32, expected f64");
  expect_error<ShapeError>([&] { attention_forward_jvp_out(x[0], x[1], x[2], t[0], t[1], t[2], L64, L64, o); },
                           std::string(op) + "Ot must have shape [1, 4, 5, 8], got [1, 4, 5]");
  expect_error<DTypeError>(
      [&] { attention_forward_jvp_out(x[0], x[1], x[2], t[0], t[1], t[2], O64, empty(lse, DType::f32), o); },
      std::string(op) + "Lt must be f64, got f32");
  expect_error<ValueError>(
      [&] {
        attention_forward_jvp_out(x[0], x[1], x[2], t[0], t[1], t[2], transpose(empty({1, 4, 8, 5}, DType::f64), 2, 3),
                                  L64, o);
      },
      std::string(op) + "Ot must be contiguous");
  expect_error<ValueError>([&] { attention_forward_jvp_out(x[0], x[1], x[2], t[0], t[1], t[2], O64, Tensor(), o); },
                           std::string(op) + "Lt is an undefined tensor");
  const AttentionOptions bad{0.3, true, 2, 1};
  expect_error<ValueError>([&] { attention_forward_jvp_out(x[0], x[1], x[2], t[0], t[1], t[2], O64, L64, bad); },
                           std::string(op) + "causal = true means window_right = 0, got window_right = 1");
  // The CPU computes in f32 and f64 only.
  TensorList xb, tb;
  for (size_t i = 0; i < 3; ++i) {
    xb.push_back(to(x[i], DType::bf16));
    tb.push_back(to(t[i], DType::bf16));
  }
  expect_error<DTypeError>(
      [&] {
        attention_forward_jvp_out(xb[0], xb[1], xb[2], tb[0], tb[1], tb[2], empty(sq, DType::bf16), empty(lse), o);
      },
      std::string(op) + "q has dtype bf16; on the CPU it takes f32 and f64");
}


// ---------------------------------------------------------------- the dual-tensor API

Tensor vec(const Values& v) { return from_vector(v, {static_cast<int64_t>(v.size())}, DType::f64); }

TEST(ForwardAD, DualNumbersThroughOps) {
  const Tensor x = vec({0.3, -1.2, 2.0}), v = vec({1.0, 0.5, -2.0});
  fwd::DualLevel level;
  EXPECT_TRUE(fwd::is_active());
  const Tensor y = sin(fwd::make_dual(x, v)) * 2.0;
  const fwd::Dual d = fwd::unpack_dual(y);
  const Values xv = vals(x), vv = vals(v), t = vals(d.tangent), p = vals(d.primal);
  for (size_t i = 0; i < 3; ++i) {
    EXPECT_NEAR(p[i], 2 * std::sin(xv[i]), 1e-15);
    EXPECT_NEAR(t[i], 2 * std::cos(xv[i]) * vv[i], 1e-15);
  }
  EXPECT_FALSE(fwd::unpack_dual(d.primal).tangent.defined());  // the primal has no tangent at this level
  EXPECT_FALSE(fwd::unpack_dual(x).tangent.defined());         // nor has the tensor make_dual viewed
}

TEST(ForwardAD, RulesRunWithoutGradModeOrRequiresGrad) {
  const Tensor x = vec({0.5, 1.5}), v = vec({1.0, 1.0});
  NoGradGuard ng;
  fwd::DualLevel level;
  const Tensor t = fwd::unpack_dual(exp(fwd::make_dual(x, v))).tangent;
  ASSERT_TRUE(t.defined());
  EXPECT_FALSE(t.requires_grad());
  expect_close(vals(t), {std::exp(0.5), std::exp(1.5)}, 1e-15, 0, "exp tangent");
}

TEST(ForwardAD, ClosingALevelErasesItsTangents) {
  const Tensor x = vec({1.0, 2.0});
  Tensor y;
  {
    fwd::DualLevel level;
    y = tanh(fwd::make_dual(x, vec({1.0, 1.0})));
    EXPECT_TRUE(fwd::unpack_dual(y).tangent.defined());
  }
  EXPECT_FALSE(fwd::is_active());
  EXPECT_TRUE(y.impl().tangents.empty());
  fwd::DualLevel later;
  EXPECT_FALSE(fwd::unpack_dual(y).tangent.defined());
}

// exp's rule multiplies by its output y, so a tangent recorded on the tape (x requires grad) holds
// y through its history while y holds the tangent: a cycle, through y and through the copy of y
// that exp's node saves. Closing the level erases the tangents and so frees all of it.
TEST(ForwardAD, ClosingALevelFreesTangentsThatHoldTheirPrimal) {
  std::weak_ptr<TensorImpl> y_impl, t_impl;
  std::weak_ptr<Node> y_node;
  const Tensor x = leaf(vec({0.2, 0.9}));
  {
    fwd::DualLevel level;
    const Tensor y = exp(fwd::make_dual(x, vec({1.0, -1.0})));
    const Tensor t = fwd::unpack_dual(y).tangent;
    ASSERT_TRUE(t.requires_grad());
    y_impl = y.impl_ptr();
    t_impl = t.impl_ptr();
    y_node = y.grad_fn();
    EXPECT_FALSE(y_node.expired());
  }
  EXPECT_TRUE(y_impl.expired());
  EXPECT_TRUE(t_impl.expired());
  EXPECT_TRUE(y_node.expired());
}

TEST(ForwardAD, NestedLevelsGiveMixedSecondDerivatives) {
  // f(x) = x³: the inner tangent 3x²·v carries the outer tangent 6x·u·v.
  const Tensor x = vec({0.7, -1.3}), u = vec({1.0, 2.0}), v = vec({0.5, -1.0});
  fwd::DualLevel outer;
  const Tensor xo = fwd::make_dual(x, u, outer);
  fwd::DualLevel inner;
  EXPECT_EQ(inner.depth(), 1);
  const Tensor y = pow(fwd::make_dual(xo, v, inner), 3.0);
  const Tensor t = fwd::unpack_dual(y, inner).tangent;
  const Tensor tt = fwd::unpack_dual(t, outer).tangent;
  const Tensor to = fwd::unpack_dual(y, outer).tangent;
  const Values xv = vals(x), uv = vals(u), vv = vals(v);
  for (size_t i = 0; i < 2; ++i) {
    EXPECT_NEAR(vals(t)[i], 3 * xv[i] * xv[i] * vv[i], 1e-14);
    EXPECT_NEAR(vals(to)[i], 3 * xv[i] * xv[i] * uv[i], 1e-14);
    EXPECT_NEAR(vals(tt)[i], 6 * xv[i] * uv[i] * vv[i], 1e-14);
  }
}

TEST(ForwardAD, ReverseOverForwardDifferentiatesTheTangent) {
  // d/dx ⟨w, J(x)·v⟩ for f = x² ∘ sin x: J·v = (2x sin x + x² cos x) v.
  const Tensor x = leaf(vec({0.4, 1.1})), v = vec({1.0, -0.5}), w = vec({2.0, 1.0});
  fwd::DualLevel level;
  const Tensor t = fwd::unpack_dual(x * x * sin(fwd::make_dual(x, v))).tangent;  // only the sin factor is dual
  ASSERT_TRUE(t.requires_grad());
  const Tensor g = grad({t}, {x}, {w})[0];
  const Values xv = vals(x), vv = vals(v), wv = vals(w), gv = vals(g);
  for (size_t i = 0; i < 2; ++i)  // t = x² cos x · v
    EXPECT_NEAR(gv[i], wv[i] * vv[i] * (2 * xv[i] * std::cos(xv[i]) - xv[i] * xv[i] * std::sin(xv[i])), 1e-14);
}

TEST(ForwardAD, ForwardOverReverseIsAHessianVectorProductWithoutCreateGraph) {
  const Tensor x = vec({0.4, -0.9, 1.3}), v = vec({1.0, 2.0, -1.0});
  fwd::DualLevel level;
  const Tensor xd = fwd::make_dual(leaf(x), v);
  const Tensor g = grad(sum(pow(xd, 4.0)), xd);  // 4x³, no create_graph
  expect_close(vals(fwd::unpack_dual(g).tangent), vals(x * x * v * 12.0), 1e-14, 0, "12 x² v");
}

TEST(ForwardAD, MakeDualChecksItsArguments) {
  expect_error<AutogradError>([] { fwd::make_dual(vec({1.0}), vec({1.0})); },
                              "gg::fwd::make_dual: no dual level is open on this thread");
  fwd::DualLevel level;
  expect_error<ShapeError>([] { fwd::make_dual(vec({1.0, 2.0}), vec({1.0, 2.0, 3.0})); },
                           "gg::fwd::make_dual: tangent has shape [3] but primal has shape [2]");
  expect_error<DTypeError>([] { fwd::make_dual(vec({1.0, 2.0}), ones({2})); },
                           "gg::fwd::make_dual: tangent has dtype f32 but primal has dtype f64");
  expect_error<DTypeError>([] { fwd::make_dual(from_indices({1, 2}, {2}), from_indices({1, 2}, {2})); },
                           "gg::fwd::make_dual: primal must be a floating tensor, got i64");
  expect_error<ValueError>([] { fwd::make_dual(vec({1.0}), Tensor()); }, "gg::fwd::make_dual: tangent is an undefined tensor");
}

TEST(ForwardAD, AnOpWithoutARuleThrowsNamingIt) {
  // A user-defined op recorded with a backward only.
  auto twice = [](const Tensor& x) {
    Tensor y = x.detach() * 2.0;  // the forward, off the tape and without tangents
    record("twice", {x}, {y}, {}, [](const BackwardArgs& g) -> TensorList { return {g.grads[0] * 2.0}; });
    return y;
  };
  const Tensor x = vec({1.0, 2.0});
  EXPECT_EQ(vals(twice(x)), (Values{2.0, 4.0}));  // fine without a tangent
  fwd::DualLevel level;
  EXPECT_EQ(vals(twice(x)), (Values{2.0, 4.0}));  // and with a level open but no dual input
  expect_error<AutogradError>([&] { twice(fwd::make_dual(x, vec({1.0, 1.0}))); },
                              "gg::twice: this op has no forward-mode (JVP) rule, but its input 0 (shape [2]) carries "
                              "a tangent at dual level 0");
}

TEST(ForwardAD, ARuleGivingAWrongTangentIsCaught) {
  auto broken = [](const Tensor& x) {
    Tensor y = clone(x.detach());
    record(
        "broken", {x}, {y}, {}, [](const BackwardArgs& g) -> TensorList { return {g.grads[0]}; },
        [](const JvpArgs& j) -> TensorList { return {sum(j.tangents[0])}; });
    return y;
  };
  fwd::DualLevel level;
  expect_error<ShapeError>([&] { broken(fwd::make_dual(vec({1.0, 2.0}), vec({1.0, 1.0}))); },
                           "gg::broken: its JVP rule gave output 0 a tangent of shape [], expected [2]");
}

TEST(ForwardAD, InPlaceOnADualTensorIsRefused) {
  fwd::DualLevel level;
  Tensor d = fwd::make_dual(vec({1.0, 2.0}), vec({1.0, 1.0}));
  expect_error<AutogradError>([&] { d.mul_(2.0); }, "gg::mul_: in-place update of a dual tensor");
  Tensor plain = vec({1.0, 2.0});
  expect_error<AutogradError>([&] { plain.add_(d); }, "gg::add_: in-place update of a dual tensor (the source");
  plain.add_(vec({1.0, 1.0}));  // no tangent anywhere: fine
  expect_error<AutogradError>([&] { d.index_put_({0}, 5.0); }, "gg::index_put_: in-place update of a dual tensor");
  expect_error<AutogradError>([&] { plain.index_put_({0}, d[1]); },
                              "gg::index_put_: in-place update of a dual tensor (a forward-mode tangent on the value");
}

TEST(ForwardAD, UnpackingWithNoLevelOpenIsAnError) {
  { fwd::DualLevel opened_and_closed; }
  expect_error<AutogradError>([] { fwd::unpack_dual(vec({1.0})); }, "gg::fwd::unpack_dual: no dual level is open");
}

// ---------------------------------------------------------------- transforms

TEST(ForwardTransforms, JvpMatchesTheDoubleVjpOnSeveralOutputs) {
  manual_seed(21);
  const Tensor W = randn({4, 3}, DType::f64);
  const func::ListFn f = [&](const TensorList& x) {
    return TensorList{tanh(matmul(W, x[0]) * x[1]), sum(exp(x[0])) * x[1]};
  };
  const TensorList xs = {randn({3}, DType::f64), randn({4}, DType::f64)}, vs = {randn({3}, DType::f64), randn({4}, DType::f64)};
  const func::JvpResult r = func::jvp(f, xs, vs);
  for (size_t i = 0; i < 2; ++i) {
    const Fn fi = [&, i](const TensorList& x) { return f(x)[i]; };
    expect_close(vals(r.tangents[i]), vals(double_vjp_jvp(fi, xs, vs)), 1e-13, 1e-13, "jvp output " + std::to_string(i));
    expect_close(vals(r.outputs[i]), vals(f(xs)[i]), 0, 0, "jvp primal");
    EXPECT_FALSE(r.tangents[i].requires_grad());
  }
}

TEST(ForwardTransforms, JacfwdEqualsJacrev) {
  manual_seed(22);
  const Tensor W = randn({3, 5}, DType::f64);
  const func::ListFn f = [&](const TensorList& x) {
    return TensorList{softmax(matmul(W, x[0]) + x[1], 0), logsumexp(x[0] * x[0], {0}, false)};
  };
  const TensorList xs = {randn({5}, DType::f64), randn({3}, DType::f64)};
  const std::vector<TensorList> fw = func::jacfwd(f, xs), rv = func::jacrev(f, xs);
  for (size_t i = 0; i < 2; ++i)
    for (size_t j = 0; j < 2; ++j) {
      EXPECT_EQ(fw[i][j].shape(), rv[i][j].shape());
      expect_close(vals(fw[i][j]), vals(rv[i][j]), 1e-13, 1e-13, "jacfwd vs jacrev");
    }
  // through attention (the fused op's forward rule)
  const Tensor k = randn({1, 1, 4, 2}, DType::f64), v = randn({1, 1, 4, 2}, DType::f64);
  const TensorFn att = [&](const Tensor& q) { return attention(q, k, v, {std::nullopt, true}); };
  const Tensor q = randn({1, 1, 3, 2}, DType::f64);
  expect_close(vals(func::jacfwd(att, q)), vals(func::jacrev(att, q)), 1e-12, 1e-12, "attention jacfwd vs jacrev");
}

// jacfwd's columns carry one input's tangent: the other inputs enter without one, so no rule
// sees them as dual (a rule that tested its input for a tangent there would fail), and an error
// inside names jacfwd, the transform the user called.
TEST(ForwardTransforms, JacfwdColumnsCarryOneTangent) {
  const TensorList xs = {vec({1.0, 2.0}), vec({3.0})};
  std::vector<int> dual_inputs;
  const func::ListFn f = [&](const TensorList& x) {
    int n = 0;
    for (const Tensor& t : x) n += fwd::unpack_dual(t).tangent.defined();
    dual_inputs.push_back(n);
    return TensorList{x[0] * x[1]};
  };
  const std::vector<TensorList> jac = func::jacfwd(f, xs);
  EXPECT_EQ(dual_inputs, std::vector<int>({1, 1, 1}));  // one column per input element
  expect_close(vals(jac[0][0]), {3.0, 0.0, 0.0, 3.0}, 0, 0, "d(x0*x1)/dx0");
  expect_close(vals(jac[0][1]), {1.0, 2.0}, 0, 0, "d(x0*x1)/dx1");
  expect_error<ValueError>([&] { func::jacfwd([](const TensorList&) { return TensorList{Tensor()}; }, xs); },
                           "gg::func::jacfwd: f returned an undefined tensor");
}

TEST(ForwardTransforms, HvpForwardOverReverseEqualsReverseOverReverse) {
  manual_seed(23);
  const Tensor W = randn({4, 3}, DType::f64);
  const func::ListScalarFn f = [&](const TensorList& x) { return sum(tanh(matmul(W, x[0]) * x[1])) + sum(pow(x[0], 3.0)); };
  const TensorList xs = {randn({3}, DType::f64), randn({4}, DType::f64)}, vs = {randn({3}, DType::f64), randn({4}, DType::f64)};
  const TensorList hv = func::hvp(f, xs, vs);
  const Fn fn = [&](const TensorList& x) { return f(x); };
  const TensorList want = reverse_over_reverse(fn, xs, ones({}, DType::f64), vs);
  for (size_t i = 0; i < 2; ++i) expect_close(vals(hv[i]), vals(want[i]), 1e-13, 1e-13, "hvp " + std::to_string(i));
  // and the Hessian, column by column
  const Tensor h = hessian([&](const Tensor& z) { return f({slice(z, 0, 0, 3), slice(z, 0, 3, 7)}); }, cat(xs, 0));
  expect_close(vals(cat(hv, 0)), vals(matmul(h, cat(vs, 0))), 1e-12, 1e-12, "hvp vs hessian");
}

TEST(ForwardTransforms, JvpOfJvpAndJvpOfGrad) {
  // d²/dt² of f(x + t v) = vᵀ H v for f = Σ x⁴: jvp of (x ↦ jvp(f, x, v)) along v.
  const Tensor x = vec({0.5, -1.0, 2.0}), v = vec({1.0, 0.5, -0.25});
  const TensorFn jf = [&](const Tensor& y) { return jvp([](const Tensor& z) { return sum(pow(z, 4.0)); }, y, v); };
  const double got = jvp(jf, x, v).item();
  double want = 0;
  const Values xv = vals(x), vv = vals(v);
  for (size_t i = 0; i < 3; ++i) want += 12 * xv[i] * xv[i] * vv[i] * vv[i];
  EXPECT_NEAR(got, want, 1e-12);
  // jvp of the gradient is the HVP (forward over reverse through func::grad)
  const Tensor hv = jvp([](const Tensor& y) { return func::grad([](const Tensor& z) { return sum(pow(z, 4.0)); }, y); }, x, v);
  expect_close(vals(hv), vals(x * x * v * 12.0), 1e-14, 1e-14, "jvp of grad");
}

TEST(ForwardTransforms, TangentsThatRequireGradKeepTheResultOnTheTape) {
  const Tensor x = leaf(vec({0.3, 0.8})), v = vec({1.0, -1.0});
  const Tensor jv = jvp([](const Tensor& z) { return exp(z) * z; }, x, v);  // (1 + x) eˣ v
  ASSERT_TRUE(jv.requires_grad());
  const Values g = vals(grad(sum(jv), x));  // (2 + x) eˣ v
  const Values xv = vals(x), vv = vals(v);
  for (size_t i = 0; i < 2; ++i) EXPECT_NEAR(g[i], (2 + xv[i]) * std::exp(xv[i]) * vv[i], 1e-14);
}

}  // namespace
}  // namespace gg::test
