// The examples' shared check of their metrics (common/metrics.h, common/run.h): a record with a
// NaN or ±inf ends the run with a message that names the metric and where it came from, and
// exit code 1; metrics.jsonl gets an error record with that message instead of the record.
#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <limits>
#include <stdexcept>
#include <string>
#include <vector>

#include "common/metrics.h"
#include "common/run.h"

namespace {

constexpr double kInf = std::numeric_limits<double>::infinity();

// The message of the NonFiniteMetric that check_finite throws for `record` ("" when none).
std::string message_of(const nlohmann::json& record) {
  try {
    examples::check_finite(record);
  } catch (const examples::NonFiniteMetric& e) {
    return e.what();
  }
  return "";
}

std::filesystem::path scratch_dir(const std::string& name) {
  const std::filesystem::path dir = std::filesystem::temp_directory_path() / ("gg_test_metrics_" + name);
  std::filesystem::remove_all(dir);
  std::filesystem::create_directories(dir);
  return dir;
}

std::vector<nlohmann::json> read_lines(const std::string& path) {
  std::ifstream in(path);
  std::vector<nlohmann::json> lines;
  for (std::string line; std::getline(in, line);) lines.push_back(nlohmann::json::parse(line));
  return lines;
}

TEST(CheckFinite, PassesFiniteRecords) {
  EXPECT_EQ(message_of({{"phase", "maml"}, {"step", 3}, {"loss", 0.25}, {"time_s", 1.5}}), "");
  EXPECT_EQ(message_of({{"phase", "check"}, {"values", {1.0, -2.0, 1e308}}, {"ok", true}, {"name", "x"}}), "");
  EXPECT_EQ(message_of({{"example", "maml_sine"}, {"config", {{"lr", 1e-3}, {"iterations", 70000}}}}), "");
}

TEST(CheckFinite, NamesTheMetricThePhaseAndTheStep) {
  EXPECT_EQ(message_of({{"phase", "maml"}, {"step", 120}, {"loss", std::nan("")}, {"time_s", 3.0}}),
            "non-finite metric: loss = nan (phase maml, step 120)");
  EXPECT_EQ(message_of({{"phase", "ordinary"}, {"step", 2}, {"loss", 1.0}, {"grad_norm", -kInf}}),
            "non-finite metric: grad_norm = -inf (phase ordinary, step 2)");
}

TEST(CheckFinite, NamesEveryNonFiniteNumberOfAnEvaluationCell) {
  EXPECT_EQ(message_of({{"phase", "eval"}, {"model", "maml"}, {"K", 5}, {"inner_steps", 10}, {"mse", kInf},
                        {"ci95", std::nan("")}}),
            "non-finite metric: ci95 = nan, mse = inf (phase eval, K 5, inner_steps 10, model maml)");
}

TEST(CheckFinite, FindsNestedNumbers) {
  EXPECT_EQ(message_of({{"phase", "check"}, {"per_chunk", {kInf, 2.0, -kInf}}}),
            "non-finite metric: per_chunk[0] = inf, per_chunk[2] = -inf (phase check)");
  EXPECT_EQ(message_of({{"phase", "eval"}, {"loss", {{"mean", kInf}, {"sd", 0.1}}}}),
            "non-finite metric: loss.mean = inf (phase eval)");
}

TEST(Metrics, ANonFiniteLossThrowsAndIsReplacedByTheError) {
  const std::filesystem::path dir = scratch_dir("train");
  {
    examples::Metrics metrics(dir.string(), "test", {{"seed", 0}});
    metrics.train("maml", 1, 2.0, 0.1);
    EXPECT_THROW(metrics.train("maml", 2, std::nan(""), 0.2), examples::NonFiniteMetric);
    EXPECT_EQ(metrics.losses("maml").size(), 1u);
  }
  const std::vector<nlohmann::json> lines = read_lines((dir / "metrics.jsonl").string());
  ASSERT_EQ(lines.size(), 3u);  // the header, step 1, the error
  EXPECT_EQ(lines[1]["step"], 1);
  EXPECT_EQ(lines[2]["phase"], "error");
  EXPECT_EQ(lines[2]["error"], "non-finite metric: loss = nan (phase maml, step 2)");
  EXPECT_TRUE(lines[2]["time_s"].is_number());
  EXPECT_FALSE(lines[2].contains("loss"));
  std::filesystem::remove_all(dir);
}

TEST(Metrics, CheckWritesOnlyTheError) {
  const std::filesystem::path dir = scratch_dir("check");
  {
    examples::Metrics metrics(dir.string(), "test", {{"seed", 0}});
    metrics.check({{"phase", "meta"}, {"step", 1}, {"loss", 1.0}});
    EXPECT_THROW(metrics.check({{"phase", "meta"}, {"step", 2}, {"grad_norm", kInf}}), examples::NonFiniteMetric);
  }
  const std::vector<nlohmann::json> lines = read_lines((dir / "metrics.jsonl").string());
  ASSERT_EQ(lines.size(), 2u);  // the header, the error
  EXPECT_EQ(lines[1]["error"], "non-finite metric: grad_norm = inf (phase meta, step 2)");
  std::filesystem::remove_all(dir);
}

TEST(RunChecked, ANonFiniteMetricIsExitCode1WithItsMessage) {
  testing::internal::CaptureStderr();
  const int rc = examples::run_checked([] {
    examples::check_finite({{"phase", "maml"}, {"step", 7}, {"loss", kInf}});
    return 0;
  });
  const std::string err = testing::internal::GetCapturedStderr();
  EXPECT_EQ(rc, 1);
  EXPECT_EQ(err, "error: non-finite metric: loss = inf (phase maml, step 7)\n");
}

TEST(RunChecked, OtherErrorsAreExitCode2AndResultsPassThrough) {
  testing::internal::CaptureStderr();
  EXPECT_EQ(examples::run_checked([]() -> int { throw std::runtime_error("no such file"); }), 2);
  EXPECT_EQ(testing::internal::GetCapturedStderr(), "error: no such file\n");
  EXPECT_EQ(examples::run_checked([] { return 0; }), 0);
  EXPECT_EQ(examples::run_checked([] { return 1; }), 1);
}

}  // namespace
