// Tensor factories. Random numbers come from one default generator: a seed and a running
// offset into a counter-based stream, so results are reproducible on every backend.
#include <cmath>

#include "ops/common.h"

namespace gg {
namespace {
struct DefaultGenerator {
  uint64_t seed = 0x5eed;
  uint64_t offset = 0;
} g_generator;

Tensor make_random(const Shape& shape, DType dtype, Device device, kernels::RandomKind kind, double a, double b) {
  detail::check_max_dims("random", shape);
  GG_CHECK(is_floating(dtype), DTypeError, "gg::rand/randn: dtype must be floating, got ", dtype_name(dtype));
  Tensor t = empty(shape, dtype, device);
  dispatch::random({dtype, t.raw_data(), t.numel(), g_generator.seed, g_generator.offset, kind, a, b}, device);
  g_generator.offset += static_cast<uint64_t>(t.numel());
  return t;
}
}  // namespace

void manual_seed(uint64_t seed) { g_generator = {seed, 0}; }

Tensor full(const Shape& shape, double value, DType dtype, Device device) {
  detail::check_max_dims("full", shape);
  Tensor t = empty(shape, dtype, device);
  dispatch::fill({dtype, t.raw_data(), t.numel(), value}, device);
  return t;
}
Tensor zeros(const Shape& shape, DType dtype, Device device) { return full(shape, 0.0, dtype, device); }
Tensor ones(const Shape& shape, DType dtype, Device device) { return full(shape, 1.0, dtype, device); }
Tensor scalar_tensor(double value, DType dtype, Device device) { return full({}, value, dtype, device); }

namespace detail {
Tensor tensor_from(const std::vector<double>& values, const Shape& shape, DType dtype, Device device) {
  return from_vector(values, shape, dtype, device);
}
Tensor tensor_from(const std::vector<int64_t>& values, const Shape& shape, DType dtype, Device device) {
  if (dtype == DType::i64) return from_indices(values, shape, device);  // exact beyond 2^53
  return from_vector(std::vector<double>(values.begin(), values.end()), shape, dtype, device);
}
}  // namespace detail
Tensor zeros_like(const Tensor& t) {
  detail::check_defined("zeros_like", t, "input");
  return zeros(t.shape(), t.dtype(), t.device());
}
Tensor ones_like(const Tensor& t) {
  detail::check_defined("ones_like", t, "input");
  return ones(t.shape(), t.dtype(), t.device());
}
Tensor randn_like(const Tensor& t) {
  detail::check_defined("randn_like", t, "input");
  return randn(t.shape(), t.dtype(), t.device());
}

Tensor arange(double start, double end, double step, DType dtype, Device device) {
  GG_CHECK(std::isfinite(start) && std::isfinite(end) && std::isfinite(step), ValueError,
           "gg::arange: start, end and step must be finite, got start ", start, ", end ", end, ", step ", step);
  GG_CHECK(step != 0.0, ValueError, "gg::arange: step must be non-zero");
  GG_CHECK(end == start || (end > start) == (step > 0), ValueError, "gg::arange: the step's sign does not lead from start ",
           start, " to end ", end, " (step ", step, ")");
  const double count = std::ceil((end - start) / step);  // finite and >= 0 here (or inf if end - start overflows)
  GG_CHECK(count <= 9.0e18, ValueError, "gg::arange: ", count, " elements (start ", start, ", end ", end, ", step ",
           step, ") do not fit in int64");
  const auto n = static_cast<int64_t>(count);
  Tensor t = empty({n}, dtype, device);
  dispatch::arange({dtype, t.raw_data(), n, start, step}, device);
  return t;
}

Tensor randn(const Shape& shape, DType dtype, Device device) {
  return make_random(shape, dtype, device, kernels::RandomKind::normal, 0.0, 1.0);
}
Tensor rand(const Shape& shape, DType dtype, Device device) {
  return make_random(shape, dtype, device, kernels::RandomKind::uniform, 0.0, 1.0);
}

Tensor from_vector(const std::vector<double>& values, const Shape& shape, DType dtype, Device device) {
  detail::check_max_dims("from_vector", shape);
  GG_CHECK(static_cast<int64_t>(values.size()) == numel_of(shape), ShapeError, "gg::from_vector: got ",
           values.size(), " values for shape ", shape_str(shape), " (", numel_of(shape), " elements)");
  Tensor host = empty(shape, dtype, Device::cpu());
  auto layout = kernels::make_layout(shape, contiguous_strides(shape));
  kernels::CopyParams p{DType::f64, dtype, values.data(), host.raw_data(), layout, layout};
  dispatch::copy(p, Device::cpu());
  return device.is_cpu() ? host : to(host, device);
}

Tensor from_indices(const std::vector<int64_t>& values, const Shape& shape, Device device) {
  detail::check_max_dims("from_indices", shape);
  GG_CHECK(static_cast<int64_t>(values.size()) == numel_of(shape), ShapeError, "gg::from_indices: got ",
           values.size(), " values for shape ", shape_str(shape), " (", numel_of(shape), " elements)");
  Tensor host = empty(shape, DType::i64, Device::cpu());
  std::copy(values.begin(), values.end(), host.data<int64_t>());
  return device.is_cpu() ? host : to(host, device);
}

}  // namespace gg
