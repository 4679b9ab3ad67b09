// check_metrics FILE [PHASE ...]: checks an example's metrics.jsonl (examples/common/metrics.h):
// the first line records the example and its configuration; every later line is an object with
// a "phase"; every record with a "loss" has an integer "step" >= 1, a finite loss and "time_s";
// steps rise within a phase; no record is an error (a run that ended on a non-finite metric).
// Each PHASE named must have logged at least 3 losses whose curve went down (mean of the last
// third below the mean of the first third). Exit 0 = pass.
#include <cstdio>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "common/metrics.h"

int main(int argc, char** argv) {
  if (argc < 2) {
    std::fprintf(stderr, "usage: check_metrics FILE [PHASE ...]\n");
    return 2;
  }
  std::ifstream in(argv[1]);
  if (!in) {
    std::fprintf(stderr, "check_metrics: cannot read %s\n", argv[1]);
    return 1;
  }
  int errors = 0;
  auto fail = [&](size_t line, const std::string& what) {
    std::fprintf(stderr, "%s:%zu: %s\n", argv[1], line, what.c_str());
    ++errors;
  };
  std::map<std::string, std::vector<double>> losses;
  std::map<std::string, long long> last_step;
  std::string text;
  size_t line = 0;
  while (std::getline(in, text)) {
    ++line;
    nlohmann::json j;
    try {
      j = nlohmann::json::parse(text);
    } catch (const std::exception& e) {
      fail(line, std::string("not JSON: ") + e.what());
      continue;
    }
    if (!j.is_object()) {
      fail(line, "not an object");
      continue;
    }
    if (line == 1) {
      if (!j.contains("example") || !j["example"].is_string()) fail(line, "the first line needs \"example\"");
      if (!j.contains("config") || !j["config"].is_object()) fail(line, "the first line needs a \"config\" object");
      continue;
    }
    if (!j.contains("phase") || !j["phase"].is_string()) {
      fail(line, "no \"phase\"");
      continue;
    }
    const std::string phase = j["phase"];
    if (phase == "error") {  // the run ended on a non-finite metric (common/metrics.h)
      fail(line, "the run ended with " + j.value("error", std::string("an error")));
      continue;
    }
    if (!j.contains("loss")) continue;
    if (!j["loss"].is_number()) {
      fail(line, "\"loss\" is not a number (" + j["loss"].dump() + ")");
      continue;
    }
    if (!j.contains("step") || !j["step"].is_number_integer() || j["step"].get<long long>() < 1)
      fail(line, "a loss record needs an integer \"step\" >= 1");
    else if (j["step"].get<long long>() <= last_step[phase])
      fail(line, "steps of phase " + phase + " do not rise");
    else
      last_step[phase] = j["step"].get<long long>();
    if (!j.contains("time_s") || !j["time_s"].is_number()) fail(line, "a loss record needs \"time_s\"");
    losses[phase].push_back(j["loss"].get<double>());
  }
  if (line == 0) fail(0, "empty file");
  for (int i = 2; i < argc; ++i) {
    const std::vector<double>& l = losses[argv[i]];
    const examples::Trend t = examples::trend(l);
    std::printf("phase %-12s %3zu losses, first third %.5f, last third %.5f: %s\n", argv[i], l.size(), t.first, t.last,
                l.size() >= 3 && t.down() ? "went down" : "DID NOT GO DOWN");
    if (l.size() < 3 || !t.down()) ++errors;
  }
  return errors == 0 ? 0 : 1;
}
