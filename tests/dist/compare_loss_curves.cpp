// compare_loss_curves A.jsonl B.jsonl RTOL PHASE...: the training records of each PHASE in two
// metrics.jsonl files (examples/common/metrics.h) have the same steps, and their losses agree
// to a relative tolerance. Prints the largest relative difference per phase; exit 1 otherwise.
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

namespace {

using Curve = std::map<int, double>;  // step -> loss

bool read_curves(const char* path, std::map<std::string, Curve>& out) {
  std::ifstream in(path);
  if (!in) {
    std::fprintf(stderr, "compare_loss_curves: cannot read %s\n", path);
    return false;
  }
  std::string line;
  while (std::getline(in, line)) {
    if (line.empty()) continue;
    const nlohmann::json r = nlohmann::json::parse(line, nullptr, false);
    if (r.is_discarded()) {
      std::fprintf(stderr, "compare_loss_curves: %s: a line is not JSON: %s\n", path, line.c_str());
      return false;
    }
    if (r.contains("phase") && r.contains("step") && r.contains("loss"))
      out[r["phase"].get<std::string>()][r["step"].get<int>()] = r["loss"].get<double>();
  }
  return true;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 5) {
    std::fprintf(stderr, "usage: compare_loss_curves A.jsonl B.jsonl RTOL PHASE...\n");
    return 2;
  }
  std::map<std::string, Curve> a, b;
  if (!read_curves(argv[1], a) || !read_curves(argv[2], b)) return 1;
  const double rtol = std::atof(argv[3]);
  bool ok = true;
  for (int i = 4; i < argc; ++i) {
    const std::string phase = argv[i];
    const Curve &ca = a[phase], &cb = b[phase];
    if (ca.empty() || ca.size() != cb.size()) {
      std::fprintf(stderr, "phase %s: %zu records in %s, %zu in %s\n", phase.c_str(), ca.size(), argv[1], cb.size(),
                   argv[2]);
      ok = false;
      continue;
    }
    double worst = 0;
    int worst_step = 0;
    for (const auto& [step, la] : ca) {
      const auto it = cb.find(step);
      if (it == cb.end()) {
        std::fprintf(stderr, "phase %s: step %d missing from %s\n", phase.c_str(), step, argv[2]);
        ok = false;
        break;
      }
      double rel = std::abs(la - it->second) / std::max({std::abs(la), std::abs(it->second), 1e-30});
      if (std::isnan(rel)) rel = INFINITY;  // a NaN loss on either side fails
      if (rel > worst) worst = rel, worst_step = step;
    }
    const bool pass = worst <= rtol;
    std::printf("phase %s: %zu steps, largest relative difference %.2e (step %d), tolerance %.1e: %s\n",
                phase.c_str(), ca.size(), worst, worst_step, rtol, pass ? "ok" : "FAILED");
    ok = ok && pass;
  }
  return ok ? 0 : 1;
}
