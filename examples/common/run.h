// The common tail of the examples' main(): check the device, create the output folder, run,
// and turn any exception into a message and an exit code (never a crash).
#pragma once
#include <gradgrad.h>

#include <cstdio>
#include <exception>
#include <filesystem>
#include <memory>
#include <string>
#include <system_error>

#include "common/metrics.h"

namespace examples {

// Runs `run` (no arguments, returns the exit code) and turns an exception into a message on
// stderr and an exit code: 1 for a failed metric (common/metrics.h: non-finite, or rejected by
// the example), a failed result like any failed check; 2 for any other error.
template <typename Run>
int run_checked(Run&& run) {
  try {
    return run();
  } catch (const MetricFailure& e) {
    std::fprintf(stderr, "error: %s\n", e.what());
    return 1;
  } catch (const gg::Error& e) {
    std::fprintf(stderr, "gradgrad error: %s\n", e.what());
  } catch (const std::exception& e) {
    std::fprintf(stderr, "error: %s\n", e.what());
  }
  return 2;
}

// --nccl: this process is one rank of an NcclGroup, started by scripts/launch.sh (RANK,
// WORLD_SIZE, LOCAL_RANK, GG_DIST_INIT_FILE). Sets the device to the rank's GPU, world_size to
// the group's size, and the output folder of rank r > 0 to OUT/rank<r>; returns the group.
// `items` (e.g. "tasks") of which each step has `per_step` are split over the ranks: a
// ValueError when there are more ranks than items, or when `device` is not a GPU.
inline std::shared_ptr<gg::dist::Group> join_nccl(gg::Device& device, int& world_size, std::string& out_dir,
                                                  int64_t per_step, const char* items) {
  GG_CHECK(device.is_cuda(), gg::ValueError, "--nccl needs --device cuda (one process per GPU), got --device ",
           device.str());
  const std::shared_ptr<gg::dist::NcclGroup> group = gg::dist::NcclGroup::create();
  GG_CHECK(group->size() <= per_step, gg::ValueError, "--nccl: WORLD_SIZE (", group->size(),
           ") must not exceed the ", per_step, " ", items, " of a step");
  device = group->device();
  world_size = group->size();
  if (group->rank() > 0) {
    out_dir += "/rank" + std::to_string(group->rank());
    std::filesystem::create_directories(out_dir);
  }
  return group;
}

// `run` takes no arguments and returns the exit code (run_checked). `device` is set to cuda:0 for "cuda".
template <typename Run>
int prepare_and_run(const std::string& device_name, gg::Device& device, const std::string& out_dir, Run&& run) {
  if (device_name == "cuda") {
    if (!gg::cuda::is_available()) {
      std::fprintf(stderr, "error: --device cuda, but no CUDA device is available (a build without GG_CUDA, "
                           "or no GPU visible); use --device cpu\n");
      return 2;
    }
    device = gg::Device::cuda(0);
  }
  std::error_code ec;
  std::filesystem::create_directories(out_dir, ec);
  if (ec) {
    std::fprintf(stderr, "error: cannot create output directory '%s': %s\n", out_dir.c_str(), ec.message().c_str());
    return 2;
  }
  return run_checked(run);
}

}  // namespace examples
