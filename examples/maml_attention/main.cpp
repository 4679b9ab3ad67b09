// MAML through attention: second-order MAML (Finn, Abbeel & Levine 2017) on sinusoid tasks, with
// a small attention model, so the inner gradient step differentiates attention and the outer
// gradient runs through attention's backward-over-backward.
//
//   The model (model.h) reads a task's points as tokens [x, y, is_target] and predicts y at the
//   target tokens: context points carry their label, target points do not. Two pre-norm
//   attention blocks (4 heads, d_model 32) over all tokens of a sequence, then a linear readout.
//   Inner loss: two-fold cross-validation on the K support points (half the points as context,
//   predict the other half, and the other way round). Outer loss: all K support points as
//   context, predict the query points. One inner SGD step with create_graph, Adam on θ.
//   --attention fused|composite runs gg::attention or gg::attention_composite in the same model.
//
// Modes:
//   (default)          checks; MAML meta-training and two baselines trained as long on the same
//                      kind of episodes: 'in-context' (the query loss, no inner step) and 'joint'
//                      (the same with every label hidden: plain regression on all tasks); query
//                      MSE of MAML / in-context / joint / random initialisation after 0, 1, 5, 10
//                      SGD steps on 300 held-out tasks; training-curve plot
//   --check            only the checks: fused vs composite meta-gradient in f64 (≤ 1e-9), and
//                      the meta-gradient against finite differences
//   --long-context N   one meta-gradient at N support points per task (1 task): time and peak
//                      memory, fused, then composite (caught out-of-memory, or skipped above
//                      --max-composite-bytes)
//   --smoke            a few seconds of everything (the ctest)
//
// Files: episodes.h (tasks as token sequences), model.h (model on gg::nn, losses, inner step),
// this file (CLI, checks, long-context, training with gg::optim::Adam, evaluation, report).
// Reused from examples/maml_sine: sine_tasks.h (the task family), report.h (progress bar,
// mean ± 95% CI).
#include <unistd.h>

#include <CLI/CLI.hpp>
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <new>
#include <nlohmann/json.hpp>
#include <regex>
#include <string>
#include <vector>

#include "episodes.h"
#include "gradgrad.h"
#include "model.h"
#include "report.h"  // maml::ProgressBar, maml::mean_ci95, maml::shell_quote, the evaluation table
#include "common/cli.h"
#include "common/metrics.h"
#include "common/run.h"

namespace {

using mattn::AttentionOp;
using mattn::Episode;
using mattn::ModelShape;
using mattn::Params;
using mattn::Regressor;
using examples::seconds_since;
using nlohmann::json;

// ------------------------------------------------------------------------- settings
constexpr double kInnerLr = 0.01;  // α, training and test time (--inner-lr)
constexpr double kMetaLr = 1e-3;   // Adam, for MAML and the baselines
constexpr int64_t kMetaBatch = 16, kShots = 10, kQueries = 10;
constexpr int kDefaultIterations = 3000;  // a few minutes on a 2-core CPU
constexpr int kSmokeIterations = 30;
constexpr uint64_t kEvalSeed = 2017;  // held-out tasks, independent of --seed
constexpr int64_t kEvalTasks = 300, kSmokeEvalTasks = 8, kEvalQuery = 100;
using maml::kEvalShots;
using maml::kEvalSteps;
constexpr int64_t kLongQueries = 256;       // query points in --long-context mode
constexpr int64_t kSmokeLongContext = 256;  // --long-context N used by --smoke
constexpr double kCheckTolerance = 1e-9;    // fused vs composite meta-gradient, f64
// N×N buffers the composite's meta-gradient holds at its peak, per (block, head, sequence),
// measured with gg::cpu::memory_stats: 3.4, 3.6, 3.6 at N = 512, 1024, 2048 (f32, CPU).
constexpr double kCompositeNxNBuffers = 4.0;

struct Config {
  std::string device_name, attention_name = "fused";
  gg::Device device = gg::Device::cpu();
  AttentionOp op = AttentionOp::fused;
  uint64_t seed = 0;
  double inner_lr = kInnerLr;
  int iterations = kDefaultIterations;
  bool smoke = false, check_only = false;
  int64_t long_context = 0;            // 0: off
  int64_t max_composite_bytes = -1;    // -1: automatic (CPU: 40% of RAM; GPU: no cap); 0: no cap
  int64_t eval_tasks = kEvalTasks;
  std::string out_dir = "maml_attention_out";
};

std::string mib(double bytes) {
  char s[64];
  if (bytes >= 1024.0 * 1024 * 1024)
    std::snprintf(s, sizeof s, "%.2f GiB", bytes / (1024.0 * 1024 * 1024));
  else
    std::snprintf(s, sizeof s, "%.1f MiB", bytes / (1024.0 * 1024));
  return s;
}

// ------------------------------------------------------------------------- device helpers
gg::MemoryStats memory_stats(gg::Device d) {
  return d.is_cuda() ? gg::cuda::memory_stats(d.index) : gg::cpu::memory_stats();
}
void reset_peak_memory_stats(gg::Device d) {
  if (d.is_cuda())
    gg::cuda::reset_peak_memory_stats(d.index);
  else
    gg::cpu::reset_peak_memory_stats();
}
void synchronize(gg::Device d) {
  if (d.is_cuda()) gg::cuda::synchronize();
}

// Max |a − b| over all tensors, divided by max |b| over all tensors.
double relative_difference(const gg::TensorList& a, const gg::TensorList& b) {
  double num = 0.0, den = 1e-300;
  for (size_t i = 0; i < a.size(); ++i) {
    num = std::max(num, gg::max(gg::abs(a[i] - b[i])).item());
    den = std::max(den, gg::max(gg::abs(b[i])).item());
  }
  return num / den;
}

Params copy_params(const Params& p) {
  Params out;
  for (const auto& [n, w] : p) out.emplace_back(n, gg::clone(w.detach()).requires_grad_());
  return out;
}

// ------------------------------------------------------------------------- (a) checks
// In f64, on a small meta-batch: the meta-gradient (outer gradient with respect to every
// initial weight, through one inner step with create_graph) with the fused op must equal the
// one with the composite; and the composite's must match central finite differences of the
// meta-loss along a random direction.
struct CheckResult {
  double relative = 0.0;         // max |fused − composite| / max |composite|, all weights
  double worst_tensor = 0.0;     // the same, per tensor, worst one
  std::string worst_name;
  double fd_relative = 0.0;      // directional derivative vs finite differences
  bool ok = false;
};

CheckResult run_check(gg::Device device, examples::Metrics& metrics) {
  const gg::DType f64 = gg::DType::f64;
  const ModelShape m;
  maml::SineTaskSampler sampler(7);
  const Episode e = mattn::sample_episode(sampler, 3, kShots, kQueries, f64, device);
  gg::manual_seed(7);
  const Regressor fused_net(m, AttentionOp::fused, {f64, device}), composite_net(m, AttentionOp::composite, {f64, device});
  const Params theta = fused_net.named_parameters();  // both nets run on these tensors

  const auto t0 = std::chrono::steady_clock::now();
  const gg::TensorList fused = mattn::meta_gradient(fused_net, theta, e, kInnerLr);
  const double fused_s = seconds_since(t0);
  const auto t1 = std::chrono::steady_clock::now();
  const gg::TensorList composite = mattn::meta_gradient(composite_net, theta, e, kInnerLr);
  const double composite_s = seconds_since(t1);

  CheckResult r;
  r.relative = relative_difference(fused, composite);
  for (size_t i = 0; i < fused.size(); ++i) {
    const double rel = relative_difference({fused[i]}, {composite[i]});
    if (rel >= r.worst_tensor) {
      r.worst_tensor = rel;
      r.worst_name = theta[i].first;
    }
  }

  // Finite differences of the meta-loss along v (composite op; the loss itself needs only a
  // first-order inner step).
  gg::TensorList v;
  for (const auto& [n, w] : theta) v.push_back(gg::randn_like(w));
  double directional = 0.0;
  for (size_t i = 0; i < composite.size(); ++i) directional += gg::sum(composite[i] * v[i]).item();
  auto loss_at = [&](double h) {
    gg::TensorList shifted;
    for (size_t i = 0; i < theta.size(); ++i) shifted.push_back((theta[i].second.detach() + v[i] * h).requires_grad_());
    return mattn::meta_loss(composite_net, gg::nn::with_values(theta, shifted), e, kInnerLr, /*second_order=*/false)
        .item();
  };
  // Five-point central differences (error O(h⁴)): the meta-loss is strongly curved along a
  // random direction through all weights, so the three-point formula would need a tiny h.
  const double h = 1e-5;
  const double fd = (8.0 * (loss_at(h) - loss_at(-h)) - (loss_at(2 * h) - loss_at(-2 * h))) / (12 * h);
  r.fd_relative = std::abs(directional - fd) / std::max(std::abs(fd), 1e-12);
  r.ok = r.relative <= kCheckTolerance && r.fd_relative < 1e-6;

  std::printf("  [%s] meta-gradient, fused vs composite (f64, 3 tasks, K = %lld, %zu weight tensors):\n",
              device.str().c_str(), static_cast<long long>(kShots), fused.size());
  std::printf("    max |fused - composite| / max |composite| = %.2e (tolerance %.0e), worst tensor %s: %.2e  %s\n",
              r.relative, kCheckTolerance, r.worst_name.c_str(), r.worst_tensor, r.relative <= kCheckTolerance ? "ok" : "FAILED");
  std::printf("    along a random direction: finite differences %.10f, meta-gradient %.10f (rel. error %.1e)  %s\n", fd,
              directional, r.fd_relative, r.fd_relative < 1e-6 ? "ok" : "FAILED");
  std::printf("    time: fused %.3f s, composite %.3f s\n", fused_s, composite_s);
  metrics.write({{"phase", "check"},           {"device", device.str()},     {"relative_error", r.relative},
                 {"worst_tensor", r.worst_name}, {"worst_tensor_relative_error", r.worst_tensor},
                 {"fd_relative_error", r.fd_relative}, {"fd", fd}, {"meta_gradient_along_v", directional},
                 {"ok", r.ok}});
  return r;
}

// ------------------------------------------------------------------------- (b) long context
struct LongRun {
  std::string status = "ok";  // ok | out of memory | error | skipped
  double seconds = 0.0;
  int64_t peak_bytes = 0;     // peak tensor bytes above what was held before the run
  int64_t tried_bytes = -1;   // the allocation that failed (out of memory)
  std::string message;
  gg::TensorList grads;
};

// Bytes of the N×N buffers the composite's meta-gradient holds at its peak: per block and head,
// the two support sequences (N tokens each) and the query sequence (N + Q tokens).
double estimate_composite_bytes(const ModelShape& m, int64_t N, int64_t Q, gg::DType dtype) {
  const double n = static_cast<double>(N), nq = static_cast<double>(N + Q);
  return kCompositeNxNBuffers * static_cast<double>(m.blocks * m.heads) * static_cast<double>(gg::dtype_size(dtype)) *
         (2.0 * n * n + nq * nq);
}

LongRun timed_meta_gradient(const Regressor& net, const Params& theta, const Episode& e, gg::Device device) {
  LongRun r;
  synchronize(device);
  const int64_t before = memory_stats(device).current_bytes;
  reset_peak_memory_stats(device);
  const auto start = std::chrono::steady_clock::now();
  try {
    r.grads = mattn::meta_gradient(net, theta, e, kInnerLr);
    synchronize(device);
  } catch (const gg::DeviceError& err) {  // the CUDA allocator's out-of-memory (or cuBLAS's)
    r.message = err.what();
    const bool oom = r.message.find("out of memory") != std::string::npos ||
                     r.message.find("ALLOC_FAILED") != std::string::npos;
    r.status = oom ? "out of memory" : "error";
    std::smatch match;
    if (std::regex_search(r.message, match, std::regex("tried to allocate ([0-9]+) bytes")))
      r.tried_bytes = std::stoll(match[1].str());
  } catch (const std::bad_alloc&) {  // the host allocator's
    r.status = "out of memory";
    r.message = "std::bad_alloc (host memory)";
  }
  r.seconds = seconds_since(start);
  synchronize(device);
  r.peak_bytes = memory_stats(device).peak_bytes - before;
  return r;
}

int64_t auto_composite_cap(gg::Device device) {
  if (device.is_cuda()) return 0;  // try it, and catch the allocator's out-of-memory
  const double ram = static_cast<double>(sysconf(_SC_PHYS_PAGES)) * static_cast<double>(sysconf(_SC_PAGE_SIZE));
  return static_cast<int64_t>(0.4 * ram);
}

int run_long_context(const Config& cfg, examples::Metrics& metrics) {
  const ModelShape m;
  const int64_t N = cfg.long_context, Q = kLongQueries;
  const gg::DType dtype = gg::DType::f32;
  std::printf("\nlong context: one meta-gradient (one inner SGD step with create_graph, outer loss, gradient with\n"
              "respect to all %zu initial weights) for ONE task with N = %lld support points and %lld query points\n"
              "  sequences: support loss 2 x %lld tokens, query loss %lld tokens; d_model %lld, %lld heads of %lld, "
              "%lld blocks, f32, %s\n",
              Regressor(m, AttentionOp::fused).named_parameters().size(), static_cast<long long>(N), static_cast<long long>(Q),
              static_cast<long long>(N), static_cast<long long>(N + Q), static_cast<long long>(m.d_model),
              static_cast<long long>(m.heads), static_cast<long long>(m.head_dim()), static_cast<long long>(m.blocks),
              cfg.device.str().c_str());

  gg::manual_seed(cfg.seed);
  const Regressor fused_net(m, AttentionOp::fused, {dtype, cfg.device});
  const Regressor composite_net(m, AttentionOp::composite, {dtype, cfg.device});
  const Params theta = fused_net.named_parameters();
  maml::SineTaskSampler sampler(cfg.seed + 11);
  {  // warm-up at a small size (library and device start-up), both ops
    const Episode small = mattn::sample_episode(sampler, 1, 64, 16, dtype, cfg.device);
    mattn::meta_gradient(fused_net, theta, small, kInnerLr);
    mattn::meta_gradient(composite_net, theta, small, kInnerLr);
    synchronize(cfg.device);
  }
  const Episode e = mattn::sample_episode(sampler, 1, N, Q, dtype, cfg.device);

  auto log = [&](const char* op, const LongRun& r, double estimate) {
    json j{{"phase", "long_context"}, {"attention", op},         {"N", N},
           {"queries", Q},            {"device", cfg.device.str()}, {"status", r.status},
           {"seconds", r.seconds},    {"peak_bytes", r.peak_bytes}};
    if (estimate > 0) j["estimated_nxn_bytes"] = estimate;
    if (r.tried_bytes >= 0) j["tried_bytes"] = r.tried_bytes;
    if (!r.message.empty()) j["message"] = r.message;
    metrics.write(j);
  };

  const LongRun fused = timed_meta_gradient(fused_net, theta, e, cfg.device);
  log("fused", fused, 0);
  if (fused.status != "ok") {
    std::printf("  fused:     %s: %s\n", fused.status.c_str(), fused.message.c_str());
    return 1;
  }
  std::printf("  fused:     %8.2f s   peak tensor memory %s (%.0f bytes per support point)\n", fused.seconds,
              mib(static_cast<double>(fused.peak_bytes)).c_str(), static_cast<double>(fused.peak_bytes) / N);

  const double estimate = estimate_composite_bytes(m, N, Q, dtype);
  const int64_t cap = cfg.max_composite_bytes >= 0 ? cfg.max_composite_bytes : auto_composite_cap(cfg.device);
  LongRun comp;
  if (cap > 0 && estimate > static_cast<double>(cap)) {
    comp.status = "skipped";
    char why[256];
    std::snprintf(why, sizeof why,
                  "estimated %s of N x N buffers (%.0f per block, head and sequence) exceeds --max-composite-bytes %s",
                  mib(estimate).c_str(), kCompositeNxNBuffers, mib(static_cast<double>(cap)).c_str());
    comp.message = why;
    std::printf("  composite: skipped: %s\n", comp.message.c_str());
    log("composite", comp, estimate);
    return 0;
  }
  comp = timed_meta_gradient(composite_net, theta, e, cfg.device);
  log("composite", comp, estimate);
  if (comp.status == "error") {
    std::printf("  composite: failed after %.2f s: %s\n", comp.seconds, comp.message.c_str());
    return 1;
  }
  if (comp.status == "out of memory") {
    std::printf("  composite: out of memory after %.2f s: tried to allocate %s bytes (%s); peak before failing %s\n",
                comp.seconds, comp.tried_bytes >= 0 ? std::to_string(comp.tried_bytes).c_str() : "?",
                comp.tried_bytes >= 0 ? mib(static_cast<double>(comp.tried_bytes)).c_str() : "unknown size",
                mib(static_cast<double>(comp.peak_bytes)).c_str());
    std::printf("             (%s)\n", comp.message.c_str());
    return 0;
  }
  const double rel = relative_difference(fused.grads, comp.grads);
  std::printf("  composite: %8.2f s   peak tensor memory %s (estimate of its N x N buffers: %s)\n", comp.seconds,
              mib(static_cast<double>(comp.peak_bytes)).c_str(), mib(estimate).c_str());
  std::printf("  composite / fused: peak memory %.1fx, time %.2fx; meta-gradients agree to %.1e (max |diff| / max, f32)\n",
              static_cast<double>(comp.peak_bytes) / std::max<double>(1.0, fused.peak_bytes), comp.seconds / fused.seconds,
              rel);
  metrics.write({{"phase", "long_context_compare"}, {"N", N}, {"memory_ratio",
                 static_cast<double>(comp.peak_bytes) / std::max<double>(1.0, fused.peak_bytes)},
                 {"time_ratio", comp.seconds / fused.seconds}, {"relative_difference", rel}});
  return rel < 1e-3 ? 0 : 1;
}

// ------------------------------------------------------------------------- (c) training
// Three ways to train the same model on the same kind of episodes.
enum class Objective {
  maml,        // the query loss after one inner SGD step on the support loss (second order)
  in_context,  // the query loss directly (support points as context, no inner step)
  joint,       // the query loss with every label hidden: ordinary regression on all tasks jointly
};
const char* name(Objective o) {
  return o == Objective::maml ? "maml" : o == Objective::in_context ? "in_context" : "joint";
}
bool labels_visible(Objective o) { return o != Objective::joint; }

// A non-finite loss ends the run from Metrics::train (common/metrics.h).
struct TrainResult {
  double seconds = 0.0;
  std::vector<std::pair<int, double>> curve;  // (iteration, loss) at every logged iteration
};

TrainResult train(const Config& cfg, const Regressor& net, const Params& params, Objective objective,
                  examples::Metrics& metrics) {
  const char* phase = name(objective);
  maml::SineTaskSampler sampler(cfg.seed * 3 + static_cast<uint64_t>(objective));
  gg::optim::Adam adam(gg::nn::values(params), {kMetaLr});
  maml::ProgressBar bar(phase, cfg.iterations);
  TrainResult r;
  double last = NAN;
  const auto start = std::chrono::steady_clock::now();
  for (int it = 1; it <= cfg.iterations; ++it) {
    const Episode e = mattn::sample_episode(sampler, kMetaBatch, kShots, kQueries, gg::DType::f32, cfg.device,
                                            labels_visible(objective));
    const gg::Tensor loss = objective == Objective::maml ? mattn::meta_loss(net, params, e, cfg.inner_lr)
                                                         : mattn::mean_task_loss(net, params, e.query);
    adam.step(gg::grad({loss}, adam.params()));
    if (examples::is_log_step(it, cfg.iterations)) {
      last = loss.item();
      r.curve.emplace_back(it, last);
      metrics.train(phase, it, last, seconds_since(start));
    }
    bar.update(it, last);
  }
  bar.finish();
  r.seconds = seconds_since(start);
  return r;
}

// ------------------------------------------------------------------------- evaluation
struct EvalSet {
  mattn::HostPoints support;  // (T, 20): the first K are the K-shot support set
  mattn::HostPoints query;    // (T, 100)
};

EvalSet make_eval_set(int64_t count) {
  maml::SineTaskSampler sampler(kEvalSeed);
  const maml::SineTasks tasks = sampler.tasks(count);
  EvalSet e;
  e.support = mattn::sample_points(sampler, tasks, kEvalShots.back());
  e.query = mattn::sample_points(sampler, tasks, kEvalQuery);
  return e;
}

// table[k]: query MSE over tasks with K = kEvalShots[k] after each of kEvalSteps SGD steps, and the
// tasks on which SGD diverged (maml_sine/report.h). The 100 query points go in sequences of
// kQueries targets, as in training.
using maml::EvalTable;

EvalTable evaluate(const Config& cfg, const Regressor& net, const Params& params, const EvalSet& eval,
                   bool labels_visible) {
  EvalTable table;
  for (int64_t K : kEvalShots) {
    const mattn::HostPoints support = mattn::first_points(eval.support, K);
    const Episode e = mattn::make_episode(support, eval.query, kQueries, gg::DType::f32, cfg.device, labels_visible);
    std::vector<std::vector<double>> query_mse;
    std::vector<double> support_first, support_last;
    mattn::fine_tune(net, params, e.support, cfg.inner_lr, kEvalSteps.back(), [&](int step, const Params& p) {
      if (std::find(kEvalSteps.begin(), kEvalSteps.end(), step) != kEvalSteps.end())
        query_mse.push_back(mattn::per_task_mse(net, p, e.query));
      if (step == 0) support_first = mattn::per_task_mse(net, p, e.support);
      if (step == kEvalSteps.back()) support_last = mattn::per_task_mse(net, p, e.support);
    });
    table.push_back(maml::summarize_fine_tuning(query_mse, support_first, support_last));
  }
  return table;
}

using maml::log_tables;
using maml::print_table;

// ------------------------------------------------------------------------- plot
// The training curves: MAML's query MSE after one inner step and the baselines' query MSE (no
// inner step), on the training batches, each also as a moving average over 20 logged points.
struct Curve {
  const TrainResult* run;
  const char* title;
  const char* light;  // colour of the raw curve
  const char* dark;   // colour of the moving average
};

std::string make_plot(const Config& cfg, const std::vector<Curve>& curves) {
  const int every = examples::log_every(cfg.iterations);
  const size_t w = std::max<size_t>(1, std::min<size_t>(20, curves[0].run->curve.size() / 5));  // moving average
  {
    std::ofstream dat(cfg.out_dir + "/training_curve.dat");
    if (!dat) throw std::runtime_error("cannot write " + cfg.out_dir + "/training_curve.dat");
    for (const Curve& c : curves) {
      dat << "# " << c.title << "\n# iteration loss moving_average\n";
      double window = 0.0;
      const auto& pts = c.run->curve;
      for (size_t i = 0; i < pts.size(); ++i) {
        window += pts[i].second;
        if (i >= w) window -= pts[i - w].second;
        dat << pts[i].first << " " << pts[i].second << " " << window / static_cast<double>(std::min(i + 1, w)) << "\n";
      }
      dat << "\n\n";  // two blank lines end a gnuplot data block
    }
  }  // closed, so flushed, before gnuplot reads it
  {
    std::ofstream gp(cfg.out_dir + "/maml_attention.gp");
    if (!gp) throw std::runtime_error("cannot write " + cfg.out_dir + "/maml_attention.gp");
    gp << "set terminal pngcairo size 1000,600 font 'Sans,11'\n"
       << "set output 'maml_attention.png'\n"
       << "set title \"MAML through " << mattn::name(cfg.op) << " attention (2 blocks, 4 heads, d_model 32) on "
       << "sinusoid tasks: K = " << kShots << ", meta-batch " << kMetaBatch << ", seed " << cfg.seed << "\" noenhanced\n"
       << "set xrange [0:*]\nset xlabel 'iteration'\nset ylabel 'query MSE on the training batches'\nset logscale y\nset grid\n"
       << "set key top right noenhanced\n"
       << "plot ";
    // Points as well as lines: a short (--smoke) run has few logged iterations.
    const char* style = curves[0].run->curve.size() < 100 ? "linespoints pt 7 ps 0.6" : "lines";
    for (size_t i = 0; i < curves.size(); ++i)
      gp << (i == 0 ? "'training_curve.dat'" : "     ''") << " index " << i << " using 1:2 with " << style
         << " lc rgb '" << curves[i].light << "' notitle, \\\n"
         << "     '' index " << i << " using 1:3 with lines lc rgb '" << curves[i].dark << "' lw 2 title '"
         << curves[i].title << " (average of " << w * static_cast<size_t>(every) << " it.)'"
         << (i + 1 < curves.size() ? ", \\\n" : "\n");
  }
  if (std::system("command -v gnuplot > /dev/null 2>&1") != 0)
    return "gnuplot not found on PATH: skipped the PNG (data and script are in " + cfg.out_dir + ")";
  const std::string cmd = "cd " + maml::shell_quote(cfg.out_dir) + " && gnuplot maml_attention.gp";
  if (std::system(cmd.c_str()) != 0) return "gnuplot failed on " + cfg.out_dir + "/maml_attention.gp: no PNG";
  return "plot: " + cfg.out_dir + "/maml_attention.png";
}

// ------------------------------------------------------------------------- main
int run_training(const Config& cfg, examples::Metrics& metrics) {
  const ModelShape m;
  std::printf("\ntraining: %d iterations each, meta-batch %lld tasks, K = %lld support + %lld query points, "
              "inner SGD α = %g, Adam %g, %s attention\n",
              cfg.iterations, static_cast<long long>(kMetaBatch), static_cast<long long>(kShots),
              static_cast<long long>(kQueries), cfg.inner_lr, kMetaLr, mattn::name(cfg.op));
  gg::manual_seed(cfg.seed);
  const Regressor net(m, cfg.op, {gg::DType::f32, cfg.device});
  const Params init = net.named_parameters();  // every model starts here
  Params maml_params = copy_params(init), in_context = copy_params(init), joint = copy_params(init);

  struct Phase {
    Params* params;
    Objective objective;
    const char* what;
  };
  const Phase phases[] = {
      {&maml_params, Objective::maml, "meta-training (second-order MAML)"},
      {&in_context, Objective::in_context,
       "baseline 'in-context': the query loss with the support points as context, no inner step"},
      {&joint, Objective::joint, "baseline 'joint': the query loss with every label hidden (joint regression)"}};
  std::vector<TrainResult> runs;
  for (const Phase& ph : phases) {
    std::printf("%s:\n", ph.what);
    runs.push_back(train(cfg, net, *ph.params, ph.objective, metrics));
    std::printf("  %d iterations in %.1f s: %.1f ms per iteration\n", cfg.iterations, runs.back().seconds,
                1e3 * runs.back().seconds / cfg.iterations);
  }

  const EvalSet eval = make_eval_set(cfg.eval_tasks);
  const auto eval_start = std::chrono::steady_clock::now();
  const std::vector<std::pair<const char*, EvalTable>> tables = {
      {"MAML", evaluate(cfg, net, maml_params, eval, true)},
      {"in-context", evaluate(cfg, net, in_context, eval, true)},
      {"joint", evaluate(cfg, net, joint, eval, false)},
      {"random init", evaluate(cfg, net, init, eval, true)}};
  const double eval_s = seconds_since(eval_start);

  std::printf("\nresults: query MSE (mean ± 95%% CI) on %lld held-out tasks (seed %llu), %lld query points each\n"
              "(in sequences of the K support points as context + %lld query points as targets), after SGD steps\n"
              "(α = %g) on the support loss; 'joint' sees no labels (evaluated in %.1f s)\n\n",
              static_cast<long long>(cfg.eval_tasks), static_cast<unsigned long long>(kEvalSeed),
              static_cast<long long>(kEvalQuery), static_cast<long long>(kQueries), cfg.inner_lr, eval_s);
  maml::print_table_header();
  for (const auto& t : tables) print_table(t.first, t.second);
  log_tables(metrics, tables, "MAML");  // after printing: a non-finite cell ends the run here
  const std::string plot = make_plot(cfg, {{&runs[0], "MAML: after 1 inner SGD step", "#aec7e8", "#1f77b4"},
                                           {&runs[1], "in-context: no inner step", "#ffbb78", "#ff7f0e"},
                                           {&runs[2], "joint: no inner step, labels hidden", "#98df8a", "#2ca02c"}});
  std::printf("\n%s\n", plot.c_str());
  std::printf("time per meta-iteration: %.1f ms (%s, %s attention)\n", 1e3 * runs[0].seconds / cfg.iterations,
              cfg.device.str().c_str(), mattn::name(cfg.op));
  metrics.write({{"phase", "summary"}, {"eval_s", eval_s}});
  return 0;
}

int run(const Config& cfg) {
  std::printf("MAML through attention on sinusoid tasks, with gradgrad\n");
  std::printf("  device %s, seed %llu, output %s\n", cfg.device.str().c_str(),
              static_cast<unsigned long long>(cfg.seed), cfg.out_dir.c_str());
  const ModelShape shape;
  examples::Metrics metrics(
      cfg.out_dir, "maml_attention",
      {{"device", cfg.device.str()}, {"seed", cfg.seed}, {"iterations", cfg.iterations}, {"smoke", cfg.smoke},
       {"attention", mattn::name(cfg.op)}, {"inner_lr", cfg.inner_lr}, {"outer_optimizer", "Adam"}, {"lr", kMetaLr},
       {"meta_batch", kMetaBatch}, {"shots", kShots}, {"queries", kQueries}, {"eval_tasks", cfg.eval_tasks},
       {"long_context", cfg.long_context}, {"check_only", cfg.check_only},
       {"model", {{"d_model", shape.d_model}, {"heads", shape.heads}, {"mlp", shape.mlp}, {"blocks", shape.blocks}}}});

  std::printf("\ncheck (f64):\n");
  bool ok = run_check(gg::Device::cpu(), metrics).ok;
  if (cfg.device.is_cuda()) ok = run_check(cfg.device, metrics).ok && ok;
  if (cfg.check_only) return ok ? 0 : 1;

  int rc = 0;
  if (cfg.long_context > 0) {
    rc = run_long_context(cfg, metrics);
    if (!cfg.smoke) return ok ? rc : 1;
  }
  rc = std::max(rc, run_training(cfg, metrics));
  std::printf("metrics: %s/metrics.jsonl\n", cfg.out_dir.c_str());
  return ok ? rc : 1;
}

}  // namespace

int main(int argc, char** argv) {
  std::setvbuf(stdout, nullptr, _IOLBF, 0);  // line-buffered even into a log file
  CLI::App app{"MAML through attention: second-order MAML on sinusoid tasks with a 2-block attention model"};
  Config cfg;
  examples::add_device_option(app, cfg.device_name);
  app.add_option("--attention", cfg.attention_name, "attention op for training and evaluation")
      ->check(CLI::IsMember({"fused", "composite"}))
      ->capture_default_str();
  app.add_option("--inner-lr", cfg.inner_lr, "inner SGD step size α (training and evaluation)")
      ->check(CLI::PositiveNumber)
      ->capture_default_str();
  app.add_option("--seed", cfg.seed, "seed for initialisation and training tasks")->capture_default_str();
  auto* iters = app.add_option("--iterations", cfg.iterations, "meta-iterations (also used for the baselines)")
                    ->check(CLI::Range(1, 10000000))
                    ->capture_default_str();
  auto* check = app.add_flag("--check", cfg.check_only,
                             "only the checks: fused vs composite meta-gradient (f64), finite differences");
  auto* longc = app.add_option("--long-context", cfg.long_context,
                               "only one meta-gradient at N support points (1 task): time and peak memory, fused "
                               "then composite")
                    ->check(CLI::Range(int64_t{2}, int64_t{1} << 24));
  app.add_option("--max-composite-bytes", cfg.max_composite_bytes,
                 "skip the composite in --long-context when its N x N buffers are estimated above this "
                 "(e.g. 8GiB; 0: no cap; default: 40% of RAM on the CPU, no cap on the GPU)")
      ->transform(CLI::AsSizeValue(false));
  auto* smoke = app.add_flag("--smoke", cfg.smoke,
                             "a few seconds of everything (checks, 30 iterations, 8 evaluation tasks, long context "
                             "at N = 256): the ctest");
  app.add_option("--out", cfg.out_dir, "output directory (metrics.jsonl, plot)")->capture_default_str();
  check->excludes(longc);
  smoke->excludes(check);
  smoke->excludes(longc);
  CLI11_PARSE(app, argc, argv);

  cfg.op = cfg.attention_name == "fused" ? AttentionOp::fused : AttentionOp::composite;
  if (cfg.smoke) {
    if (iters->count() == 0) cfg.iterations = kSmokeIterations;
    cfg.eval_tasks = kSmokeEvalTasks;
    cfg.long_context = kSmokeLongContext;
  }
  return examples::prepare_and_run(cfg.device_name, cfg.device, cfg.out_dir, [&] { return run(cfg); });
}
