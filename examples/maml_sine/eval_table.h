// The evaluation table shared by the MAML examples (maml_sine, maml_attention): mean query MSE
// with a 95% CI for K support points after a number of inner SGD steps, printed and logged.
#pragma once
#include <cstdint>
#include <cstdio>
#include <fstream>
#include <nlohmann/json.hpp>
#include <vector>

#include "common/metrics.h"
#include "report.h"

namespace maml {

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

inline void log_table(examples::Metrics& metrics, const char* model, const EvalTable& t) {
  for (size_t k = 0; k < kEvalShots.size(); ++k)
    for (size_t s = 0; s < kEvalSteps.size(); ++s)
      metrics.write({{"phase", "eval"}, {"model", model}, {"K", kEvalShots[k]}, {"inner_steps", kEvalSteps[s]},
                     {"mse", t[k][s].mean}, {"ci95", t[k][s].ci95}});
}

}  // namespace maml
