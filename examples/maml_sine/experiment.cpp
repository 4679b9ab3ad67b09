// The maml_sine program around its training loop (experiment.h): command line, self-checks,
// evaluation, plot and report.
#include "experiment.h"

#include <CLI/CLI.hpp>
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "common/cli.h"
#include "common/data_parallel.h"
#include "common/metrics.h"
#include "common/report.h"
#include "common/run.h"
#include "gradgrad.h"
#include "maml.h"
#include "report.h"
#include "sine_tasks.h"

namespace maml {
namespace {

using examples::seconds_since;

// ------------------------------------------------------------------------- self-checks
// Two quick checks in f64 that the batching trick and the second-order gradient are right.
// They run on every start (a few milliseconds) and make the program fail loudly if not.

double max_abs_diff(const gg::Tensor& a, const gg::Tensor& b) { return gg::max(gg::abs(a - b)).item(); }

// (1) The per-task gradients from the batched graph equal those computed task by task.
bool check_per_task_gradients(gg::Device device) {
  const gg::DType f64 = gg::DType::f64;
  const int64_t T = 4;
  SineTaskSampler sampler(1);
  const Points support = sampler.points(sampler.tasks(T), kShotsTrain, f64, device);
  const auto net = make_net(f64, device);
  const Params shared = net->named_parameters();
  const Params task_params = gg::nn::expand_params(shared, T);
  const gg::TensorList batched = gg::grad({summed_task_loss(*net, task_params, support)}, gg::nn::values(task_params));
  double worst = 0.0;
  for (int64_t t = 0; t < T; ++t) {
    const Points one{gg::slice(support.x, 0, t, t + 1), gg::slice(support.y, 0, t, t + 1)};
    const gg::TensorList single = gg::grad({summed_task_loss(*net, shared, one)}, net->parameters());
    for (size_t i = 0; i < shared.size(); ++i) {
      const gg::Tensor task_t = gg::reshape(gg::slice(batched[i], 0, t, t + 1), shared[i].second.shape());
      worst = std::max(worst, max_abs_diff(task_t, single[i]));
    }
  }
  const bool ok = worst < 1e-12;
  std::printf("  per-task gradients, batched vs one task at a time: max |diff| = %.1e  %s\n", worst,
              ok ? "ok" : "FAILED");
  return ok;
}

// (2) The meta-gradient, along a random direction v, against central finite differences of
//     the meta-loss. The first-order gradient is shown beside it: it is only an approximation.
bool check_meta_gradient(gg::Device device) {
  const gg::DType f64 = gg::DType::f64;
  SineTaskSampler sampler(2);
  const SineTasks tasks = sampler.tasks(5);
  const Points support = sampler.points(tasks, kShotsTrain, f64, device);
  const Points query = sampler.points(tasks, kShotsTrain, f64, device);
  const auto net = make_net(f64, device);
  const Params theta = net->named_parameters();
  gg::TensorList v;
  for (const gg::Tensor& p : net->parameters()) v.push_back(gg::randn_like(p));

  auto directional = [&](InnerGrad mode) {  // <∇θ meta-loss, v>
    const gg::TensorList g = gg::grad({meta_loss(*net, theta, support, query, kInnerLr, mode)}, net->parameters());
    double d = 0.0;
    for (size_t i = 0; i < g.size(); ++i) d += gg::sum(g[i] * v[i]).item();
    return d;
  };
  auto loss_at = [&](double h) {  // meta-loss(θ + h·v)
    gg::TensorList shifted;
    for (size_t i = 0; i < theta.size(); ++i) shifted.push_back((theta[i].second.detach() + v[i] * h).requires_grad_());
    return meta_loss(*net, gg::nn::with_values(theta, shifted), support, query, kInnerLr, InnerGrad::first_order)
        .item();
  };
  const double h = 1e-6;
  const double fd = (loss_at(h) - loss_at(-h)) / (2 * h);
  const double second = directional(InnerGrad::second_order);
  const double first = directional(InnerGrad::first_order);
  const double rel = std::abs(second - fd) / std::max(std::abs(fd), 1e-12);
  const bool ok = rel < 1e-5;
  std::printf("  meta-gradient along a random direction: finite differences %.9f, second order %.9f "
              "(rel. error %.1e) %s; first order %.9f\n",
              fd, second, rel, ok ? "ok" : "FAILED", first);
  return ok;
}

// ------------------------------------------------------------------------- training
// main.cpp's loop, or a variant for the flags that ask for one.
TrainResult train_phase(const Config& cfg, Train train, const Net& net, bool maml_objective,
                        examples::Metrics& metrics) {
  if (cfg.world_size > 1 || cfg.process_group) return train_data_parallel(cfg, net, maml_objective, metrics);
  if (maml_objective && cfg.cuda_graph) return train_maml_cuda_graph(cfg, net, metrics);
  return train(cfg, net, maml_objective, metrics);
}

// ------------------------------------------------------------------------- evaluation
struct EvalSet {
  SineTasks tasks;
  Points support;  // (T, 20, 1): the first K of them are the K-shot support set
  Points query;    // (T, 100, 1)
};

EvalSet make_eval_set(int64_t count, gg::Device device) {
  SineTaskSampler sampler(kEvalSeed);
  EvalSet e;
  e.tasks = sampler.tasks(count);
  e.support = sampler.points(e.tasks, kEvalShots.back(), gg::DType::f32, device);
  e.query = sampler.points(e.tasks, kEvalQuery, gg::DType::f32, device);
  return e;
}

// table[k]: query MSE over tasks with K = kEvalShots[k] after each of kEvalSteps, and the tasks
// on which SGD diverged (report.h).
EvalTable evaluate(const Net& net, const EvalSet& eval) {
  const Params params = net.named_parameters();
  EvalTable table;
  for (int64_t K : kEvalShots) {
    const Points support = first_points(eval.support, K);
    std::vector<std::vector<double>> query_mse;
    std::vector<double> support_first, support_last;
    fine_tune(net, params, support, kInnerLr, kEvalSteps.back(), [&](int step, const Params& p) {
      if (std::find(kEvalSteps.begin(), kEvalSteps.end(), step) != kEvalSteps.end())
        query_mse.push_back(per_task_mse(net, p, eval.query));
      if (step == 0) support_first = per_task_mse(net, p, support);
      if (step == kEvalSteps.back()) support_last = per_task_mse(net, p, support);
    });
    table.push_back(summarize_fine_tuning(query_mse, support_first, support_last));
  }
  return table;
}

// ------------------------------------------------------------------------- plot
// The paper's Figure 2: three test tasks, K = 5 support points; MAML before adaptation and
// after 1 and 10 steps, and the pretrained model after 10 steps.
std::string make_plot(const Config& cfg, const Net& maml_net, const Net& pretrained, const EvalSet& eval) {
  const int64_t kPanels = 3, kGrid = 200, K = 5;
  SineTasks tasks;
  for (int64_t t = 0; t < kPanels; ++t) {
    tasks.amplitude.push_back(eval.tasks.amplitude[static_cast<size_t>(t)]);
    tasks.phase.push_back(eval.tasks.phase[static_cast<size_t>(t)]);
  }
  const Points support =
      first_points({gg::slice(eval.support.x, 0, 0, kPanels), gg::slice(eval.support.y, 0, 0, kPanels)}, K);
  const Points grid = SineTaskSampler::grid(tasks, kGrid, gg::DType::f32, cfg.device);

  std::vector<std::vector<double>> curves;  // each (kPanels·kGrid), panel-major
  auto predict = [&](const Params& p) {
    gg::NoGradGuard no_grad;
    curves.push_back(maml_net(p, grid.x).to_vector<double>());
  };
  fine_tune(maml_net, maml_net.named_parameters(), support, kInnerLr, 10, [&](int step, const Params& p) {
    if (step == 0 || step == 1 || step == 10) predict(p);
  });
  fine_tune(pretrained, pretrained.named_parameters(), support, kInnerLr, 10, [&](int step, const Params& p) {
    if (step == 10) predict(p);
  });

  const std::vector<double> gx = grid.x.to_vector<double>(), gy = grid.y.to_vector<double>();
  const std::vector<double> sx = support.x.to_vector<double>(), sy = support.y.to_vector<double>();
  std::vector<PlotPanel> panels(kPanels);
  for (int64_t t = 0; t < kPanels; ++t) {
    PlotPanel& p = panels[static_cast<size_t>(t)];
    char title[96];
    std::snprintf(title, sizeof title, "test task %lld: A = %.2f, φ = %.2f", static_cast<long long>(t + 1),
                  tasks.amplitude[static_cast<size_t>(t)], tasks.phase[static_cast<size_t>(t)]);
    p.title = title;
    auto part = [&](const std::vector<double>& v, int64_t n) {
      return std::vector<double>(v.begin() + t * n, v.begin() + (t + 1) * n);
    };
    p.grid_x = part(gx, kGrid);
    p.truth = part(gy, kGrid);
    p.support_x = part(sx, K);
    p.support_y = part(sy, K);
    for (const auto& c : curves) p.curves.push_back(part(c, kGrid));
  }
  char title[160];
  std::snprintf(title, sizeof title, "MAML (%s, %d meta-iterations) vs pretrained: K = 5 support points, SGD α = 0.01",
                cfg.first_order ? "first order" : "second order", cfg.iterations);
  write_plot_files(cfg.out_dir, title,
                   {"MAML, before adaptation", "MAML, 1 grad step", "MAML, 10 grad steps", "pretrained, 10 grad steps"},
                   panels);
  return run_gnuplot(cfg.out_dir);
}

// ------------------------------------------------------------------------- the run
int run(const Config& cfg, Train train) {
  const auto program_start = std::chrono::steady_clock::now();
  std::printf("MAML sinusoid regression (Finn et al. 2017, §5.1) with gradgrad\n");
  std::printf("  device %s, seed %llu, %d meta-iterations%s, %s MAML%s\n", cfg.device.str().c_str(),
              static_cast<unsigned long long>(cfg.seed), cfg.iterations,
              cfg.full ? " (--full, the paper's schedule)" : "", cfg.first_order ? "first-order" : "second-order",
              cfg.cuda_graph ? ", meta-gradient replayed from a CUDA graph" : "");
  std::printf("  MLP 1-40-40-1 ReLU, MSE; meta-batch %lld tasks, K = %lld support + %lld query points, "
              "inner SGD α = %g, Adam %g\n",
              static_cast<long long>(cfg.meta_batch), static_cast<long long>(kShotsTrain),
              static_cast<long long>(kShotsTrain), kInnerLr, kMetaLr);
  if (!examples::describe_data_parallel(cfg.process_group.get(), cfg.world_size, cfg.device, "meta-batch")) return 2;
  std::printf("  output: %s\n\nself-checks (f64):\n", cfg.out_dir.c_str());
  const bool batching_ok = check_per_task_gradients(cfg.device);
  const bool meta_gradient_ok = check_meta_gradient(cfg.device);
  const bool checks_ok = batching_ok && meta_gradient_ok;

  examples::Metrics metrics(cfg.out_dir, "maml_sine",
                            {{"device", cfg.device.str()}, {"seed", cfg.seed}, {"iterations", cfg.iterations},
                             {"first_order", cfg.first_order}, {"cuda_graph", cfg.cuda_graph}, {"smoke", cfg.smoke},
                             {"eval_tasks", cfg.eval_tasks}, {"world_size", cfg.world_size}, {"nccl", cfg.nccl},
                             {"model", "MLP 1-40-40-1 ReLU"}, {"meta_batch", cfg.meta_batch}, {"shots", kShotsTrain},
                             {"inner_lr", kInnerLr}, {"outer_optimizer", "Adam"}, {"lr", kMetaLr}});

  gg::manual_seed(cfg.seed);
  const auto maml_net = make_net(gg::DType::f32, cfg.device);
  const auto pretrained = make_net(gg::DType::f32, cfg.device);

  std::printf("\nmeta-training (MAML):\n");
  const TrainResult m = train_phase(cfg, train, *maml_net, true, metrics);
  std::printf("  %d meta-iterations in %.1f s: %.3f ms per meta-iteration\n", cfg.iterations, m.seconds,
              1e3 * m.seconds / cfg.iterations);
  std::printf("pretraining (baseline: joint regression on all tasks, same iterations, Adam):\n");
  const TrainResult p = train_phase(cfg, train, *pretrained, false, metrics);
  std::printf("  %d iterations in %.1f s: %.3f ms per iteration\n", cfg.iterations, p.seconds,
              1e3 * p.seconds / cfg.iterations);
  if (!m.ranks_agree || !p.ranks_agree) return 1;

  const EvalSet eval = make_eval_set(cfg.eval_tasks, cfg.device);
  const auto eval_start = std::chrono::steady_clock::now();
  const EvalTable maml_table = evaluate(*maml_net, eval);
  const EvalTable pre_table = evaluate(*pretrained, eval);
  const double eval_s = seconds_since(eval_start);

  std::printf("\nresults: mean MSE ± 95%% CI on %lld held-out tasks (seed %llu), %lld query points each,\n",
              static_cast<long long>(cfg.eval_tasks), static_cast<unsigned long long>(kEvalSeed),
              static_cast<long long>(kEvalQuery));
  std::printf("after fine-tuning with plain SGD (α = %g) on K support points (evaluated in %.1f s)\n\n", kInnerLr,
              eval_s);
  print_table_header();
  print_table("MAML", maml_table);
  print_table("pretrained", pre_table);
  log_tables(metrics, {{"maml", maml_table}, {"pretrained", pre_table}}, "maml");  // a non-finite cell ends the run here
  std::printf("\nreference: Finn et al. 2017, K = 5, MSE after 1 / 5 / 10 steps\n");
  std::printf("  %-11s K = %-3d   %14s   %14.2f   %14.2f   %14.2f\n", "MAML", 5, "-", 0.67, 0.38, 0.35);
  std::printf("  %-11s K = %-3d   %14s   %14.2f   %14.2f   %14.2f\n\n", "pretrained", 5, "-", 2.41, 2.23, 2.19);

  std::printf("%s\n", make_plot(cfg, *maml_net, *pretrained, eval).c_str());
  std::printf("metrics: %s/metrics.jsonl\n", cfg.out_dir.c_str());
  std::printf("time per meta-iteration: %.3f ms (%s%s)\n", 1e3 * m.seconds / cfg.iterations, cfg.device.str().c_str(),
              cfg.cuda_graph ? ", CUDA graph" : "");
  metrics.write({{"phase", "summary"}, {"maml_ms_per_iteration", 1e3 * m.seconds / cfg.iterations},
                 {"pretrain_ms_per_iteration", 1e3 * p.seconds / cfg.iterations}, {"eval_s", eval_s},
                 {"total_s", seconds_since(program_start)}, {"checks_ok", checks_ok}});
  return checks_ok ? 0 : 1;
}

}  // namespace

// ------------------------------------------------------------------------- command line
int run_program(int argc, char** argv, Train train) {
  std::setvbuf(stdout, nullptr, _IOLBF, 0);  // line-buffered even into a log file, to follow a long run
  CLI::App app{"MAML on sinusoid regression (Finn et al. 2017, section 5.1), with gradgrad"};
  Config cfg;
  examples::add_device_option(app, cfg.device_name);
  app.add_option("--seed", cfg.seed, "seed for initialisation and training tasks")->capture_default_str();
  auto* iters = app.add_option("--iterations", cfg.iterations, "meta-iterations (also used for the baseline)")
                    ->check(CLI::Range(1, 10000000))
                    ->capture_default_str();
  auto* full = app.add_flag("--full", cfg.full, "the paper's 70,000 meta-iterations");
  app.add_flag("--first-order", cfg.first_order, "first-order MAML: treat the inner gradient as a constant");
  auto* smoke = app.add_flag("--smoke", cfg.smoke, "a tiny run for testing: 50 iterations, 20 evaluation tasks");
  auto* world = examples::add_world_size_option(app, cfg.world_size, "meta-batch");  // data_parallel.cpp
  app.add_option("--meta-batch", cfg.meta_batch, "tasks per meta-iteration, over all data-parallel ranks")
      ->check(CLI::Range(1, 1 << 16))
      ->capture_default_str();
  auto* graph = app.add_flag("--cuda-graph", cfg.cuda_graph,  // cuda_graph.cpp
                             "with --device cuda: capture the meta-gradient in a CUDA graph once and replay it each "
                             "iteration");
  graph->excludes(world);
  auto* nccl = examples::add_nccl_flag(app, cfg.nccl);  // data_parallel.cpp
  nccl->excludes(world);
  nccl->excludes(graph);
  app.add_option("--out", cfg.out_dir, "output directory (metrics.jsonl, plot)")->capture_default_str();
  full->excludes(iters);
  full->excludes(smoke);
  CLI11_PARSE(app, argc, argv);

  if (cfg.cuda_graph && cfg.device_name != "cuda") {
    std::fprintf(stderr, "error: --cuda-graph needs --device cuda\n");
    return 2;
  }
  if (cfg.full) cfg.iterations = kFullIterations;
  if (cfg.smoke) {
    if (iters->count() == 0) cfg.iterations = kSmokeIterations;
    cfg.eval_tasks = kSmokeEvalTasks;
  }
  if (!examples::check_world_size(cfg.world_size, cfg.meta_batch, "--meta-batch", "tasks")) return 2;
  return examples::prepare_and_run(cfg.device_name, cfg.device, cfg.out_dir, [&] {
    if (cfg.nccl)
      cfg.process_group = examples::join_nccl(cfg.device, cfg.world_size, cfg.out_dir, cfg.meta_batch, "tasks");
    return run(cfg, train);
  });
}

}  // namespace maml
