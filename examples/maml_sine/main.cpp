// MAML on sinusoid regression (Finn, Abbeel & Levine 2017, §5.1), end to end with gradgrad.
//
//   A task is y = A·sin(x − φ), A ~ U[0.1, 5], φ ~ U[0, π], x ~ U[−5, 5]. A 1-40-40-1 ReLU
//   network is meta-trained so that ONE plain SGD step (α = 0.01) on K = 10 points of a new
//   task fits that task well. Meta-batches hold 25 tasks (--meta-batch); the outer optimiser is
//   Adam (1e-3).
//
//   Second-order MAML differentiates through the inner gradient step, i.e. through a
//   backward pass: gg::grad(..., create_graph=true) records the inner backward on the tape so
//   the outer gg::grad can differentiate it. --first-order drops that term (FOMAML).
//
//   The baseline ("pretrained") is the same network trained by ordinary regression on all
//   tasks jointly, then fine-tuned at test time exactly like the MAML model.
//
// Files: sine_tasks.h (the task family), maml.h (model on gg::nn, inner step, meta-loss),
// report.h (progress bar, confidence intervals, plot); the outer optimiser is gg::optim::Adam.
// See docs/examples.md.
#include <CLI/CLI.hpp>
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "gradgrad.h"
#include "maml.h"
#include "report.h"
#include "common/metrics.h"
#include "common/run.h"
#include "sine_tasks.h"

namespace {

using maml::Params;
using maml::Points;
using nlohmann::json;

// ------------------------------------------------------------------------- settings
constexpr double kInnerLr = 0.01;  // α, training and test time
constexpr double kMetaLr = 1e-3;   // Adam
constexpr int64_t kMetaBatch = 25, kShotsTrain = 10;  // the paper's meta-batch (--meta-batch)
constexpr int kFullIterations = 70000;  // the paper's schedule
constexpr int kDefaultIterations = 40000;  // 1-2 minutes on a 2-core CPU
constexpr int kSmokeIterations = 50;
constexpr uint64_t kEvalSeed = 2017;  // held-out tasks, independent of --seed
constexpr int64_t kEvalTasks = 600, kSmokeEvalTasks = 20, kEvalQuery = 100;
using maml::kEvalShots;
using maml::kEvalSteps;

struct Config {
  std::string device_name;
  gg::Device device = gg::Device::cpu();
  uint64_t seed = 0;
  int iterations = kDefaultIterations;
  bool full = false, first_order = false, smoke = false, cuda_graph = false;
  std::string out_dir = "maml_sine_out";
  int64_t eval_tasks = kEvalTasks;
  int64_t meta_batch = kMetaBatch;  // tasks per meta-iteration, over all ranks
  int world_size = 1;  // data-parallel ranks sharing each meta-batch (threads, or processes with --nccl)
  bool nccl = false;
  std::shared_ptr<gg::dist::Group> process_group;  // --nccl: this process's rank
  maml::InnerGrad mode() const { return first_order ? maml::InnerGrad::first_order : maml::InnerGrad::second_order; }
};

double seconds_since(std::chrono::steady_clock::time_point t) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t).count();
}

// ------------------------------------------------------------------------- self-checks
// Two quick checks in f64 that the batching trick and the second-order gradient are right.
// They run on every start (a few milliseconds) and make the program fail loudly if not.

double max_abs_diff(const gg::Tensor& a, const gg::Tensor& b) { return gg::max(gg::abs(a - b)).item(); }

// (1) The per-task gradients from the batched graph equal those computed task by task.
bool check_per_task_gradients(gg::Device device) {
  const gg::DType f64 = gg::DType::f64;
  const int64_t T = 4;
  maml::SineTaskSampler sampler(1);
  const Points support = sampler.points(sampler.tasks(T), kShotsTrain, f64, device);
  const auto net = maml::make_net(f64, device);
  const Params shared = net->named_parameters();
  const Params task_params = gg::nn::expand_params(shared, T);
  const gg::TensorList batched =
      gg::grad({maml::summed_task_loss(*net, task_params, support)}, gg::nn::values(task_params));
  double worst = 0.0;
  for (int64_t t = 0; t < T; ++t) {
    const Points one{gg::slice(support.x, 0, t, t + 1), gg::slice(support.y, 0, t, t + 1)};
    const gg::TensorList single = gg::grad({maml::summed_task_loss(*net, shared, one)}, net->parameters());
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
  maml::SineTaskSampler sampler(2);
  const maml::SineTasks tasks = sampler.tasks(5);
  const Points support = sampler.points(tasks, kShotsTrain, f64, device);
  const Points query = sampler.points(tasks, kShotsTrain, f64, device);
  const auto net = maml::make_net(f64, device);
  const Params theta = net->named_parameters();
  gg::TensorList v;
  for (const gg::Tensor& p : net->parameters()) v.push_back(gg::randn_like(p));

  auto directional = [&](maml::InnerGrad mode) {  // <∇θ meta-loss, v>
    const gg::TensorList g = gg::grad({maml::meta_loss(*net, theta, support, query, kInnerLr, mode)}, net->parameters());
    double d = 0.0;
    for (size_t i = 0; i < g.size(); ++i) d += gg::sum(g[i] * v[i]).item();
    return d;
  };
  auto loss_at = [&](double h) {  // meta-loss(θ + h·v)
    gg::TensorList shifted;
    for (size_t i = 0; i < theta.size(); ++i) shifted.push_back((theta[i].second.detach() + v[i] * h).requires_grad_());
    return maml::meta_loss(*net, gg::nn::with_values(theta, shifted), support, query, kInnerLr,
                           maml::InnerGrad::first_order).item();
  };
  const double h = 1e-6;
  const double fd = (loss_at(h) - loss_at(-h)) / (2 * h);
  const double second = directional(maml::InnerGrad::second_order);
  const double first = directional(maml::InnerGrad::first_order);
  const double rel = std::abs(second - fd) / std::max(std::abs(fd), 1e-12);
  const bool ok = rel < 1e-5;
  std::printf("  meta-gradient along a random direction: finite differences %.9f, second order %.9f "
              "(rel. error %.1e) %s; first order %.9f\n",
              fd, second, rel, ok ? "ok" : "FAILED", first);
  return ok;
}

// ------------------------------------------------------------------------- training
// A non-finite loss ends the run from Metrics::train (common/metrics.h).
struct TrainResult {
  double seconds = 0.0;
  bool ranks_agree = true;  // every data-parallel rank ended with rank 0's parameters
};

// --cuda-graph: meta-training with the meta-gradient (forward, inner step with its backward,
// outer backward) captured once in a CUDA graph and replayed every iteration: one launch instead
// of a few hundred small kernels. The tasks of each iteration are copied into a static input
// before the replay. Adam's update stays outside the graph: its bias correction depends on the
// step count, a host value that a graph would freeze at capture. The first iteration runs
// eagerly (a warm-up: cuBLAS and the allocator's pool are set up before capture); the tasks and
// the arithmetic are those of the eager loop.
TrainResult train_maml_cuda_graph(const Config& cfg, const maml::Net& net, examples::Metrics& metrics) {
  maml::SineTaskSampler sampler(cfg.seed * 2);
  const Params params = net.named_parameters();
  gg::optim::Adam adam(net.parameters(), {kMetaLr});
  maml::ProgressBar bar("maml", cfg.iterations);
  const int log_every = examples::log_every(cfg.iterations);
  // Static input: support x, support y, query x, query y of the tasks, (4, meta-batch, 10, 1).
  const int64_t T = cfg.meta_batch;
  gg::Tensor batch = gg::zeros({4, T, kShotsTrain, 1}, gg::DType::f32, cfg.device);
  auto part = [&](int64_t i) { return gg::reshape(gg::slice(batch, 0, i, i + 1), {T, kShotsTrain, 1}); };
  const Points support{part(0), part(1)}, query{part(2), part(3)};
  auto next_tasks = [&] {  // sampled on the host in the eager loop's order, one copy to the GPU
    const maml::SineTasks tasks = sampler.tasks(T);
    const Points s = sampler.points(tasks, kShotsTrain, gg::DType::f32, gg::Device::cpu());
    const Points q = sampler.points(tasks, kShotsTrain, gg::DType::f32, gg::Device::cpu());
    gg::copy_(batch, gg::stack({s.x, s.y, q.x, q.y}, 0).to(cfg.device));
  };
  auto loss_and_grads = [&] {  // {meta-loss, ∂/∂θ for each parameter}
    gg::TensorList out{maml::meta_loss(net, params, support, query, kInnerLr, cfg.mode())};
    const gg::TensorList g = gg::grad({out[0]}, adam.params());
    out.insert(out.end(), g.begin(), g.end());
    return out;
  };
  gg::cuda::Graph graph;
  double last_loss = NAN;
  const auto start = std::chrono::steady_clock::now();
  for (int it = 1; it <= cfg.iterations; ++it) {
    next_tasks();
    gg::TensorList out;
    if (it == 1) {
      out = loss_and_grads();  // eager warm-up
    } else {
      if (!graph.captured()) graph.capture(loss_and_grads);
      graph.replay();
      out = graph.outputs();
    }
    adam.step(gg::TensorList(out.begin() + 1, out.end()));
    if (it % log_every == 0 || it == cfg.iterations) {
      last_loss = out[0].item();
      metrics.train("maml", it, last_loss, seconds_since(start));
    }
    bar.update(it, last_loss);
  }
  bar.finish();
  return {seconds_since(start), true};
}

// Meta-training (maml = true) or joint regression on all tasks (the pretrained baseline).
//
// --world-size N runs N data-parallel ranks (gg::dist::run_threads): every rank draws the same
// global meta-batch (the same seed), keeps its share of the tasks, scales its loss by that
// share, and the gradients are summed over ranks in one all_reduce per step; each rank's Adam
// then makes the same update, so the parameters stay identical. Rank 0 trains `net` itself.
// With --nccl this process is one rank (cfg.process_group) and trains its own `net`.
TrainResult train(const Config& cfg, const maml::Net& net, bool maml_objective, examples::Metrics& metrics) {
  if (maml_objective && cfg.cuda_graph) return train_maml_cuda_graph(cfg, net, metrics);
  const char* phase = maml_objective ? "maml" : "pretrain";
  const int P = cfg.world_size;
  gg::dist::Group* const process_group = cfg.process_group.get();
  std::vector<Params> rank_params{net.named_parameters()};
  for (int r = 1; r < P && !process_group; ++r) {  // the other thread ranks start from copies
    Params copy;
    for (const auto& [name, t] : rank_params[0]) copy.emplace_back(name, gg::clone(t.detach()).requires_grad_());
    rank_params.push_back(copy);
  }
  maml::ProgressBar bar(phase, cfg.iterations);
  const int log_every = examples::log_every(cfg.iterations);
  const auto start = std::chrono::steady_clock::now();
  TrainResult result;
  auto rank_loop = [&](gg::dist::Group* group) {
    const int r = group ? group->rank() : 0;
    const bool logs = r == 0 || process_group;  // with --nccl every process writes its own output
    maml::SineTaskSampler sampler(cfg.seed * 2 + (maml_objective ? 0 : 1));
    const Params& params = rank_params[process_group ? 0 : static_cast<size_t>(r)];
    gg::optim::Adam adam(gg::nn::values(params), {kMetaLr});
    const int64_t T = cfg.meta_batch, t0 = T * r / P, t1 = T * (r + 1) / P;  // this rank's tasks
    double last_loss = NAN;
    for (int it = 1; it <= cfg.iterations; ++it) {
      const maml::SineTasks tasks = sampler.tasks(T);
      Points support = sampler.points(tasks, kShotsTrain, gg::DType::f32, cfg.device);  // (T, 10, 1)
      Points query = sampler.points(tasks, kShotsTrain, gg::DType::f32, cfg.device);    // (T, 10, 1)
      if (P > 1) {
        support = {gg::slice(support.x, 0, t0, t1), gg::slice(support.y, 0, t0, t1)};
        query = {gg::slice(query.x, 0, t0, t1), gg::slice(query.y, 0, t0, t1)};
      }
      gg::Tensor loss;
      if (maml_objective) {
        loss = maml::meta_loss(net, params, support, query, kInnerLr, cfg.mode());
      } else {  // ordinary regression on the same points, one model for all tasks
        const Points all = maml::concat_points(support, query);
        loss = gg::mse_loss(net(params, all.x), all.y);
      }
      if (P > 1) loss = loss * (static_cast<double>(t1 - t0) / T);  // this rank's share of the mean
      // across ranks: the sum of the shares' gradients, each bucket's all-reduce started as soon
      // as the backward has completed it
      const gg::TensorList grads = group ? gg::dist::grad_all_reduce(*group, {loss}, adam.params(), {}, {}, false)
                                         : gg::grad({loss}, adam.params());
      adam.step(grads);
      if (it % log_every == 0 || it == cfg.iterations) {
        last_loss = group ? group->all_reduce(loss.detach()).item() : loss.item();
        if (logs) metrics.train(phase, it, last_loss, seconds_since(start));
      }
      if (logs) bar.update(it, last_loss);
    }
  };
  if (process_group) {
    rank_loop(process_group);
    // Every rank made the same updates: check against rank 0's parameters.
    for (const auto& [name, t] : rank_params[0])
      if (max_abs_diff(process_group->broadcast(t.detach(), 0), t) != 0.0) {
        std::fprintf(stderr, "error: rank %d's %s differs from rank 0's\n", process_group->rank(), name.c_str());
        result.ranks_agree = false;
      }
  } else if (P == 1) {
    rank_loop(nullptr);
  } else {
    gg::dist::run_threads(P, [&](gg::dist::Group& g) { rank_loop(&g); });
    // Every rank made the same updates: check that the copies did not drift apart.
    for (int r = 1; r < P; ++r)
      for (size_t i = 0; i < rank_params[0].size(); ++i)
        if (max_abs_diff(rank_params[0][i].second, rank_params[static_cast<size_t>(r)][i].second) != 0.0) {
          std::fprintf(stderr, "error: rank %d's %s differs from rank 0's\n", r, rank_params[0][i].first.c_str());
          result.ranks_agree = false;
        }
  }
  bar.finish();
  result.seconds = seconds_since(start);
  return result;
}

// ------------------------------------------------------------------------- evaluation
struct EvalSet {
  maml::SineTasks tasks;
  Points support;  // (T, 20, 1): the first K of them are the K-shot support set
  Points query;    // (T, 100, 1)
};

EvalSet make_eval_set(int64_t count, gg::Device device) {
  maml::SineTaskSampler sampler(kEvalSeed);
  EvalSet e;
  e.tasks = sampler.tasks(count);
  e.support = sampler.points(e.tasks, kEvalShots.back(), gg::DType::f32, device);
  e.query = sampler.points(e.tasks, kEvalQuery, gg::DType::f32, device);
  return e;
}

// table[k]: query MSE over tasks with K = kEvalShots[k] after each of kEvalSteps, and the tasks
// on which SGD diverged (report.h).
using maml::EvalTable;

EvalTable evaluate(const maml::Net& net, const EvalSet& eval) {
  const Params params = net.named_parameters();
  EvalTable table;
  for (int64_t K : kEvalShots) {
    const Points support = maml::first_points(eval.support, K);
    std::vector<std::vector<double>> query_mse;
    std::vector<double> support_first, support_last;
    maml::fine_tune(net, params, support, kInnerLr, kEvalSteps.back(), [&](int step, const Params& p) {
      if (std::find(kEvalSteps.begin(), kEvalSteps.end(), step) != kEvalSteps.end())
        query_mse.push_back(maml::per_task_mse(net, p, eval.query));
      if (step == 0) support_first = maml::per_task_mse(net, p, support);
      if (step == kEvalSteps.back()) support_last = maml::per_task_mse(net, p, support);
    });
    table.push_back(maml::summarize_fine_tuning(query_mse, support_first, support_last));
  }
  return table;
}

using maml::log_tables;
using maml::print_table;

// ------------------------------------------------------------------------- plot
// The paper's Figure 2: three test tasks, K = 5 support points; MAML before adaptation and
// after 1 and 10 steps, and the pretrained model after 10 steps.
std::string make_plot(const Config& cfg, const maml::Net& maml_net, const maml::Net& pretrained, const EvalSet& eval) {
  const int64_t kPanels = 3, kGrid = 200, K = 5;
  maml::SineTasks tasks;
  for (int64_t t = 0; t < kPanels; ++t) {
    tasks.amplitude.push_back(eval.tasks.amplitude[static_cast<size_t>(t)]);
    tasks.phase.push_back(eval.tasks.phase[static_cast<size_t>(t)]);
  }
  const Points support = maml::first_points({gg::slice(eval.support.x, 0, 0, kPanels),
                                             gg::slice(eval.support.y, 0, 0, kPanels)}, K);
  const Points grid = maml::SineTaskSampler::grid(tasks, kGrid, gg::DType::f32, cfg.device);

  std::vector<std::vector<double>> curves;  // each (kPanels·kGrid), panel-major
  auto predict = [&](const Params& p) {
    gg::NoGradGuard no_grad;
    curves.push_back(maml_net(p, grid.x).to_vector<double>());
  };
  maml::fine_tune(maml_net, maml_net.named_parameters(), support, kInnerLr, 10, [&](int step, const Params& p) {
    if (step == 0 || step == 1 || step == 10) predict(p);
  });
  maml::fine_tune(pretrained, pretrained.named_parameters(), support, kInnerLr, 10, [&](int step, const Params& p) {
    if (step == 10) predict(p);
  });

  const std::vector<double> gx = grid.x.to_vector<double>(), gy = grid.y.to_vector<double>();
  const std::vector<double> sx = support.x.to_vector<double>(), sy = support.y.to_vector<double>();
  std::vector<maml::PlotPanel> panels(kPanels);
  for (int64_t t = 0; t < kPanels; ++t) {
    maml::PlotPanel& p = panels[static_cast<size_t>(t)];
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
  maml::write_plot_files(cfg.out_dir, title,
                         {"MAML, before adaptation", "MAML, 1 grad step", "MAML, 10 grad steps",
                          "pretrained, 10 grad steps"},
                         panels);
  return maml::run_gnuplot(cfg.out_dir);
}

// ------------------------------------------------------------------------- main
int run(const Config& cfg) {
  const auto program_start = std::chrono::steady_clock::now();
  std::printf("MAML sinusoid regression (Finn et al. 2017, §5.1) with gradgrad\n");
  std::printf("  device %s, seed %llu, %d meta-iterations%s, %s MAML%s\n", cfg.device.str().c_str(),
              static_cast<unsigned long long>(cfg.seed), cfg.iterations,
              cfg.full ? " (--full, the paper's schedule)" : "",
              cfg.first_order ? "first-order" : "second-order",
              cfg.cuda_graph ? ", meta-gradient replayed from a CUDA graph" : "");
  std::printf("  MLP 1-40-40-1 ReLU, MSE; meta-batch %lld tasks, K = %lld support + %lld query points, "
              "inner SGD α = %g, Adam %g\n",
              static_cast<long long>(cfg.meta_batch), static_cast<long long>(kShotsTrain),
              static_cast<long long>(kShotsTrain),
              kInnerLr, kMetaLr);
  if (cfg.process_group) {
    std::printf("  data parallel: rank %d of %d processes (NCCL), each with its share of every meta-batch\n",
                cfg.process_group->rank(), cfg.world_size);
  } else if (cfg.world_size > 1) {
    if (!cfg.device.is_cpu()) {
      std::fprintf(stderr, "error: --world-size runs its ranks as threads on the CPU; use --device cpu (or "
                           "--nccl under scripts/launch.sh for one process per GPU)\n");
      return 2;
    }
    std::printf("  data parallel: %d ranks (threads), each with its share of every meta-batch\n", cfg.world_size);
  }
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
  const auto maml_net = maml::make_net(gg::DType::f32, cfg.device);
  const auto pretrained = maml::make_net(gg::DType::f32, cfg.device);

  std::printf("\nmeta-training (MAML):\n");
  const TrainResult m = train(cfg, *maml_net, true, metrics);
  std::printf("  %d meta-iterations in %.1f s: %.3f ms per meta-iteration\n", cfg.iterations, m.seconds,
              1e3 * m.seconds / cfg.iterations);
  std::printf("pretraining (baseline: joint regression on all tasks, same iterations, Adam):\n");
  const TrainResult p = train(cfg, *pretrained, false, metrics);
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
  std::printf("  %-18s", "model");
  for (int s : kEvalSteps) std::printf("   %8d step%s", s, s == 1 ? " " : "s");
  std::printf("\n");
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

int main(int argc, char** argv) {
  std::setvbuf(stdout, nullptr, _IOLBF, 0);  // line-buffered even into a log file, to follow a long run
  CLI::App app{"MAML on sinusoid regression (Finn et al. 2017, section 5.1), with gradgrad"};
  Config cfg;
  cfg.device_name = gg::cuda::is_available() ? "cuda" : "cpu";
  app.add_option("--device", cfg.device_name, "cpu or cuda (default: cuda when available)")
      ->check(CLI::IsMember({"cpu", "cuda"}))
      ->capture_default_str();
  app.add_option("--seed", cfg.seed, "seed for initialisation and training tasks")->capture_default_str();
  auto* iters = app.add_option("--iterations", cfg.iterations, "meta-iterations (also used for the baseline)")
                    ->check(CLI::Range(1, 10000000))
                    ->capture_default_str();
  auto* full = app.add_flag("--full", cfg.full, "the paper's 70,000 meta-iterations");
  app.add_flag("--first-order", cfg.first_order, "first-order MAML: treat the inner gradient as a constant");
  auto* smoke = app.add_flag("--smoke", cfg.smoke, "a tiny run for testing: 50 iterations, 20 evaluation tasks");
  auto* world = app.add_option("--world-size", cfg.world_size,
                                "data-parallel ranks on the CPU (threads), each with its share of every meta-batch")
                    ->check(CLI::Range(1, 4096))
                    ->capture_default_str();
  app.add_option("--meta-batch", cfg.meta_batch, "tasks per meta-iteration, over all data-parallel ranks")
      ->check(CLI::Range(1, 1 << 16))
      ->capture_default_str();
  auto* graph = app.add_flag("--cuda-graph", cfg.cuda_graph,
                             "with --device cuda: capture the meta-gradient in a CUDA graph once and replay it each "
                             "iteration");
  graph->excludes(world);
  auto* nccl = app.add_flag("--nccl", cfg.nccl,
                            "with --device cuda, under scripts/launch.sh N: this process is one of N data-parallel "
                            "ranks over NCCL (RANK, WORLD_SIZE, LOCAL_RANK; rank r > 0 writes to OUT/rank<r>)");
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
  if (cfg.world_size > cfg.meta_batch) {
    std::fprintf(stderr, "error: --world-size (%d) must not exceed --meta-batch (%lld tasks)\n", cfg.world_size,
                 static_cast<long long>(cfg.meta_batch));
    return 2;
  }
  return examples::prepare_and_run(cfg.device_name, cfg.device, cfg.out_dir, [&] {
    if (cfg.nccl)
      cfg.process_group = examples::join_nccl(cfg.device, cfg.world_size, cfg.out_dir, cfg.meta_batch, "tasks");
    return run(cfg);
  });
}
