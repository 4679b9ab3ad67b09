// NcclGroup: one process per GPU, collectives through NCCL on the library's CUDA stream (and
// start_all_reduce, start_sendrecv on a stream of their own, ordered against the library's by
// events).
//
// Start one process per GPU with scripts/launch.sh, torchrun or mpirun. Each process calls
// NcclGroup::create(), which reads
//   RANK, WORLD_SIZE   this process's rank and the number of processes (unset: Open MPI's
//                      OMPI_COMM_WORLD_RANK, _SIZE, or MPICH's PMI_RANK, PMI_SIZE)
//   LOCAL_RANK         the GPU it uses (cuda:LOCAL_RANK; unset: OMPI_COMM_WORLD_LOCAL_RANK or
//                      MPI_LOCALRANKID); default: the rank
//   GG_DIST_INIT_FILE  a path on a file system every process sees: rank 0 writes NCCL's unique
//                      id there (to a temporary name, then renamed, so readers never see half a
//                      file), the others wait for it (GG_DIST_TIMEOUT_S, default 300 s). The
//                      file must not exist before the run (launch.sh makes a fresh directory;
//                      mpirun passes it with -x GG_DIST_INIT_FILE=...).
// Fields set in LaunchOptions take precedence over the variables. With a world size of 1 no
// init file is needed.
//
// This header compiles everywhere; in a build without CUDA and NCCL (GG_HAS_NCCL undefined)
// create() raises a DeviceError. Tensors given to an NcclGroup must be on its GPU.
#pragma once
#include <memory>
#include <string>

#include "group.h"

namespace gg::dist {

struct LaunchOptions {
  int rank = -1;           // -1: RANK
  int world_size = -1;     // -1: WORLD_SIZE
  int local_rank = -1;     // -1: LOCAL_RANK, or rank when that is unset too
  std::string init_file;   // empty: GG_DIST_INIT_FILE
  double timeout_s = -1;   // -1: GG_DIST_TIMEOUT_S, or 300
};

// The options with every unset field read from the environment, checked (ValueError naming the
// variable and its value when one is missing or malformed).
LaunchOptions resolve_launch_options(const LaunchOptions& given);

// Rank 0 writes `blob` to `path` atomically (a temporary file renamed over it); every other rank
// waits until `path` holds blob.size() bytes and returns them (DistError after timeout_s).
// Rank 0 returns blob. Used for NCCL's unique id; independent of NCCL.
std::string share_through_file(const std::string& path, int rank, const std::string& blob, double timeout_s);

class NcclGroup final : public Group {
 public:
  static std::shared_ptr<NcclGroup> create(const LaunchOptions& options = {});
  ~NcclGroup() override;

  int rank() const override;
  int size() const override;
  Device device() const;  // cuda:local_rank
  void barrier() override;

  struct Impl;
  explicit NcclGroup(std::unique_ptr<Impl> impl);

 protected:
  Tensor all_reduce_flat(const Tensor& x) override;
  Tensor all_gather_flat(const Tensor& x) override;
  Tensor reduce_scatter_flat(const Tensor& x) override;
  Tensor broadcast_flat(const Tensor& x, int root) override;
  void send_flat(const Tensor& x, int peer) override;
  Tensor recv_flat(const Tensor& like, int peer) override;
  Tensor sendrecv_flat(const Tensor& x, int dst, int src) override;
  std::unique_ptr<Pending> start_all_reduce_flat(const Tensor& x) override;
  std::unique_ptr<Pending> start_sendrecv_flat(const Tensor& x, int dst, int src) override;

 private:
  std::unique_ptr<Impl> impl_;
};

}  // namespace gg::dist
