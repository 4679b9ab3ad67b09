// Reporting helpers for the ttt_e2e example: a progress bar, mean ± 95% CI, and the per-chunk
// loss plot (a data file + a gnuplot script). Nothing here touches autograd.
#pragma once
#include "common/report.h"
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <stdexcept>
#include <string>
#include <vector>

namespace ttt {

// The progress bar, statistics and gnuplot runner are shared by the examples (common/report.h).
using examples::ProgressBar;
using examples::Summary;
using examples::summarize;

// ---------------------------------------------------------------------------- plot
// curves[j][c]: the mean loss of setting j on chunk c (c = 0 .. chunks−1); floor[c] likewise.
// Writes DIR/chunk_loss.dat and DIR/ttt_e2e.gp; returns a line for the report.
inline std::string plot_chunk_losses(const std::string& dir, const std::string& title,
                                     const std::vector<std::string>& names,
                                     const std::vector<std::vector<double>>& curves, const std::vector<double>& floor,
                                     int64_t chunk) {
  std::ofstream dat(dir + "/chunk_loss.dat"), gp(dir + "/ttt_e2e.gp");
  if (!dat || !gp) throw std::runtime_error("cannot write the plot files into " + dir);
  dat << "# chunk first_token";
  for (const std::string& n : names) dat << " \"" << n << "\"";
  dat << " floor\n";
  for (size_t c = 0; c < floor.size(); ++c) {
    dat << c << " " << static_cast<int64_t>(c) * chunk;
    for (const auto& curve : curves) dat << " " << curve[c];
    dat << " " << floor[c] << "\n";
  }
  const char* styles[] = {"lc rgb '#7f7f7f' pt 5", "lc rgb '#1f77b4' pt 9", "lc rgb '#d62728' pt 7",
                          "lc rgb '#9467bd' pt 11", "lc rgb '#2ca02c' pt 13"};
  gp << "set terminal pngcairo size 900,620 enhanced font 'Sans,11'\n"
     << "set output 'ttt_e2e.png'\n"
     << "set title \"" << title << "\"\n"
     << "set xlabel 'chunk (" << chunk << " tokens each; TTT updates after every chunk)'\n"
     << "set ylabel 'mean next-token cross-entropy (nats)'\n"
     << "set grid\nset key below\nset xtics 1\n"
     << "set xrange [-0.3:" << static_cast<double>(floor.size()) - 0.7 << "]\n"
     << "plot ";
  for (size_t j = 0; j < names.size(); ++j)
    gp << (j ? ", \\\n     " : "") << "'chunk_loss.dat' using 1:" << j + 3 << " with linespoints lw 2 ps 1.2 "
       << styles[j % 5] << " title '" << names[j] << "'";
  gp << ", \\\n     '' using 1:" << names.size() + 3
     << " with lines lw 2 dt 2 lc rgb 'black' title 'floor: entropy rate of the true chains'\n";
  dat.close();
  gp.close();
  return examples::run_gnuplot(dir, "ttt_e2e.gp", "ttt_e2e.png");
}

}  // namespace ttt
