// maml_sine --world-size N (N ranks as threads on the CPU) or --nccl (this process is one rank,
// one process per GPU, under scripts/launch.sh): main.cpp's training loop, data parallel
// (common/data_parallel.h, docs/distributed.md).
//
// Every rank draws the same global meta-batch (the same seed), keeps its share of the tasks,
// scales its loss by that share, and the gradients are summed over ranks in one all_reduce per
// step; each rank's Adam then makes the same update, so the parameters stay identical, which is
// checked at the end. Rank 0 trains `net` itself; with --nccl this process trains its own `net`.
#include <chrono>
#include <cmath>
#include <string>
#include <vector>

#include "common/data_parallel.h"
#include "common/metrics.h"
#include "common/report.h"
#include "experiment.h"
#include "gradgrad.h"
#include "maml.h"
#include "sine_tasks.h"

namespace maml {

TrainResult train_data_parallel(const Config& cfg, const Net& net, bool maml_objective, examples::Metrics& metrics) {
  const char* phase = maml_objective ? "maml" : "pretrain";
  const int P = cfg.world_size;
  gg::dist::Group* const process_group = cfg.process_group.get();
  std::vector<Params> rank_params{net.named_parameters()};
  for (int r = 1; r < P && !process_group; ++r) {  // the other thread ranks start from copies
    Params copy;
    for (const auto& [name, t] : rank_params[0]) copy.emplace_back(name, gg::clone(t.detach()).requires_grad_());
    rank_params.push_back(copy);
  }
  examples::ProgressBar bar(phase, cfg.iterations);
  const auto start = std::chrono::steady_clock::now();
  examples::run_ranks(P, process_group, [&](gg::dist::Group* group) {
    const int r = group ? group->rank() : 0;
    const bool logs = r == 0 || process_group;  // with --nccl every process writes its own output
    SineTaskSampler sampler(task_seed(cfg, maml_objective));
    const Params& params = rank_params[process_group ? 0 : static_cast<size_t>(r)];
    gg::optim::Adam adam(gg::nn::values(params), {kMetaLr});
    const int64_t T = cfg.meta_batch, t0 = T * r / P, t1 = T * (r + 1) / P;  // this rank's tasks
    double last_loss = NAN;
    for (int it = 1; it <= cfg.iterations; ++it) {
      const SineTasks tasks = sampler.tasks(T);
      Points support = sampler.points(tasks, kShotsTrain, gg::DType::f32, cfg.device);  // (T, 10, 1)
      Points query = sampler.points(tasks, kShotsTrain, gg::DType::f32, cfg.device);    // (T, 10, 1)
      if (P > 1) {
        support = {gg::slice(support.x, 0, t0, t1), gg::slice(support.y, 0, t0, t1)};
        query = {gg::slice(query.x, 0, t0, t1), gg::slice(query.y, 0, t0, t1)};
      }
      gg::Tensor loss;
      if (maml_objective) {
        loss = meta_loss(net, params, support, query, kInnerLr, cfg.mode());
      } else {  // ordinary regression on the same points, one model for all tasks
        const Points all = concat_points(support, query);
        loss = gg::mse_loss(net(params, all.x), all.y);
      }
      if (P > 1) loss = loss * (static_cast<double>(t1 - t0) / T);  // this rank's share of the mean
      // across ranks: the sum of the shares' gradients, each bucket's all-reduce started as soon
      // as the backward has completed it
      const gg::TensorList grads = group ? gg::dist::grad_all_reduce(*group, {loss}, adam.params(), {}, {}, false)
                                         : gg::grad({loss}, adam.params());
      adam.step(grads);
      if (examples::is_log_step(it, cfg.iterations)) {
        last_loss = group ? group->all_reduce(loss.detach()).item() : loss.item();
        if (logs) metrics.train(phase, it, last_loss, examples::seconds_since(start));
      }
      if (logs) bar.update(it, last_loss);
    }
  });
  std::vector<gg::TensorList> values;
  for (const Params& p : rank_params) values.push_back(gg::nn::values(p));
  std::vector<std::string> names;
  for (const auto& [name, t] : rank_params[0]) names.push_back(name);
  TrainResult result;
  result.ranks_agree = examples::ranks_agree(process_group, values, names);
  bar.finish();
  result.seconds = examples::seconds_since(start);
  return result;
}

}  // namespace maml
