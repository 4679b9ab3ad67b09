// metrics.jsonl, the same for every example: one JSON object per line.
//
//   line 1     {"example": "maml_sine", "config": {...every setting of the run...}}
//   training   {"phase": "maml", "step": 10, "loss": 2.31, "time_s": 0.8, ...}   step counts from 1
//   the rest   {"phase": "check" | "eval" | ..., ...}                              no "step"
//
// The same thing has the same key in every example: "step", "loss", "time_s", "lr",
// "grad_norm", "phase". check_metrics (examples/common/check_metrics.cpp) reads such a file in
// the smoke tests and checks the format and that each training phase's loss went down.
//
// Every number written is finite: a record holding NaN or ±inf (a diverged loss, an evaluation
// that blew up) is not written. Metrics writes {"phase": "error", "error": MESSAGE, "time_s"}
// in its place and throws NonFiniteMetric with that message, which names the metric, its value
// and the record's phase and step (or its other labels); examples::run_checked (common/run.h)
// prints it and exits with code 1.
#pragma once
#include <chrono>
#include <cmath>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <stdexcept>
#include <string>
#include <vector>

namespace examples {

// A result that fails the run (exit code 1 from examples::run_checked): a non-finite metric, or
// a finite one outside what the example accepts (Metrics::fail).
class MetricFailure : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};
class NonFiniteMetric : public MetricFailure {
 public:
  using MetricFailure::MetricFailure;
};

namespace detail {
// Appends "path = value" ("loss = nan", "per_chunk[2] = inf", "eval.mse = -inf") for every
// non-finite number in `j`, in key order.
inline void find_non_finite(const nlohmann::json& j, const std::string& path, std::string& found) {
  if (j.is_number_float() && !std::isfinite(j.get<double>())) {
    const double v = j.get<double>();
    found += (found.empty() ? "" : ", ") + path + " = " + (std::isnan(v) ? "nan" : v > 0 ? "inf" : "-inf");
  } else if (j.is_object()) {
    for (const auto& [k, v] : j.items()) find_non_finite(v, path.empty() ? k : path + "." + k, found);
  } else if (j.is_array()) {
    for (size_t i = 0; i < j.size(); ++i) find_non_finite(j[i], path + "[" + std::to_string(i) + "]", found);
  }
}
}  // namespace detail

// Throws NonFiniteMetric when a number in `record` (nested ones included) is NaN or ±inf, naming
// each such number, e.g.
//   non-finite metric: loss = nan (phase maml, step 120)
//   non-finite metric: ci95 = nan, mse = inf (phase eval, K 5, inner_steps 10, model maml)
// The labels are "phase", "step", then the record's other strings, integers and booleans.
inline void check_finite(const nlohmann::json& record) {
  std::string found;
  detail::find_non_finite(record, "", found);
  if (found.empty()) return;
  std::string labels;
  auto label = [&](const std::string& key, const nlohmann::json& v) {
    labels += (labels.empty() ? "" : ", ") + key + " " + (v.is_string() ? v.get<std::string>() : v.dump());
  };
  if (record.is_object()) {
    for (const char* key : {"phase", "step"})
      if (record.contains(key)) label(key, record[key]);
    for (const auto& [k, v] : record.items())
      if (k != "phase" && k != "step" && (v.is_string() || v.is_number_integer() || v.is_boolean())) label(k, v);
  }
  throw NonFiniteMetric("non-finite metric: " + found + (labels.empty() ? "" : " (" + labels + ")"));
}

class Metrics {
 public:
  Metrics(const std::string& dir, const std::string& example, const nlohmann::json& config)
      : path_(dir + "/metrics.jsonl"), out_(path_) {
    if (!out_) throw std::runtime_error("cannot write " + path_);
    write({{"example", example}, {"config", config}});
  }

  // Writes one record; for a record with a non-finite number, the error record instead, then
  // NonFiniteMetric.
  void write(const nlohmann::json& record) {
    check(record);
    out_ << record.dump() << "\n" << std::flush;
  }

  // check_finite(record) without writing the record: on a non-finite number, writes the error
  // record ("time_s": seconds since this Metrics was made) and throws NonFiniteMetric.
  void check(const nlohmann::json& record) {
    try {
      check_finite(record);
    } catch (const NonFiniteMetric& e) {
      write_error(e.what());
      throw;
    }
  }

  // Writes the error record for `message` and throws MetricFailure with it.
  [[noreturn]] void fail(const std::string& message) {
    write_error(message);
    throw MetricFailure(message);
  }
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
  void write_error(const std::string& message) {
    const double time_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - start_).count();
    out_ << nlohmann::json{{"phase", "error"}, {"error", message}, {"time_s", time_s}}.dump() << "\n" << std::flush;
  }

  std::string path_;
  std::ofstream out_;
  std::chrono::steady_clock::time_point start_ = std::chrono::steady_clock::now();
  std::map<std::string, std::vector<double>> losses_;
};

// How often to log a training step: every step of a short run (so a smoke run's curve has
// points to plot and to compare), every 10th of a long one.
inline int log_every(int iterations) { return iterations <= 200 ? 1 : 10; }
// Whether step `it` (from 1) of a run of `iterations` is logged: every log_every-th, and the last.
inline bool is_log_step(int it, int iterations) { return it % log_every(iterations) == 0 || it == iterations; }

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
