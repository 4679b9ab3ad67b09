// The sinusoid task family of Finn et al. 2017, §5.1: a task is y = A·sin(x − φ) with the
// amplitude A ~ U[0.1, 5.0] and the phase φ ~ U[0, π]; its data points have x ~ U[−5, 5].
//
// Tasks are drawn on the host with std::mt19937_64 (so a seed gives the same tasks on every
// device) and packed into batched tensors: T tasks with N points each become x and y of shape
// (T, N, 1). The whole meta-batch then goes through the network as one batched graph.
#pragma once
#include <cmath>
#include <cstdint>
#include <random>
#include <vector>

#include "gradgrad.h"

namespace maml {

constexpr double kPi = 3.14159265358979323846;
constexpr double kAmplitudeMin = 0.1, kAmplitudeMax = 5.0;
constexpr double kPhaseMin = 0.0, kPhaseMax = kPi;
constexpr double kXMin = -5.0, kXMax = 5.0;

// The parameters of T tasks.
struct SineTasks {
  std::vector<double> amplitude;  // (T)
  std::vector<double> phase;      // (T)
  int64_t size() const { return static_cast<int64_t>(amplitude.size()); }
  double value(int64_t task, double x) const {
    return amplitude[static_cast<size_t>(task)] * std::sin(x - phase[static_cast<size_t>(task)]);
  }
};

// N labelled points for each of T tasks.
struct Points {
  gg::Tensor x;  // (T, N, 1)
  gg::Tensor y;  // (T, N, 1)
};

// The first `n` points of every task: a view, no copy (slices are differentiable views).
inline Points first_points(const Points& p, int64_t n) {
  return {gg::slice(p.x, 1, 0, n), gg::slice(p.y, 1, 0, n)};
}

// Both point sets side by side: (T, N1 + N2, 1).
inline Points concat_points(const Points& a, const Points& b) {
  return {gg::cat({a.x, b.x}, 1), gg::cat({a.y, b.y}, 1)};
}

class SineTaskSampler {
 public:
  explicit SineTaskSampler(uint64_t seed) : rng_(seed) {}

  SineTasks tasks(int64_t count) {
    std::uniform_real_distribution<double> amplitude(kAmplitudeMin, kAmplitudeMax);
    std::uniform_real_distribution<double> phase(kPhaseMin, kPhaseMax);
    SineTasks t;
    for (int64_t i = 0; i < count; ++i) {
      t.amplitude.push_back(amplitude(rng_));
      t.phase.push_back(phase(rng_));
    }
    return t;
  }

  // `n` random points per task, x ~ U[−5, 5].
  Points points(const SineTasks& tasks, int64_t n, gg::DType dtype, gg::Device device) {
    std::uniform_real_distribution<double> x_dist(kXMin, kXMax);
    std::vector<double> xs, ys;
    for (int64_t t = 0; t < tasks.size(); ++t)
      for (int64_t i = 0; i < n; ++i) {
        const double x = x_dist(rng_);
        xs.push_back(x);
        ys.push_back(tasks.value(t, x));
      }
    return pack(xs, ys, tasks.size(), n, dtype, device);
  }

  // The same evenly spaced `n` points for every task (for plotting the curves).
  static Points grid(const SineTasks& tasks, int64_t n, gg::DType dtype, gg::Device device) {
    std::vector<double> xs, ys;
    for (int64_t t = 0; t < tasks.size(); ++t)
      for (int64_t i = 0; i < n; ++i) {
        const double x = kXMin + (kXMax - kXMin) * static_cast<double>(i) / static_cast<double>(n - 1);
        xs.push_back(x);
        ys.push_back(tasks.value(t, x));
      }
    return pack(xs, ys, tasks.size(), n, dtype, device);
  }

 private:
  static Points pack(const std::vector<double>& xs, const std::vector<double>& ys, int64_t tasks, int64_t n,
                     gg::DType dtype, gg::Device device) {
    return {gg::from_vector(xs, {tasks, n, 1}, dtype, device), gg::from_vector(ys, {tasks, n, 1}, dtype, device)};
  }

  std::mt19937_64 rng_;
};

}  // namespace maml
