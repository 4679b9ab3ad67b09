// A downstream program built against the installed package. It exits 0 when
//  1. the second derivative of x³ at x = 2 is 12, and
//  2. a tensor moved to cuda:0 comes back with its values (after an op on the GPU), or, where no
//     GPU can be used, the move throws gg::DeviceError saying why: "no usable GPU found" in a
//     CUDA build (unless GG_REQUIRE_GPU=1, when that is a failure too), "no CUDA backend" in a
//     CPU-only build.
// Nothing in gg::cuda is called: the tensor alone must reach the CUDA backend, as in a user's
// program (a backend registered by a static initialiser would be dropped by the linker here).
#include <gradgrad.h>

#include <cmath>
#include <cstdlib>
#include <exception>
#include <iostream>
#include <string>
#include <vector>

namespace {

bool second_derivative_ok() {
  gg::Tensor x = gg::full({}, 2.0, gg::DType::f64).requires_grad_();
  gg::Tensor dy = gg::grad(gg::pow(x, 3.0), x, {}, std::nullopt, /*create_graph=*/true);
  const double d2 = gg::grad(dy, x).item();
  std::cout << "d2/dx2 x^3 at 2 = " << d2 << "\n";
  return std::abs(d2 - 12.0) < 1e-12;
}

bool contains(const std::string& s, const std::string& part) { return s.find(part) != std::string::npos; }

bool gpu_round_trip_ok() {
  const std::vector<double> values = {1.5, -2.0, 0.25, 1e6};
  gg::Tensor host = gg::from_vector(values, {4}, gg::DType::f64);
  gg::Tensor back;
  try {
    gg::Tensor dev = host.to(gg::Device::cuda());
    back = (dev * 2.0).to(gg::Device::cpu());
  } catch (const gg::DeviceError& e) {
    const std::string m = e.what();
    const char* require = std::getenv("GG_REQUIRE_GPU");
#ifdef GG_HAS_CUDA
    const bool expected = contains(m, "no usable GPU found") && contains(m, "cuda:0") &&
                          !(require && std::string(require) == "1");
#else
    const bool expected = contains(m, "no CUDA backend") && contains(m, "cuda:0");
#endif
    std::cout << (expected ? "no GPU, as expected: " : "unexpected DeviceError: ") << m << "\n";
    return expected;
  }
  const std::vector<double> got = back.to_vector<double>();
  bool ok = got.size() == values.size();
  for (size_t i = 0; ok && i < values.size(); ++i) ok = got[i] == 2.0 * values[i];  // exact in f64
  std::cout << "GPU round trip " << (ok ? "matches" : "differs") << "\n";
  return ok;
}

}  // namespace

int main() {
  try {
    const bool cpu_ok = second_derivative_ok();
    const bool gpu_ok = gpu_round_trip_ok();
    return cpu_ok && gpu_ok ? 0 : 1;
  } catch (const std::exception& e) {
    std::cout << "unexpected exception: " << e.what() << "\n";
    return 1;
  }
}
