// Elementwise ops, table-driven: every unary and binary op on undefined, 0-dim, empty, NaN,
// integer and b8 inputs, plus a gradcheck at a 0-dim point.
#include <limits>

#include "harness.h"

namespace gg::edge {
namespace {

const double kNaN = std::numeric_limits<double>::quiet_NaN();

struct Unary {
  const char* name;
  std::function<Tensor(const Tensor&)> fn;
  std::function<double(double)> ref;
  double at;  // a point inside the domain, away from kinks
};

std::vector<Unary> unary_ops() {
  return {
      {"neg", [](const Tensor& x) { return neg(x); }, [](double v) { return -v; }, 0.7},
      {"exp", [](const Tensor& x) { return exp(x); }, [](double v) { return std::exp(v); }, 0.7},
      {"log", [](const Tensor& x) { return log(x); }, [](double v) { return std::log(v); }, 0.7},
      {"sqrt", [](const Tensor& x) { return sqrt(x); }, [](double v) { return std::sqrt(v); }, 0.7},
      {"tanh", [](const Tensor& x) { return tanh(x); }, [](double v) { return std::tanh(v); }, 0.7},
      {"sigmoid", [](const Tensor& x) { return sigmoid(x); }, [](double v) { return 1 / (1 + std::exp(-v)); }, 0.7},
      {"relu", [](const Tensor& x) { return relu(x); }, [](double v) { return v > 0 ? v : 0.0; }, 0.7},
      {"gelu", [](const Tensor& x) { return gelu(x); }, [](double v) { return 0.5 * v * (1 + std::erf(v / std::sqrt(2.0))); }, 0.7},
      {"erf", [](const Tensor& x) { return erf(x); }, [](double v) { return std::erf(v); }, 0.7},
      {"sin", [](const Tensor& x) { return sin(x); }, [](double v) { return std::sin(v); }, 0.7},
      {"cos", [](const Tensor& x) { return cos(x); }, [](double v) { return std::cos(v); }, 0.7},
      {"abs", [](const Tensor& x) { return abs(x); }, [](double v) { return std::abs(v); }, 0.7},
      {"pow", [](const Tensor& x) { return pow(x, 3.0); }, [](double v) { return v * v * v; }, 0.7},
      {"add_scalar", [](const Tensor& x) { return add_scalar(x, 2.5); }, [](double v) { return v + 2.5; }, 0.7},
      {"mul_scalar", [](const Tensor& x) { return mul_scalar(x, -1.5); }, [](double v) { return v * -1.5; }, 0.7},
      {"sign", [](const Tensor& x) { return sign(x); }, [](double v) { return double((v > 0) - (v < 0)); }, 0.7},
      {"log1p", [](const Tensor& x) { return log1p(x); }, [](double v) { return std::log1p(v); }, 0.7},
      {"expm1", [](const Tensor& x) { return expm1(x); }, [](double v) { return std::expm1(v); }, 0.7},
      {"floor", [](const Tensor& x) { return floor(x); }, [](double v) { return std::floor(v); }, 0.7},
      {"ceil", [](const Tensor& x) { return ceil(x); }, [](double v) { return std::ceil(v); }, 0.7},
      {"round", [](const Tensor& x) { return round(x); }, [](double v) { return std::nearbyint(v); }, 0.7},
  };
}

struct Binary {
  const char* name;
  std::function<Tensor(const Tensor&, const Tensor&)> fn;
  std::function<double(double, double)> ref;
  bool compare;
};

std::vector<Binary> binary_ops() {
  return {
      {"add", [](const Tensor& a, const Tensor& b) { return add(a, b); }, [](double a, double b) { return a + b; }, false},
      {"sub", [](const Tensor& a, const Tensor& b) { return sub(a, b); }, [](double a, double b) { return a - b; }, false},
      {"mul", [](const Tensor& a, const Tensor& b) { return mul(a, b); }, [](double a, double b) { return a * b; }, false},
      {"div", [](const Tensor& a, const Tensor& b) { return div(a, b); }, [](double a, double b) { return a / b; }, false},
      {"maximum", [](const Tensor& a, const Tensor& b) { return maximum(a, b); },
       [](double a, double b) { return std::isnan(a) || std::isnan(b) ? kNaN : std::max(a, b); }, false},
      {"minimum", [](const Tensor& a, const Tensor& b) { return minimum(a, b); },
       [](double a, double b) { return std::isnan(a) || std::isnan(b) ? kNaN : std::min(a, b); }, false},
      {"pow", [](const Tensor& a, const Tensor& b) { return pow(a, b); }, [](double a, double b) { return std::pow(a, b); },
       false},
      {"eq", [](const Tensor& a, const Tensor& b) { return eq(a, b); }, [](double a, double b) { return double(a == b); }, true},
      {"ne", [](const Tensor& a, const Tensor& b) { return ne(a, b); }, [](double a, double b) { return double(a != b); }, true},
      {"lt", [](const Tensor& a, const Tensor& b) { return lt(a, b); }, [](double a, double b) { return double(a < b); }, true},
      {"le", [](const Tensor& a, const Tensor& b) { return le(a, b); }, [](double a, double b) { return double(a <= b); }, true},
      {"gt", [](const Tensor& a, const Tensor& b) { return gt(a, b); }, [](double a, double b) { return double(a > b); }, true},
      {"ge", [](const Tensor& a, const Tensor& b) { return ge(a, b); }, [](double a, double b) { return double(a >= b); }, true},
  };
}

const bool registered = [] {
  for (const Unary& u : unary_ops()) {
    const std::string n = u.name, op = "gg::" + n + ":";
    add_case("unary/" + n + "/undefined", [u, op] { THROWS(ValueError, op + " input is an undefined tensor", u.fn(Tensor())); });
    add_case("unary/" + n + "/0-dim", [u] {
      Tensor y = u.fn(scalar_tensor(u.at, DType::f64));
      CHECK_SHAPE(y, {});
      CHECK_VALUES(y, {u.ref(u.at)});
    });
    add_case("unary/" + n + "/empty", [u] {
      Tensor y = u.fn(zeros({0, 3}, DType::f64));
      CHECK_SHAPE(y, {0, 3});
      CHECK(y.numel() == 0);
    });
    if (n == "floor" || n == "ceil" || n == "round") {
      add_case("unary/" + n + "/i64 input comes back as a copy", [u] {
        Tensor y = u.fn(from_indices({-3, 2}, {2}));
        CHECK(y.dtype() == DType::i64);
        CHECK_VALUES(y, {-3, 2});
      });
    } else if (n == "pow") {
      add_case("unary/pow/i64 input to a floating power promotes to f32", [] {
        Tensor y = pow(from_indices({1, 2}, {2}), 3.0);
        CHECK(y.dtype() == DType::f32);
        CHECK_VALUES(y, {1, 8});
      });
    } else {
      add_case("unary/" + n + "/i64 input", [u, op] {
        THROWS(DTypeError, op + " input must be a floating tensor", u.fn(from_indices({1, 2}, {2})));
      });
    }
    add_case("unary/" + n + "/strided view", [u] {
      // A transposed view reads the right elements.
      Tensor x = transpose(from_vector({0.1, 0.2, 0.3, 0.4, 0.5, 0.6}, {2, 3}, DType::f64), 0, 1);
      Tensor y = u.fn(x);
      CHECK_SHAPE(y, {3, 2});
      CHECK_VALUES(y, {u.ref(0.1), u.ref(0.4), u.ref(0.2), u.ref(0.5), u.ref(0.3), u.ref(0.6)});
    });
    if (n != "sign") {
      add_case("unary/" + n + "/gradcheck 0-dim", [u] {
        GradcheckResult r = gradcheck([u](const TensorList& xs) { return u.fn(xs[0]); },
                                      TensorList{scalar_tensor(u.at, DType::f64).requires_grad_()});
        if (!r.ok) fail(r.message, __FILE__, __LINE__);
      });
    }
    if (n != "relu" && n != "sign") {  // relu(NaN), sign(NaN): see the NaN cases in cases_reduce.cpp
      add_case("unary/" + n + "/NaN propagates", [u] {
        CHECK_VALUES(u.fn(from_vector({kNaN, u.at}, {2}, DType::f64)), {kNaN, u.ref(u.at)});
      });
    }
  }
  for (const Binary& b : binary_ops()) {
    const std::string n = b.name, op = "gg::" + n + ":";
    add_case("binary/" + n + "/undefined a", [b, op] {
      THROWS(ValueError, op + " a is an undefined tensor", b.fn(Tensor(), ones({2})));
    });
    add_case("binary/" + n + "/undefined b", [b, op] {
      THROWS(ValueError, op + " b is an undefined tensor", b.fn(ones({2}), Tensor()));
    });
    add_case("binary/" + n + "/f32 with f64 promotes to f64", [b] {
      Tensor r = b.fn(full({2}, 2.0), full({2}, 0.5, DType::f64));
      CHECK(r.dtype() == (b.compare ? DType::b8 : DType::f64));
      CHECK_VALUES(r, {b.ref(2.0, 0.5), b.ref(2.0, 0.5)});
    });
    add_case("binary/" + n + "/a 0-dim f64 does not widen f32", [b] {
      Tensor r = b.fn(full({2}, 2.0), scalar_tensor(0.5, DType::f64));
      CHECK(r.dtype() == (b.compare ? DType::b8 : DType::f32));
    });
    add_case("binary/" + n + "/devices differ", [b, op] {
      if (!cuda::is_available()) return;
      THROWS(DeviceError, op + " tensors are on different devices", b.fn(ones({2}), ones({2}, DType::f32, Device::cuda(0))));
    });
    add_case("binary/" + n + "/shape mismatch", [b, op] {
      THROWS(ShapeError, op + " shapes [2, 3] and [4] cannot be broadcast", b.fn(ones({2, 3}), ones({4})));
    });
    add_case("binary/" + n + "/b8 operands", [b, op, n] {
      Tensor m = gt(from_vector({1, 0}, {2}), zeros({2})), k = gt(from_vector({1, 1}, {2}), zeros({2}));
      if (n == "sub") {
        THROWS(DTypeError, "gg::sub: subtraction with a b8 operand is not supported", b.fn(m, k));
        THROWS(DTypeError, "gg::sub: subtraction with a b8 operand is not supported", b.fn(ones({2}), k));
      } else if (n == "div" || n == "pow") {
        THROWS(DTypeError, op + " not defined for b8 operands (got b8 and b8)", b.fn(m, k));
      } else {  // logical or / and, max, min, comparisons: a b8 result, as in PyTorch
        Tensor r = b.fn(m, k);
        CHECK(r.dtype() == DType::b8);
        CHECK_VALUES(r, {double(b.ref(1, 1) != 0), double(b.ref(0, 1) != 0)});
      }
    });
    add_case("binary/" + n + "/0-dim with 0-dim", [b] {
      Tensor y = b.fn(scalar_tensor(1.5, DType::f64), scalar_tensor(-2.0, DType::f64));
      CHECK_SHAPE(y, {});
      CHECK_VALUES(y, {b.ref(1.5, -2.0)});
      CHECK(y.dtype() == (b.compare ? DType::b8 : DType::f64));
    });
    add_case("binary/" + n + "/0-dim broadcast against empty", [b] {
      Tensor y = b.fn(scalar_tensor(1.5, DType::f64), zeros({0, 3}, DType::f64));
      CHECK_SHAPE(y, {0, 3});
    });
    add_case("binary/" + n + "/broadcast values", [b] {
      Tensor x = from_vector({1, -2, 3}, {3, 1}, DType::f64), y = from_vector({-2, 0.5}, {2}, DType::f64);
      Tensor r = b.fn(x, y);
      CHECK_SHAPE(r, {3, 2});
      CHECK_VALUES(r, {b.ref(1, -2), b.ref(1, 0.5), b.ref(-2, -2), b.ref(-2, 0.5), b.ref(3, -2), b.ref(3, 0.5)});
    });
    add_case("binary/" + n + "/NaN", [b] {
      Tensor r = b.fn(from_vector({kNaN, 1.0, kNaN}, {3}, DType::f64), from_vector({1.0, kNaN, kNaN}, {3}, DType::f64));
      CHECK_VALUES(r, {b.ref(kNaN, 1.0), b.ref(1.0, kNaN), b.ref(kNaN, kNaN)});
    });
    add_case("binary/" + n + "/i64", [b] {
      Tensor r = b.fn(from_indices({7, -7, 5}, {3}), from_indices({2, 2, 5}, {3}));
      CHECK(r.dtype() == (b.compare ? DType::b8 : DType::i64));
      if (std::string(b.name) == "div") CHECK_VALUES(r, {3, -3, 1});  // truncation toward zero (ops.h)
      else if (std::string(b.name) == "pow") CHECK_VALUES(r, {49, 49, 3125});  // exact integers
      else CHECK_VALUES(r, {b.ref(7, 2), b.ref(-7, 2), b.ref(5, 5)});
    });
  }
  return true;
}();

}  // namespace
}  // namespace gg::edge
