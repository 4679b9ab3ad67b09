// maml_sine --cuda-graph: meta-training with the meta-gradient (forward, inner step with its
// backward, outer backward) captured once in a CUDA graph (core/cuda_graph.h) and replayed every
// iteration: one launch instead of a few hundred small kernels. The tasks of each iteration are
// copied into a static input before the replay. Adam's update stays outside the graph: its bias
// correction depends on the step count, a host value that a graph would freeze at capture. The
// first iteration runs eagerly (a warm-up: cuBLAS and the allocator's pool are set up before
// capture); the tasks and the arithmetic are those of main.cpp's loop.
#include <chrono>
#include <cmath>

#include "common/metrics.h"
#include "common/report.h"
#include "experiment.h"
#include "gradgrad.h"
#include "maml.h"
#include "sine_tasks.h"

namespace maml {

TrainResult train_maml_cuda_graph(const Config& cfg, const Net& net, examples::Metrics& metrics) {
  SineTaskSampler sampler(task_seed(cfg, true));
  const Params params = net.named_parameters();
  gg::optim::Adam adam(net.parameters(), {kMetaLr});
  examples::ProgressBar bar("maml", cfg.iterations);
  // Static input: support x, support y, query x, query y of the tasks, (4, meta-batch, 10, 1).
  const int64_t T = cfg.meta_batch;
  gg::Tensor batch = gg::zeros({4, T, kShotsTrain, 1}, gg::DType::f32, cfg.device);
  auto part = [&](int64_t i) { return gg::reshape(gg::slice(batch, 0, i, i + 1), {T, kShotsTrain, 1}); };
  const Points support{part(0), part(1)}, query{part(2), part(3)};
  auto next_tasks = [&] {  // sampled on the host in the eager loop's order, one copy to the GPU
    const SineTasks tasks = sampler.tasks(T);
    const Points s = sampler.points(tasks, kShotsTrain, gg::DType::f32, gg::Device::cpu());
    const Points q = sampler.points(tasks, kShotsTrain, gg::DType::f32, gg::Device::cpu());
    gg::copy_(batch, gg::stack({s.x, s.y, q.x, q.y}, 0).to(cfg.device));
  };
  auto loss_and_grads = [&] {  // {meta-loss, ∂/∂θ for each parameter}
    gg::TensorList out{meta_loss(net, params, support, query, kInnerLr, cfg.mode())};
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
    if (examples::is_log_step(it, cfg.iterations)) {
      last_loss = out[0].item();
      metrics.train("maml", it, last_loss, examples::seconds_since(start));
    }
    bar.update(it, last_loss);
  }
  bar.finish();
  return {examples::seconds_since(start), true};
}

}  // namespace maml
