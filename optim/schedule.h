// Learning-rate schedules as plain functions of the step: assign the value to an optimizer's
// `lr` before each step, e.g. opt.lr = optim::warmup_cosine(step, 100, 10000, 3e-4).
#pragma once
#include <algorithm>
#include <cmath>
#include <cstdint>

namespace gg::optim {

// Cosine annealing from lr_max (step 0) to lr_min (step total and beyond).
inline double cosine(int64_t step, int64_t total, double lr_max, double lr_min = 0.0) {
  if (total <= 0 || step >= total) return lr_min;
  const double t = static_cast<double>(std::max<int64_t>(step, 0)) / static_cast<double>(total);
  return lr_min + 0.5 * (lr_max - lr_min) * (1.0 + std::cos(M_PI * t));
}

// Linear warm-up: lr·(step + 1)/warmup for step < warmup, then lr.
inline double linear_warmup(int64_t step, int64_t warmup, double lr) {
  if (warmup <= 0 || step >= warmup) return lr;
  return lr * static_cast<double>(std::max<int64_t>(step, 0) + 1) / static_cast<double>(warmup);
}

// Linear warm-up over `warmup` steps, then cosine annealing to lr_min at step `total`.
inline double warmup_cosine(int64_t step, int64_t warmup, int64_t total, double lr_max, double lr_min = 0.0) {
  if (step < warmup) return linear_warmup(step, warmup, lr_max);
  return cosine(step - warmup, total - warmup, lr_max, lr_min);
}

}  // namespace gg::optim
