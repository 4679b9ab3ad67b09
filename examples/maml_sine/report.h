// Reporting helpers for the maml_sine example: a progress bar, mean ± 95% CI, the evaluation
// table (shared with maml_attention) and the Figure-2-style plot (data files + a gnuplot
// script). Nothing here touches autograd.
#pragma once
#include "common/metrics.h"
#include "common/report.h"
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <exception>
#include <fstream>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

namespace maml {

// The progress bar, statistics and gnuplot runner are shared by the examples (common/report.h).
using examples::ProgressBar;
using MeanCI = examples::Summary;
inline MeanCI mean_ci95(const std::vector<double>& v) { return examples::summarize(v); }
using examples::shell_quote;

// ---------------------------------------------------------------------------- evaluation table
// Mean query MSE with a 95% CI for K support points after a number of inner SGD steps, printed
// and logged.
const std::vector<int64_t> kEvalShots = {5, 10, 20};  // K
const std::vector<int> kEvalSteps = {0, 1, 5, 10};     // inner SGD steps

// Plain SGD with a fixed step size diverges on a task whose support loss is too sharp for it
// (step size × the largest Hessian eigenvalue above 2): with K = 5 points a few held-out tasks
// can be such tasks, for gradgrad and PyTorch alike. A task has diverged when its support loss
// after the last step is not below its loss before the first (or not finite). Its query MSE
// would dominate the mean, so the means are over the other tasks and the diverged ones are
// counted beside them. For the model meta-trained to be fine-tuned this way, more than
// kMaxDivergedShare of at least kMinTasksForShare tasks ends the run like a non-finite metric (a
// model or a library that is wrong, not a few sharp tasks); a baseline not trained for SGD steps
// may diverge on many tasks, and a smaller evaluation (a smoke run's) only reports its count.
constexpr double kMaxDivergedShare = 0.05;
constexpr int64_t kMinTasksForShare = 100;

// One K: summaries after each of kEvalSteps over the tasks that did not diverge.
struct EvalRow {
  std::vector<MeanCI> steps;  // [s]: after kEvalSteps[s] steps
  int64_t tasks = 0;          // held-out tasks
  int64_t diverged = 0;       // of which SGD diverged (left out of `steps`)
};
// table[k]: the row for K = kEvalShots[k].
using EvalTable = std::vector<EvalRow>;

// query_mse[s][t]: task t's query MSE after kEvalSteps[s] steps; support_first / support_last:
// each task's support loss before the first step and after the last.
inline EvalRow summarize_fine_tuning(const std::vector<std::vector<double>>& query_mse,
                                     const std::vector<double>& support_first, const std::vector<double>& support_last) {
  EvalRow row;
  row.tasks = static_cast<int64_t>(support_first.size());
  std::vector<bool> kept(support_first.size());
  for (size_t t = 0; t < kept.size(); ++t) {
    kept[t] = std::isfinite(support_last[t]) && support_last[t] < support_first[t];
    row.diverged += kept[t] ? 0 : 1;
  }
  for (const std::vector<double>& per_task : query_mse) {
    std::vector<double> v;
    for (size_t t = 0; t < kept.size(); ++t)
      if (kept[t]) v.push_back(per_task[t]);
    row.steps.push_back(v.empty() ? MeanCI{NAN, NAN, NAN} : mean_ci95(v));
  }
  return row;
}

// The table's first line: a column per number of steps in kEvalSteps.
inline void print_table_header() {
  std::printf("  %-18s", "model");
  for (int s : kEvalSteps) std::printf("   %8d step%s", s, s == 1 ? " " : "s");
  std::printf("\n");
}

inline void print_table(const char* model, const EvalTable& t) {
  for (size_t k = 0; k < kEvalShots.size(); ++k) {
    std::printf("  %-11s K = %-3lld", model, static_cast<long long>(kEvalShots[k]));
    for (const MeanCI& m : t[k].steps) std::printf("   %6.3f ± %5.3f", m.mean, m.ci95);
    if (t[k].diverged > 0)
      std::printf("   (SGD diverged on %lld of %lld tasks)", static_cast<long long>(t[k].diverged),
                  static_cast<long long>(t[k].tasks));
    std::printf("\n");
  }
}

// Logs every cell of every model's table with its row's task counts; a non-finite cell is logged
// as an error record (common/metrics.h), and after the last cell the first one's NonFiniteMetric
// ends the run; so does a row of the model `meta_trained` where SGD diverged on too many tasks
// (kMaxDivergedShare, Metrics::fail).
inline void log_tables(examples::Metrics& metrics, const std::vector<std::pair<const char*, EvalTable>>& tables,
                       const std::string& meta_trained) {
  std::exception_ptr first_non_finite;
  std::string too_many_diverged;
  for (const auto& [model, t] : tables)
    for (size_t k = 0; k < kEvalShots.size(); ++k) {
      for (size_t s = 0; s < kEvalSteps.size(); ++s) try {
          metrics.write({{"phase", "eval"}, {"model", model}, {"K", kEvalShots[k]}, {"inner_steps", kEvalSteps[s]},
                         {"mse", t[k].steps[s].mean}, {"ci95", t[k].steps[s].ci95}, {"tasks", t[k].tasks},
                         {"diverged", t[k].diverged}});
        } catch (const examples::NonFiniteMetric&) {
          if (!first_non_finite) first_non_finite = std::current_exception();
        }
      if (too_many_diverged.empty() && model == meta_trained && t[k].tasks >= kMinTasksForShare &&
          t[k].diverged > kMaxDivergedShare * static_cast<double>(t[k].tasks))
        too_many_diverged = "SGD diverged on " + std::to_string(t[k].diverged) + " of " +
                            std::to_string(t[k].tasks) + " held-out tasks (model " + model + ", K " +
                            std::to_string(kEvalShots[k]) + "), more than " +
                            std::to_string(static_cast<int>(100 * kMaxDivergedShare)) + "% of them";
    }
  if (first_non_finite) std::rethrow_exception(first_non_finite);
  if (!too_many_diverged.empty()) metrics.fail(too_many_diverged);
}

// ---------------------------------------------------------------------------- plot
// One panel of the figure: a test task's true curve, its support points and model predictions
// on a common x grid. curves[j][i] is curve j at grid point i.
struct PlotPanel {
  std::string title;
  std::vector<double> grid_x, truth;
  std::vector<double> support_x, support_y;
  std::vector<std::vector<double>> curves;
};

// Writes DIR/plot_curves.dat, DIR/plot_support.dat and DIR/maml_sine.gp (one gnuplot data
// block per panel, selected with `index`). Returns the script's path.
inline std::string write_plot_files(const std::string& dir, const std::string& title,
                                    const std::vector<std::string>& curve_names, const std::vector<PlotPanel>& panels) {
  std::ofstream curves(dir + "/plot_curves.dat"), support(dir + "/plot_support.dat"), gp(dir + "/maml_sine.gp");
  if (!curves || !support || !gp) throw std::runtime_error("cannot write the plot files into " + dir);
  for (const PlotPanel& p : panels) {
    curves << "# x truth";
    for (const std::string& n : curve_names) curves << " \"" << n << "\"";
    curves << "\n";
    for (size_t i = 0; i < p.grid_x.size(); ++i) {
      curves << p.grid_x[i] << " " << p.truth[i];
      for (const auto& c : p.curves) curves << " " << c[i];
      curves << "\n";
    }
    curves << "\n\n";  // two blank lines end a gnuplot data block
    for (size_t i = 0; i < p.support_x.size(); ++i) support << p.support_x[i] << " " << p.support_y[i] << "\n";
    support << "\n\n";
  }
  const char* styles[] = {"lc rgb '#2ca02c' dt 2 lw 2", "lc rgb '#1f77b4' lw 2", "lc rgb '#d62728' lw 2",
                          "lc rgb '#9467bd' dt 4 lw 2", "lc rgb '#8c564b' lw 2"};
  // One legend for the whole figure, in a row below the panels.
  gp << "set terminal pngcairo size 1650,560 enhanced font 'Sans,11'\n"
     << "set output 'maml_sine.png'\n"
     << "set xrange [-5:5]\nset yrange [-6:6]\nset grid\nset bmargin 5\n"
     << "set multiplot layout 1," << panels.size() << " title \"" << title << "\"\n";
  for (size_t k = 0; k < panels.size(); ++k) {
    gp << (k == 0 ? "set key at screen 0.5, 0.02 center bottom horizontal maxrows 1 samplen 3 font ',10'\n"
                  : "unset key\n")
       << "set title \"" << panels[k].title << "\"\n"
       << "plot 'plot_curves.dat' index " << k << " using 1:2 with lines lc rgb 'black' lw 3 title 'ground truth'";
    for (size_t j = 0; j < curve_names.size(); ++j)
      gp << ", \\\n     '' index " << k << " using 1:" << j + 3 << " with lines " << styles[j % 5] << " title '"
         << curve_names[j] << "'";
    gp << ", \\\n     'plot_support.dat' index " << k
       << " using 1:2 with points pt 7 ps 1.4 lc rgb 'black' title 'support points'\n";
  }
  gp << "unset multiplot\n";
  return dir + "/maml_sine.gp";
}

// Runs gnuplot on the script if it is installed. Returns a line for the report.
inline std::string run_gnuplot(const std::string& dir) { return examples::run_gnuplot(dir, "maml_sine.gp", "maml_sine.png"); }

}  // namespace maml
