// The promotion table PyTorch wrote (tests/fixtures/promotion.csv, by
// tests/fixtures/make_promotion_table.py): for each binary op and pair of operand kinds, the
// result dtype or "error". Read by tests/test_promotion.cpp (CPU) and
// tests/gpu/test_cuda_promotion.cpp (CUDA).
#pragma once
#include <gtest/gtest.h>

#include <fstream>
#include <optional>
#include <sstream>
#include <string>
#include <vector>

#include "gradgrad.h"

namespace gg::test::promotion {

struct Row {
  std::string op, a, b, result;  // result: a dtype name or "error"
};

inline std::vector<Row> table() {
  std::ifstream in(std::string(GG_FIXTURES_DIR) + "/promotion.csv");
  std::vector<Row> rows;
  std::string line;
  while (std::getline(in, line)) {
    if (line.empty() || line[0] == '#' || line.rfind("op,", 0) == 0) continue;
    std::stringstream ss(line);
    Row r;
    std::getline(ss, r.op, ',');
    std::getline(ss, r.a, ',');
    std::getline(ss, r.b, ',');
    std::getline(ss, r.result, ',');
    rows.push_back(r);
  }
  return rows;
}

inline DType dtype_of(const std::string& name) {
  for (DType t : {DType::f32, DType::f64, DType::bf16, DType::f16, DType::i64, DType::b8})
    if (name == dtype_name(t)) return t;
  throw std::runtime_error("promotion.csv: unknown dtype " + name);
}

// A tensor of ones ("f32": shape [2]; "f32[]": 0-dim) or a C++ number ("bool", "int", "float").
struct Operand {
  std::optional<Tensor> tensor;
  std::optional<Scalar> number;
};

inline Operand operand(const std::string& kind, Device device) {
  if (kind == "bool") return {std::nullopt, Scalar(true)};
  if (kind == "int") return {std::nullopt, Scalar(2)};
  if (kind == "float") return {std::nullopt, Scalar(2.5)};
  const bool zero_dim = kind.size() > 2 && kind.substr(kind.size() - 2) == "[]";
  const DType t = dtype_of(zero_dim ? kind.substr(0, kind.size() - 2) : kind);
  return {ones(zero_dim ? Shape{} : Shape{2}, t, device), std::nullopt};
}

// The dtype promotion alone predicts (nullopt where PyTorch refuses the pair).
inline std::optional<DType> expected(const Row& r) {
  if (r.result == "error") return std::nullopt;
  return dtype_of(r.result);
}

// Calls the gg op for a row: op(a, b) with a number on either side.
inline Tensor apply(const std::string& op, const Operand& a, const Operand& b) {
  auto call = [&](auto&& fn) -> Tensor {
    if (a.tensor && b.tensor) return fn(*a.tensor, *b.tensor);
    if (a.tensor) return fn(*a.tensor, *b.number);
    return fn(*a.number, *b.tensor);
  };
#define GG_PROMOTION_OP(name) \
  if (op == #name) return call([](const auto& x, const auto& y) { return name(x, y); });
  GG_PROMOTION_OP(add)
  GG_PROMOTION_OP(sub)
  GG_PROMOTION_OP(mul)
  GG_PROMOTION_OP(div)
  GG_PROMOTION_OP(pow)
  GG_PROMOTION_OP(maximum)
  GG_PROMOTION_OP(minimum)
  GG_PROMOTION_OP(eq)
  GG_PROMOTION_OP(ne)
  GG_PROMOTION_OP(lt)
  GG_PROMOTION_OP(le)
  GG_PROMOTION_OP(gt)
  GG_PROMOTION_OP(ge)
#undef GG_PROMOTION_OP
  if (op == "where") {
    const Device device = a.tensor ? a.tensor->device() : b.tensor->device();
    Tensor cond = gt(from_vector({1, -1}, {2}, DType::f32, device), 0.0);
    return call([&](const auto& x, const auto& y) { return where(cond, x, y); });
  }
  throw std::runtime_error("promotion.csv: unknown op " + op);
}

// Runs every row whose computation `device` supports (`computes`: the dtypes its kernels run
// in) and checks the result's dtype, or that gg refuses the pair with a DTypeError where
// PyTorch refuses it. Returns the number of rows run.
template <typename Computes>
int check_rows(Device device, Computes computes) {
  int run = 0;
  for (const Row& r : table()) {
    const std::optional<DType> want = expected(r);
    const DType compute = want ? (*want == DType::b8 ? DType::i64 : *want) : DType::f32;
    const Operand a = operand(r.a, device), b = operand(r.b, device);
    // A comparison computes in the operands' promoted dtype, not in b8.
    std::optional<DType> operands_type;
    if (a.tensor && b.tensor) operands_type = result_type(*a.tensor, *b.tensor);
    else if (a.tensor) operands_type = result_type(*a.tensor, *b.number);
    else operands_type = result_type(*a.number, *b.tensor);
    const DType needed = *operands_type == DType::b8 ? DType::i64 : *operands_type;
    if (!computes(compute) || !computes(needed)) continue;
    ++run;
    const std::string where = r.op + "(" + r.a + ", " + r.b + ")";
    if (!want) {
      EXPECT_THROW(apply(r.op, a, b), DTypeError) << where << ": PyTorch refuses it";
      continue;
    }
    try {
      Tensor y = apply(r.op, a, b);
      EXPECT_EQ(dtype_name(y.dtype()), r.result) << where;
    } catch (const std::exception& e) {
      ADD_FAILURE() << where << " threw " << e.what() << "; PyTorch gives " << r.result;
    }
  }
  return run;
}

}  // namespace gg::test::promotion
