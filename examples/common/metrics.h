// metrics.jsonl, the same for every example: one JSON object per line.
//
//   line 1     {"example": "maml_sine", "config": {...every setting of the run...}}
//   training   {"phase": "maml", "step": 10, "loss": 2.31, "time_s": 0.8, ...}   step counts from 1
//   the rest   {"phase": "check" | "eval" | ..., ...}                              no "step"
//
// The same thing has the same key in every example: "step", "loss", "time_s", "lr",
// "grad_norm", "phase". check_metrics (examples/common/check_metrics.cpp) reads such a file in
// the smoke tests and checks the format and that each training phase's loss went down.
#pragma once
#include <cmath>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <stdexcept>
#include <string>
#include <vector>

namespace examples {

class Metrics {
 public:
  Metrics(const std::string& dir, const std::string& example, const nlohmann::json& config)
      : path_(dir + "/metrics.jsonl"), out_(path_) {
    if (!out_) throw std::runtime_error("cannot write " + path_);
    write({{"example", example}, {"config", config}});
  }

  void write(const nlohmann::json& record) { out_ << record.dump() << "\n" << std::flush; }

  // A training record; `extra` adds keys such as "lr" or "grad_norm".
  void train(const std::string& phase, int step, double loss, double time_s,
             const nlohmann::json& extra = nlohmann::json::object()) {
    nlohmann::json r = {{"phase", phase}, {"step", step}, {"loss", loss}, {"time_s", time_s}};
    for (const auto& [k, v] : extra.items()) r[k] = v;
    write(r);
    losses_[phase].push_back(loss);
  }

  const std::vector<double>& losses(const std::string& phase) { return losses_[phase]; }
  const std::string& path() const { return path_; }

 private:
  std::string path_;
  std::ofstream out_;
  std::map<std::string, std::vector<double>> losses_;
};

// How often to log a training step: every step of a short run (so a smoke run's curve has
// points to plot and to compare), every 10th of a long one.
inline int log_every(int iterations) { return iterations <= 200 ? 1 : 10; }

// Whether a loss curve went down: the mean of its last third is below the mean of its first
// third (single losses are noisy; thirds of a curve are not).
struct Trend {
  double first = NAN, last = NAN;
  bool down() const { return std::isfinite(first) && std::isfinite(last) && last < first; }
};
inline Trend trend(const std::vector<double>& losses) {
  Trend t;
  const size_t n = losses.size(), k = std::max<size_t>(1, n / 3);
  if (n < 2) return t;
  double a = 0, b = 0;
  for (size_t i = 0; i < k; ++i) a += losses[i], b += losses[n - k + i];
  t.first = a / static_cast<double>(k);
  t.last = b / static_cast<double>(k);
  return t;
}

}  // namespace examples
