#include <iostream>
#include "gradgrad.h"
int main() {
  gg::Tensor x = gg::from_vector({0.5}, {}, gg::DType::f64).requires_grad_();
  gg::Tensor y = gg::tanh(x);
  gg::Tensor d1 = gg::grad(y, x, {}, {true});
  gg::Tensor d2 = gg::grad(d1, x, {}, {true});
  std::cout << y << "\n" << d1 << "\n" << d2 << "\n";
}
