// Reporting helpers shared by the examples: a stopwatch, a progress bar on stderr, mean ± 95% CI,
// and running gnuplot on a script the example wrote. Nothing here touches autograd.
#pragma once
#include <unistd.h>

#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

namespace examples {

// Seconds since `t`, e.g. since a loop's start.
inline double seconds_since(std::chrono::steady_clock::time_point t) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t).count();
}

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
    // Before the first loss is known (or if it is not finite) the field shows "-", not "nan".
    char loss_text[32] = "-";
    if (std::isfinite(loss)) std::snprintf(loss_text, sizeof loss_text, "%.4f", loss);
    std::fprintf(stderr, "\r%-9s [%s] %d/%d  loss %s  %.2f ms/it  ETA %.0f s ", label_, bar.c_str(), done, total_,
                 loss_text, done > 0 ? 1e3 * elapsed / done : 0.0, eta);
    std::fflush(stderr);
    drawn_ = true;
  }

  void finish() {
    if (drawn_) std::fprintf(stderr, "\n");
    drawn_ = false;
  }

 private:
  using Clock = std::chrono::steady_clock;
  const char* label_;
  int total_;
  bool enabled_ = false, drawn_ = false;
  Clock::time_point start_, last_draw_{};
};

// ---------------------------------------------------------------------------- statistics
struct Summary {
  double mean = 0.0, sd = 0.0, ci95 = 0.0;  // ci95: half-width of the normal-approximation 95% interval
};

inline Summary summarize(const std::vector<double>& v) {
  Summary r;
  if (v.empty()) return r;
  for (double x : v) r.mean += x;
  r.mean /= static_cast<double>(v.size());
  if (v.size() < 2) return r;
  double ss = 0.0;
  for (double x : v) ss += (x - r.mean) * (x - r.mean);
  r.sd = std::sqrt(ss / static_cast<double>(v.size() - 1));
  r.ci95 = 1.96 * r.sd / std::sqrt(static_cast<double>(v.size()));
  return r;
}

// ---------------------------------------------------------------------------- gnuplot
inline std::string shell_quote(const std::string& s) {
  std::string q = "'";
  for (char c : s) q += c == '\'' ? std::string("'\\''") : std::string(1, c);
  return q + "'";
}

// Runs `gnuplot SCRIPT` inside DIR when gnuplot is on PATH. Returns a line for the report.
inline std::string run_gnuplot(const std::string& dir, const std::string& script, const std::string& png) {
  if (std::system("command -v gnuplot > /dev/null 2>&1") != 0)
    return "gnuplot not found on PATH: skipped the PNG (data and script are in " + dir + ")";
  const std::string cmd = "cd " + shell_quote(dir) + " && gnuplot " + shell_quote(script);
  if (std::system(cmd.c_str()) != 0) return "gnuplot failed on " + dir + "/" + script + ": no PNG";
  return "plot: " + dir + "/" + png;
}

}  // namespace examples
