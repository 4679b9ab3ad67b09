// The maml_sine program around its training loop: the settings, the command line, and the run
// (experiment.cpp): self-checks, MAML meta-training and the pretrained baseline, evaluation on
// held-out tasks, the plot and the report. The eager training loop is main.cpp's; two variants of
// it, with the same tasks and the same arithmetic, have files of their own:
//   cuda_graph.cpp      --cuda-graph: the meta-gradient replayed from a CUDA graph
//   data_parallel.cpp   --world-size N (threads) or --nccl (processes): data-parallel ranks
#pragma once
#include <cstdint>
#include <memory>
#include <string>

#include "common/metrics.h"
#include "gradgrad.h"
#include "maml.h"

namespace maml {

// ------------------------------------------------------------------------- settings
constexpr double kInnerLr = 0.01;  // α, training and test time
constexpr double kMetaLr = 1e-3;   // Adam
constexpr int64_t kMetaBatch = 25, kShotsTrain = 10;  // the paper's meta-batch (--meta-batch)
constexpr int kFullIterations = 70000;     // the paper's schedule
constexpr int kDefaultIterations = 40000;  // 1-2 minutes on a 2-core CPU
constexpr int kSmokeIterations = 50;
constexpr uint64_t kEvalSeed = 2017;  // held-out tasks, independent of --seed
constexpr int64_t kEvalTasks = 600, kSmokeEvalTasks = 20, kEvalQuery = 100;

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
  InnerGrad mode() const { return first_order ? InnerGrad::first_order : InnerGrad::second_order; }
};

// The training seed of a phase: MAML and the baseline draw tasks from their own samplers.
inline uint64_t task_seed(const Config& cfg, bool maml_objective) { return cfg.seed * 2 + (maml_objective ? 0 : 1); }

// A non-finite loss ends the run from Metrics::train (common/metrics.h).
struct TrainResult {
  double seconds = 0.0;
  bool ranks_agree = true;  // every data-parallel rank ended with rank 0's parameters
};

// Meta-trains `net` (maml_objective) or trains it by joint regression on all tasks (the
// pretrained baseline), for cfg.iterations steps of cfg.meta_batch tasks, logging to `metrics`.
using Train = TrainResult (*)(const Config& cfg, const Net& net, bool maml_objective, examples::Metrics& metrics);

// The variants (cuda_graph.cpp, data_parallel.cpp); run_program calls them for their flags.
TrainResult train_maml_cuda_graph(const Config& cfg, const Net& net, examples::Metrics& metrics);
TrainResult train_data_parallel(const Config& cfg, const Net& net, bool maml_objective, examples::Metrics& metrics);

// The whole program: parses the command line, then runs the self-checks, trains MAML and the
// baseline with `train` (or a variant, for --cuda-graph, --world-size N or --nccl), evaluates
// both, plots and reports. Returns the exit code.
int run_program(int argc, char** argv, Train train);

}  // namespace maml
