// The examples' shared check of their metrics (common/metrics.h, common/run.h): a record with a
// NaN or ±inf ends the run with a message that names the metric and where it came from, and
// exit code 1; metrics.jsonl gets an error record with that message instead of the record. And
// the MAML examples' evaluation (maml_sine/report.h): tasks on which SGD diverged are counted and
// left out of the means, and too many of them end the run the same way.
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
#include "maml_sine/report.h"

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

TEST(Metrics, FailWritesTheErrorAndThrows) {
  const std::filesystem::path dir = scratch_dir("fail");
  {
    examples::Metrics metrics(dir.string(), "test", {{"seed", 0}});
    EXPECT_THROW(metrics.fail("too many diverged"), examples::MetricFailure);
  }
  const std::vector<nlohmann::json> lines = read_lines((dir / "metrics.jsonl").string());
  ASSERT_EQ(lines.size(), 2u);
  EXPECT_EQ(lines[1]["phase"], "error");
  EXPECT_EQ(lines[1]["error"], "too many diverged");
  std::filesystem::remove_all(dir);
}

// Four tasks, two steps recorded: task 1's support loss went up, task 3's overflowed.
TEST(FineTuningSummary, LeavesOutAndCountsTheTasksWhereSgdDiverged) {
  const std::vector<std::vector<double>> query = {{1.0, 2.0, 3.0, 4.0}, {0.5, 50.0, 1.5, kInf}};
  const maml::EvalRow row = maml::summarize_fine_tuning(query, {1.0, 1.0, 1.0, 1.0}, {0.1, 1.5, 0.2, kInf});
  EXPECT_EQ(row.tasks, 4);
  EXPECT_EQ(row.diverged, 2);
  ASSERT_EQ(row.steps.size(), 2u);
  EXPECT_DOUBLE_EQ(row.steps[0].mean, 2.0);  // tasks 0 and 2
  EXPECT_DOUBLE_EQ(row.steps[1].mean, 1.0);
  // A loss that did not change has not gone down; NaN has diverged.
  EXPECT_EQ(maml::summarize_fine_tuning({{1.0, 1.0}}, {1.0, 1.0}, {1.0, std::nan("")}).diverged, 2);
}

// One model's table: every row from `row`.
std::vector<std::pair<const char*, maml::EvalTable>> one_model(const maml::EvalRow& row) {
  return {{"maml", maml::EvalTable(maml::kEvalShots.size(), row)}};
}

maml::EvalRow row_with(int64_t tasks, int64_t diverged) {
  maml::EvalRow row;
  row.tasks = tasks;
  row.diverged = diverged;
  row.steps.assign(maml::kEvalSteps.size(), {0.5, 0.1, 0.05});
  return row;
}

TEST(FineTuningSummary, AFewDivergedTasksAreLoggedAndMoreEndTheRun) {
  const std::filesystem::path dir = scratch_dir("diverged");
  {
    examples::Metrics metrics(dir.string(), "test", {{"seed", 0}});
    maml::log_tables(metrics, one_model(row_with(600, 30)), "maml");      // 5%: a few
    maml::log_tables(metrics, one_model(row_with(8, 4)), "maml");         // too few tasks for a share
    maml::log_tables(metrics, one_model(row_with(600, 300)), "another");  // a baseline: reported only
    try {
      maml::log_tables(metrics, one_model(row_with(600, 31)), "maml");
      ADD_FAILURE() << "31 of 600 diverged tasks did not end the run";
    } catch (const examples::MetricFailure& e) {
      EXPECT_EQ(std::string(e.what()),
                "SGD diverged on 31 of 600 held-out tasks (model maml, K 5), more than 5% of them");
    }
  }
  const std::vector<nlohmann::json> lines = read_lines((dir / "metrics.jsonl").string());
  const size_t cells = maml::kEvalShots.size() * maml::kEvalSteps.size();
  ASSERT_EQ(lines.size(), 1 + 4 * cells + 1);  // the header, the four tables' cells, the error
  EXPECT_EQ(lines[1]["diverged"], 30);
  EXPECT_EQ(lines[1]["tasks"], 600);
  EXPECT_EQ(lines.back()["phase"], "error");
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
