// Reporting helpers for the maml_sine example: a progress bar, mean ± 95% CI, and the
// Figure-2-style plot (data files + a gnuplot script). Nothing here touches autograd.
#pragma once
#include <unistd.h>

#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <stdexcept>
#include <string>
#include <vector>

namespace maml {

// ---------------------------------------------------------------------------- progress bar
// Drawn on stderr with '\r', at most ten times a second; off when stderr is not a terminal or
// when CI=true, so logs stay clean.
class ProgressBar {
 public:
  ProgressBar(const char* label, int total) : label_(label), total_(total), start_(Clock::now()) {
    const char* ci = std::getenv("CI");
    enabled_ = isatty(fileno(stderr)) && !(ci && std::strcmp(ci, "true") == 0);
  }
  ~ProgressBar() { finish(); }

  void update(int done, double loss) {
    if (!enabled_) return;
    const auto now = Clock::now();
    if (done < total_ && now - last_draw_ < std::chrono::milliseconds(100)) return;
    last_draw_ = now;
    const double elapsed = seconds_since(start_);
    const double eta = done > 0 ? elapsed / done * (total_ - done) : 0.0;
    constexpr int kWidth = 30;
    const int filled = total_ > 0 ? kWidth * done / total_ : kWidth;
    const std::string bar = std::string(filled, '#') + std::string(kWidth - filled, '.');
    std::fprintf(stderr, "\r%-9s [%s] %d/%d  loss %.4f  %.2f ms/it  ETA %.0f s ", label_, bar.c_str(), done, total_,
                 loss, done > 0 ? 1e3 * elapsed / done : 0.0, eta);
    std::fflush(stderr);
    drawn_ = true;
  }

  void finish() {
    if (drawn_) std::fprintf(stderr, "\n");
    drawn_ = false;
  }

 private:
  using Clock = std::chrono::steady_clock;
  static double seconds_since(Clock::time_point t) { return std::chrono::duration<double>(Clock::now() - t).count(); }
  const char* label_;
  int total_;
  bool enabled_ = false, drawn_ = false;
  Clock::time_point start_, last_draw_{};
};

// ---------------------------------------------------------------------------- statistics
struct MeanCI {
  double mean = 0.0, ci95 = 0.0;  // ci95: half-width of the normal-approximation 95% interval
};

inline MeanCI mean_ci95(const std::vector<double>& v) {
  MeanCI r;
  if (v.empty()) return r;
  for (double x : v) r.mean += x;
  r.mean /= static_cast<double>(v.size());
  if (v.size() < 2) return r;
  double ss = 0.0;
  for (double x : v) ss += (x - r.mean) * (x - r.mean);
  const double sd = std::sqrt(ss / static_cast<double>(v.size() - 1));
  r.ci95 = 1.96 * sd / std::sqrt(static_cast<double>(v.size()));
  return r;
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

inline std::string shell_quote(const std::string& s) {
  std::string q = "'";
  for (char c : s) q += c == '\'' ? std::string("'\\''") : std::string(1, c);
  return q + "'";
}

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
inline std::string run_gnuplot(const std::string& dir) {
  if (std::system("command -v gnuplot > /dev/null 2>&1") != 0)
    return "gnuplot not found on PATH: skipped the PNG (data and script are in " + dir + ")";
  const std::string cmd = "cd " + shell_quote(dir) + " && gnuplot maml_sine.gp";
  if (std::system(cmd.c_str()) != 0) return "gnuplot failed on " + dir + "/maml_sine.gp: no PNG";
  return "plot: " + dir + "/maml_sine.png";
}

}  // namespace maml
