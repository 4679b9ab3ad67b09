// Type promotion: PyTorch's rules (ops/ops.h, result_type), checked against the table PyTorch
// writes (tests/fixtures/promotion.csv).
#include "ops/common.h"

namespace gg {
namespace {

enum class Category { boolean, integer, floating };

Category category(DType t) {
  if (t == DType::b8) return Category::boolean;
  if (t == DType::i64) return Category::integer;
  return Category::floating;
}

// The promoted dtype of one rank of operands; nullopt while the rank has none.
using Rank = std::optional<DType>;

void join(Rank& rank, DType t) { rank = rank ? promote_types(*rank, t) : t; }

// The higher rank's dtype, unless the lower rank's category is higher: then the two promote.
Rank combine(const Rank& higher, const Rank& lower) {
  if (!higher) return lower;
  if (!lower) return higher;
  if (category(*lower) > category(*higher)) return promote_types(*higher, *lower);
  return higher;
}

struct Ranks {
  Rank dimensioned, zero_dim, number;
  void add(const Tensor& t) { join(t.dim() > 0 ? dimensioned : zero_dim, t.dtype()); }
  // A floating number counts as the default dtype, f32; integers as i64, bools as b8.
  void add(const Scalar& s) { join(number, s.is_floating() ? DType::f32 : s.dtype()); }
  DType result() const { return *combine(dimensioned, combine(zero_dim, number)); }
};

}  // namespace

DType promote_types(DType a, DType b) {
  if (a == b) return a;
  if (category(a) != category(b)) return category(a) > category(b) ? a : b;
  // Both floating and different: f64 holds everything; f16 with bf16 needs f32; else the wider.
  if (a == DType::f64 || b == DType::f64) return DType::f64;
  return DType::f32;
}

DType result_type(const Tensor& a, const Tensor& b) {
  detail::check_defined("result_type", a, "a");
  detail::check_defined("result_type", b, "b");
  Ranks r;
  r.add(a);
  r.add(b);
  return r.result();
}

DType result_type(const Tensor& a, const Scalar& b) {
  detail::check_defined("result_type", a, "a");
  Ranks r;
  r.add(a);
  r.add(b);
  return r.result();
}

DType result_type(const Scalar& a, const Tensor& b) { return result_type(b, a); }

}  // namespace gg
