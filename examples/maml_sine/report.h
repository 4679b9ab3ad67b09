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

// table[k][s]: the summary for K = kEvalShots[k] after kEvalSteps[s] steps.
using EvalTable = std::vector<std::vector<MeanCI>>;

inline void print_table(const char* model, const EvalTable& t) {
  for (size_t k = 0; k < kEvalShots.size(); ++k) {
    std::printf("  %-11s K = %-3lld", model, static_cast<long long>(kEvalShots[k]));
    for (const MeanCI& m : t[k]) std::printf("   %6.3f ± %5.3f", m.mean, m.ci95);
    std::printf("\n");
  }
}

// Logs every cell of every model's table; a non-finite cell is logged as an error record
// (common/metrics.h), and after the last cell the first one's NonFiniteMetric ends the run.
inline void log_tables(examples::Metrics& metrics, const std::vector<std::pair<const char*, EvalTable>>& tables) {
  std::exception_ptr first_non_finite;
  for (const auto& [model, t] : tables)
    for (size_t k = 0; k < kEvalShots.size(); ++k)
      for (size_t s = 0; s < kEvalSteps.size(); ++s) try {
          metrics.write({{"phase", "eval"}, {"model", model}, {"K", kEvalShots[k]}, {"inner_steps", kEvalSteps[s]},
                         {"mse", t[k][s].mean}, {"ci95", t[k][s].ci95}});
        } catch (const examples::NonFiniteMetric&) {
          if (!first_non_finite) first_non_finite = std::current_exception();
        }
  if (first_non_finite) std::rethrow_exception(first_non_finite);
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
