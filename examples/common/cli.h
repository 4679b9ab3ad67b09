// Command-line options that several examples declare alike (CLI11): the device, and the
// data-parallel split of each step's batch over ranks (common/data_parallel.h).
#pragma once
#include <gradgrad.h>

#include <CLI/CLI.hpp>
#include <cstdint>
#include <cstdio>
#include <string>

namespace examples {

// --device cpu|cuda, cuda by default when a GPU is available.
inline CLI::Option* add_device_option(CLI::App& app, std::string& device_name) {
  device_name = gg::cuda::is_available() ? "cuda" : "cpu";
  return app.add_option("--device", device_name, "cpu or cuda (default: cuda when available)")
      ->check(CLI::IsMember({"cpu", "cuda"}))
      ->capture_default_str();
}

// --world-size N: N data-parallel ranks as threads on the CPU (common/data_parallel.h). `batch`
// names what every step splits over the ranks ("batch", "meta-batch").
inline CLI::Option* add_world_size_option(CLI::App& app, int& world_size, const std::string& batch) {
  return app.add_option("--world-size", world_size,
                        "data-parallel ranks on the CPU (threads), each with its share of every " + batch)
      ->check(CLI::Range(1, 4096))
      ->capture_default_str();
}

// --nccl: this process is one data-parallel rank of a group started by scripts/launch.sh
// (common/run.h's join_nccl). It excludes --world-size.
inline CLI::Option* add_nccl_flag(CLI::App& app, bool& nccl) {
  return app.add_flag("--nccl", nccl,
                      "with --device cuda, under scripts/launch.sh N: this process is one of N data-parallel ranks "
                      "over NCCL (RANK, WORLD_SIZE, LOCAL_RANK; rank r > 0 writes to OUT/rank<r>)");
}

// After parsing: every rank needs at least one of a step's `batch_size` items. Prints the error
// and returns false when --world-size is larger, e.g.
//   error: --world-size (4) must not exceed the batch (2 sequences)
// `batch` is how the message names the batch ("the batch", "--meta-batch"), `items` its items.
inline bool check_world_size(int world_size, int64_t batch_size, const char* batch, const char* items) {
  if (world_size <= batch_size) return true;
  std::fprintf(stderr, "error: --world-size (%d) must not exceed %s (%lld %s)\n", world_size, batch,
               static_cast<long long>(batch_size), items);
  return false;
}

}  // namespace examples
