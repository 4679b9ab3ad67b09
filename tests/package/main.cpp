// Second derivative of x³ at x = 2 through the installed package: prints 12 and exits 0.
#include <gradgrad.h>

#include <cmath>
#include <iostream>

int main() {
  gg::Tensor x = gg::full({}, 2.0, gg::DType::f64).requires_grad_();
  gg::Tensor dy = gg::grad(gg::pow(x, 3.0), x, {}, {/*create_graph=*/true});
  double d2 = gg::grad(dy, x).item();
  std::cout << "d2/dx2 x^3 at 2 = " << d2 << "\n";
  return std::abs(d2 - 12.0) < 1e-12 ? 0 : 1;
}
