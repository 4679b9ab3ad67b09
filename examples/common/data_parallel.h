// Data-parallel training in the examples (docs/distributed.md): every rank draws the same global
// batch, keeps its share, scales its loss by that share and sums the gradients over the ranks,
// so every rank's optimiser makes the same update. The ranks are threads of this process
// (--world-size N, gg::dist::run_threads) or processes, one per GPU (--nccl, common/run.h's
// join_nccl). What the examples share of it: the line that describes the split, running the
// ranks, and the final check that they did not drift apart.
#pragma once
#include <gradgrad.h>

#include <cstdio>
#include <string>
#include <vector>

namespace examples {

// Prints the run's data-parallel line ("  data parallel: 2 ranks (threads), each with its share
// of every batch"), nothing for one rank. Thread ranks run on the CPU only: on another device,
// prints the error and returns false.
inline bool describe_data_parallel(const gg::dist::Group* process_group, int world_size, const gg::Device& device,
                                   const char* batch) {
  if (process_group) {
    std::printf("  data parallel: rank %d of %d processes (NCCL), each with its share of every %s\n",
                process_group->rank(), world_size, batch);
  } else if (world_size > 1) {
    if (!device.is_cpu()) {
      std::fprintf(stderr, "error: --world-size runs its ranks as threads on the CPU; use --device cpu (or "
                           "--nccl under scripts/launch.sh for one process per GPU)\n");
      return false;
    }
    std::printf("  data parallel: %d ranks (threads), each with its share of every %s\n", world_size, batch);
  }
  return true;
}

// Runs `rank_loop(group)` as every rank: as this process's rank of `process_group` (--nccl);
// once with no group for a world of one; else as `world_size` threads of a ThreadGroup.
template <typename RankLoop>
void run_ranks(int world_size, gg::dist::Group* process_group, RankLoop&& rank_loop) {
  if (process_group)
    rank_loop(process_group);
  else if (world_size == 1)
    rank_loop(static_cast<gg::dist::Group*>(nullptr));
  else
    gg::dist::run_threads(world_size, [&](gg::dist::Group& g) { rank_loop(&g); });
}

// Whether every rank ended with rank 0's parameters, bit for bit (they all made the same
// updates). With `process_group`: this process's `rank_params[0]` against rank 0's (a
// broadcast); else the thread ranks' `rank_params[r]` against `rank_params[0]`. Prints each
// parameter that differs, by its name in `names`.
inline bool ranks_agree(gg::dist::Group* process_group, const std::vector<gg::TensorList>& rank_params,
                        const std::vector<std::string>& names) {
  auto same = [](const gg::Tensor& a, const gg::Tensor& b) { return gg::max(gg::abs(a - b)).item() == 0.0; };
  bool agree = true;
  auto differs = [&](int rank, size_t i) {
    std::fprintf(stderr, "error: rank %d's %s differs from rank 0's\n", rank, names[i].c_str());
    agree = false;
  };
  if (process_group) {
    const gg::TensorList& p = rank_params[0];
    for (size_t i = 0; i < p.size(); ++i)
      if (!same(process_group->broadcast(p[i].detach(), 0), p[i])) differs(process_group->rank(), i);
  } else {
    for (size_t r = 1; r < rank_params.size(); ++r)
      for (size_t i = 0; i < rank_params[0].size(); ++i)
        if (!same(rank_params[0][i], rank_params[r][i])) differs(static_cast<int>(r), i);
  }
  return agree;
}

}  // namespace examples
