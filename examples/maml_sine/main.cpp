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
// Files: sine_tasks.h (the task family), maml.h (model on gg::nn, inner step, meta-loss), this
// file (the training loop, with gg::optim::Adam as the outer optimiser), experiment.h/.cpp
// (settings, command line, self-checks, evaluation, plot and report), report.h (evaluation table,
// plot files). The same loop, faster: cuda_graph.cpp (--cuda-graph) and data_parallel.cpp
// (--world-size, --nccl). See docs/examples.md.
#include <chrono>
#include <cmath>

#include "common/metrics.h"
#include "common/report.h"
#include "experiment.h"
#include "gradgrad.h"
#include "maml.h"
#include "sine_tasks.h"

namespace maml {
namespace {

// Meta-training (maml_objective) or joint regression on all tasks (the pretrained baseline).
// Every iteration draws a fresh meta-batch of tasks with K support and K query points each.
TrainResult train(const Config& cfg, const Net& net, bool maml_objective, examples::Metrics& metrics) {
  const char* phase = maml_objective ? "maml" : "pretrain";
  SineTaskSampler sampler(task_seed(cfg, maml_objective));
  const Params params = net.named_parameters();
  gg::optim::Adam adam(gg::nn::values(params), {kMetaLr});
  examples::ProgressBar bar(phase, cfg.iterations);
  const auto start = std::chrono::steady_clock::now();
  double last_loss = NAN;
  for (int it = 1; it <= cfg.iterations; ++it) {
    const SineTasks tasks = sampler.tasks(cfg.meta_batch);
    const Points support = sampler.points(tasks, kShotsTrain, gg::DType::f32, cfg.device);  // (T, 10, 1)
    const Points query = sampler.points(tasks, kShotsTrain, gg::DType::f32, cfg.device);    // (T, 10, 1)
    gg::Tensor loss;
    if (maml_objective) {
      loss = meta_loss(net, params, support, query, kInnerLr, cfg.mode());
    } else {  // ordinary regression on the same points, one model for all tasks
      const Points all = concat_points(support, query);
      loss = gg::mse_loss(net(params, all.x), all.y);
    }
    adam.step(gg::grad({loss}, adam.params()));
    if (examples::is_log_step(it, cfg.iterations)) {
      last_loss = loss.item();
      metrics.train(phase, it, last_loss, examples::seconds_since(start));
    }
    bar.update(it, last_loss);
  }
  bar.finish();
  return {examples::seconds_since(start)};
}

}  // namespace
}  // namespace maml

// The command line, the self-checks, both trainings (with `train` above), evaluation and report:
// experiment.cpp.
int main(int argc, char** argv) { return maml::run_program(argc, argv, maml::train); }
