// The launch environment (any build) and, when built with CUDA and NCCL, the NCCL group.
#include "dist/nccl_group.h"

#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <iterator>
#include <thread>

#include "ops/ops.h"

#ifdef GG_HAS_NCCL
#include <cuda_runtime.h>
#include <nccl.h>

#include "core/cuda_runtime.h"
#endif

namespace gg::dist {
namespace {

// An integer environment variable, or `fallback` when unset.
int env_int(const char* name, int fallback) {
  const char* s = std::getenv(name);
  if (!s || !*s) return fallback;
  char* end = nullptr;
  const long v = std::strtol(s, &end, 10);
  GG_CHECK(*end == '\0' && v >= 0 && v <= 1 << 20, ValueError, "gg::dist: environment variable ", name,
           " must be a non-negative integer, got '", s, "'");
  return static_cast<int>(v);
}

// The first of `names` that is set, as env_int reads it, or `fallback` when none is.
int env_int_first(std::initializer_list<const char*> names, int fallback) {
  for (const char* name : names) {
    const char* s = std::getenv(name);
    if (s && *s) return env_int(name, fallback);
  }
  return fallback;
}

}  // namespace

// torchrun's (and launch.sh's) names first, then Open MPI's mpirun, then MPICH's mpiexec.
LaunchOptions resolve_launch_options(const LaunchOptions& given) {
  LaunchOptions o = given;
  if (o.rank < 0) o.rank = env_int_first({"RANK", "OMPI_COMM_WORLD_RANK", "PMI_RANK"}, -1);
  if (o.world_size < 0) o.world_size = env_int_first({"WORLD_SIZE", "OMPI_COMM_WORLD_SIZE", "PMI_SIZE"}, -1);
  if (o.local_rank < 0)
    o.local_rank = env_int_first({"LOCAL_RANK", "OMPI_COMM_WORLD_LOCAL_RANK", "MPI_LOCALRANKID"}, o.rank);
  if (o.init_file.empty()) {
    const char* f = std::getenv("GG_DIST_INIT_FILE");
    if (f) o.init_file = f;
  }
  if (o.timeout_s < 0) {
    const char* t = std::getenv("GG_DIST_TIMEOUT_S");
    o.timeout_s = 300;
    if (t && *t) {
      char* end = nullptr;
      o.timeout_s = std::strtod(t, &end);
      GG_CHECK(*end == '\0' && o.timeout_s > 0, ValueError,
               "gg::dist: GG_DIST_TIMEOUT_S must be a positive number of seconds, got '", t, "'");
    }
  }
  GG_CHECK(o.world_size >= 1, ValueError, "gg::dist: the world size is not set: pass it or set WORLD_SIZE "
           "(scripts/launch.sh does), got ", o.world_size);
  GG_CHECK(o.rank >= 0 && o.rank < o.world_size, ValueError, "gg::dist: the rank must be in [0, ", o.world_size,
           "): pass it or set RANK, got ", o.rank);
  GG_CHECK(o.local_rank >= 0, ValueError, "gg::dist: LOCAL_RANK must be >= 0, got ", o.local_rank);
  GG_CHECK(o.world_size == 1 || !o.init_file.empty(), ValueError, "gg::dist: ", o.world_size,
           " ranks need an init file to meet: set GG_DIST_INIT_FILE (scripts/launch.sh does)");
  return o;
}

std::string share_through_file(const std::string& path, int rank, const std::string& blob, double timeout_s) {
  GG_CHECK(!path.empty(), ValueError, "gg::dist::share_through_file: the path is empty");
  if (rank == 0) {
    const std::string tmp = path + ".tmp." + std::to_string(::getpid());
    {
      std::ofstream out(tmp, std::ios::binary | std::ios::trunc);
      out.write(blob.data(), static_cast<std::streamsize>(blob.size()));
      out.flush();
      GG_CHECK(out.good(), DistError, "gg::dist: rank 0 cannot write the init file '", tmp, "'");
    }
    GG_CHECK(std::rename(tmp.c_str(), path.c_str()) == 0, DistError, "gg::dist: rank 0 cannot rename '", tmp,
             "' to the init file '", path, "'");
    return blob;
  }
  const auto start = std::chrono::steady_clock::now();
  for (;;) {
    std::ifstream in(path, std::ios::binary);
    if (in) {
      std::string got((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
      GG_CHECK(got.size() == blob.size(), DistError, "gg::dist: rank ", rank, ": the init file '", path, "' holds ",
               got.size(), " bytes, expected ", blob.size(), " (a file left from another run?)");
      return got;
    }
    const double waited = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    GG_CHECK(waited < timeout_s, DistError, "gg::dist: rank ", rank, " waited ", waited, " s for rank 0 to write the "
             "init file '", path, "' (timeout ", timeout_s, " s, GG_DIST_TIMEOUT_S)");
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
}

#ifdef GG_HAS_NCCL

namespace {

void check_nccl(ncclResult_t r, ncclComm_t comm, const char* what) {
  if (r == ncclSuccess || r == ncclInProgress) return;
  const char* last = comm ? ncclGetLastError(comm) : nullptr;
  throw DistError(std::string("gg::dist::NcclGroup: ") + what + " failed: " + ncclGetErrorString(r) +
                  (last && *last ? std::string(" (") + last + ")" : std::string()));
}

ncclDataType_t nccl_type(const char* op, DType t) {
  switch (t) {
    case DType::f32: return ncclFloat32;
    case DType::f64: return ncclFloat64;
    case DType::bf16: return ncclBfloat16;
    case DType::f16: return ncclFloat16;
    case DType::i64: return ncclInt64;
    case DType::b8: break;
  }
  throw DTypeError(std::string("gg::dist::") + op + ": NCCL collectives take f32, f64, bf16, f16 or i64, got " +
                   dtype_name(t));
}

void check_cuda(cudaError_t e, const char* what) {
  if (e != cudaSuccess) throw DistError(std::string("gg::dist::NcclGroup: ") + what + ": " + cudaGetErrorString(e));
}

// Started communication (start_all_reduce_flat, start_sendrecv_flat): `done` is recorded on the
// communication stream after it; wait() makes the library's stream wait for that event. Holding
// x keeps its memory from being reused by work on the library's stream before the communication
// has read it.
class NcclPending final : public Group::Pending {
 public:
  NcclPending(Tensor x, Tensor out, cudaEvent_t done, cudaStream_t compute)
      : x_(std::move(x)), out_(std::move(out)), done_(done), compute_(compute) {}
  ~NcclPending() override {
    if (done_ != nullptr) {
      cudaStreamWaitEvent(compute_, done_, 0);  // never leave x to be reused under the transfer
      cudaEventDestroy(done_);
    }
  }
  Tensor wait() override {
    check_cuda(cudaStreamWaitEvent(compute_, done_, 0), "cudaStreamWaitEvent");
    check_cuda(cudaEventDestroy(done_), "cudaEventDestroy");
    done_ = nullptr;
    x_ = Tensor();
    return out_;
  }

 private:
  Tensor x_, out_;
  cudaEvent_t done_;
  cudaStream_t compute_;
};

}  // namespace

struct NcclGroup::Impl {
  int rank = 0, world = 1, local_rank = 0;
  ncclComm_t comm = nullptr;
  cudaStream_t comm_stream = nullptr;  // the start_*_flat methods', made on first use

  // x to dst and out (x's shape) from src, as one NCCL group on `stream`.
  void sendrecv(const char* op, const Tensor& x, Tensor& out, int dst, int src, cudaStream_t stream) const {
    const ncclDataType_t t = nccl_type(op, x.dtype());
    const size_t n = static_cast<size_t>(x.numel());
    check_nccl(ncclGroupStart(), comm, "ncclGroupStart");
    check_nccl(ncclSend(x.raw_data(), n, t, dst, comm, stream), comm, "ncclSend");
    check_nccl(ncclRecv(out.raw_data(), n, t, src, comm, stream), comm, "ncclRecv");
    check_nccl(ncclGroupEnd(), comm, "ncclGroupEnd");
  }
  // Makes the communication stream wait for the work issued so far on the library's.
  cudaStream_t begin_started() {
    if (comm_stream == nullptr)
      check_cuda(cudaStreamCreateWithFlags(&comm_stream, cudaStreamNonBlocking), "cudaStreamCreateWithFlags");
    cudaEvent_t ready = nullptr;
    check_cuda(cudaEventCreateWithFlags(&ready, cudaEventDisableTiming), "cudaEventCreateWithFlags");
    check_cuda(cudaEventRecord(ready, stream()), "cudaEventRecord");
    check_cuda(cudaStreamWaitEvent(comm_stream, ready, 0), "cudaStreamWaitEvent");
    check_cuda(cudaEventDestroy(ready), "cudaEventDestroy");
    return comm_stream;
  }
  // The Pending of what was issued on the communication stream since begin_started.
  std::unique_ptr<Group::Pending> end_started(const Tensor& x, const Tensor& out) {
    cudaEvent_t done = nullptr;
    check_cuda(cudaEventCreateWithFlags(&done, cudaEventDisableTiming), "cudaEventCreateWithFlags");
    check_cuda(cudaEventRecord(done, comm_stream), "cudaEventRecord");
    return std::make_unique<NcclPending>(x, out, done, stream());
  }

  cudaStream_t stream() const {
    cuda::runtime::set_device(local_rank);
    return static_cast<cudaStream_t>(cuda::runtime::stream());
  }
  void check_tensor(const char* op, const Tensor& x) const {
    GG_CHECK(x.device() == Device::cuda(local_rank), DeviceError, "gg::dist::", op, ": rank ", rank,
             " communicates from cuda:", local_rank, ", got a tensor on ", x.device().str());
  }
};

std::shared_ptr<NcclGroup> NcclGroup::create(const LaunchOptions& options) {
  const LaunchOptions o = resolve_launch_options(options);
  const int devices = cuda::runtime::device_count();
  GG_CHECK(o.local_rank < devices, DeviceError, "gg::dist::NcclGroup: rank ", o.rank, " wants cuda:", o.local_rank,
           " (LOCAL_RANK) but ", devices, " CUDA device(s) are usable");
  cuda::runtime::set_device(o.local_rank);
  ncclUniqueId id;
  std::string blob(sizeof id.internal, '\0');
  if (o.rank == 0) {
    check_nccl(ncclGetUniqueId(&id), nullptr, "ncclGetUniqueId");
    blob.assign(id.internal, sizeof id.internal);
  }
  if (o.world_size > 1) blob = share_through_file(o.init_file, o.rank, blob, o.timeout_s);
  std::copy(blob.begin(), blob.end(), id.internal);
  auto impl = std::make_unique<Impl>();
  impl->rank = o.rank;
  impl->world = o.world_size;
  impl->local_rank = o.local_rank;
  check_nccl(ncclCommInitRank(&impl->comm, o.world_size, id, o.rank), nullptr, "ncclCommInitRank");
  return std::make_shared<NcclGroup>(std::move(impl));
}

NcclGroup::NcclGroup(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}

NcclGroup::~NcclGroup() {
  if (impl_ && impl_->comm) {
    cudaStreamSynchronize(impl_->stream());
    if (impl_->comm_stream != nullptr) {
      cudaStreamSynchronize(impl_->comm_stream);
      cudaStreamDestroy(impl_->comm_stream);
    }
    ncclCommDestroy(impl_->comm);
  }
}

int NcclGroup::rank() const { return impl_->rank; }
int NcclGroup::size() const { return impl_->world; }
Device NcclGroup::device() const { return Device::cuda(impl_->local_rank); }

void NcclGroup::barrier() {
  Tensor one = ones({1}, DType::f32, device());
  Tensor out = empty({1}, DType::f32, device());
  check_nccl(ncclAllReduce(one.raw_data(), out.raw_data(), 1, ncclFloat32, ncclSum, impl_->comm, impl_->stream()),
             impl_->comm, "barrier");
  cuda::runtime::synchronize();
}

Tensor NcclGroup::all_reduce_flat(const Tensor& x) {
  impl_->check_tensor("all_reduce", x);
  Tensor out = empty(x.shape(), x.dtype(), x.device());
  check_nccl(ncclAllReduce(x.raw_data(), out.raw_data(), static_cast<size_t>(x.numel()),
                           nccl_type("all_reduce", x.dtype()), ncclSum, impl_->comm, impl_->stream()),
             impl_->comm, "ncclAllReduce");
  return out;
}

std::unique_ptr<Group::Pending> NcclGroup::start_all_reduce_flat(const Tensor& x) {
  impl_->check_tensor("start_all_reduce", x);
  Tensor out = empty(x.shape(), x.dtype(), x.device());  // on the library's stream, before the event
  const cudaStream_t comm = impl_->begin_started();
  check_nccl(ncclAllReduce(x.raw_data(), out.raw_data(), static_cast<size_t>(x.numel()),
                           nccl_type("start_all_reduce", x.dtype()), ncclSum, impl_->comm, comm),
             impl_->comm, "ncclAllReduce");
  return impl_->end_started(x, out);
}

Tensor NcclGroup::all_gather_flat(const Tensor& x) {
  impl_->check_tensor("all_gather", x);
  Tensor out = empty({x.numel() * size()}, x.dtype(), x.device());
  check_nccl(ncclAllGather(x.raw_data(), out.raw_data(), static_cast<size_t>(x.numel()),
                           nccl_type("all_gather", x.dtype()), impl_->comm, impl_->stream()),
             impl_->comm, "ncclAllGather");
  return out;
}

Tensor NcclGroup::reduce_scatter_flat(const Tensor& x) {
  impl_->check_tensor("reduce_scatter", x);
  const int64_t n = x.numel() / size();
  Tensor out = empty({n}, x.dtype(), x.device());
  check_nccl(ncclReduceScatter(x.raw_data(), out.raw_data(), static_cast<size_t>(n),
                               nccl_type("reduce_scatter", x.dtype()), ncclSum, impl_->comm, impl_->stream()),
             impl_->comm, "ncclReduceScatter");
  return out;
}

Tensor NcclGroup::broadcast_flat(const Tensor& x, int root) {
  impl_->check_tensor("broadcast", x);
  Tensor out = empty(x.shape(), x.dtype(), x.device());
  check_nccl(ncclBroadcast(x.raw_data(), out.raw_data(), static_cast<size_t>(x.numel()),
                           nccl_type("broadcast", x.dtype()), root, impl_->comm, impl_->stream()),
             impl_->comm, "ncclBroadcast");
  return out;
}

void NcclGroup::send_flat(const Tensor& x, int peer) {
  impl_->check_tensor("send", x);
  check_nccl(ncclSend(x.raw_data(), static_cast<size_t>(x.numel()), nccl_type("send", x.dtype()), peer, impl_->comm,
                      impl_->stream()),
             impl_->comm, "ncclSend");
}

Tensor NcclGroup::recv_flat(const Tensor& like, int peer) {
  impl_->check_tensor("recv", like);
  Tensor out = empty(like.shape(), like.dtype(), like.device());
  check_nccl(ncclRecv(out.raw_data(), static_cast<size_t>(out.numel()), nccl_type("recv", like.dtype()), peer,
                      impl_->comm, impl_->stream()),
             impl_->comm, "ncclRecv");
  return out;
}

Tensor NcclGroup::sendrecv_flat(const Tensor& x, int dst, int src) {
  impl_->check_tensor("sendrecv", x);
  Tensor out = empty(x.shape(), x.dtype(), x.device());
  impl_->sendrecv("sendrecv", x, out, dst, src, impl_->stream());
  return out;
}

std::unique_ptr<Group::Pending> NcclGroup::start_sendrecv_flat(const Tensor& x, int dst, int src) {
  impl_->check_tensor("start_sendrecv", x);
  Tensor out = empty(x.shape(), x.dtype(), x.device());  // on the library's stream, before the event
  impl_->sendrecv("start_sendrecv", x, out, dst, src, impl_->begin_started());
  return impl_->end_started(x, out);
}

#else  // no NCCL in this build

struct NcclGroup::Impl {};

std::shared_ptr<NcclGroup> NcclGroup::create(const LaunchOptions&) {
  throw DeviceError("gg::dist::NcclGroup: this build of gradgrad has no NCCL (it needs GG_CUDA and NCCL at configure "
                    "time); use dist::run_threads for in-process ranks");
}
NcclGroup::NcclGroup(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
NcclGroup::~NcclGroup() = default;
int NcclGroup::rank() const { return 0; }
int NcclGroup::size() const { return 1; }
Device NcclGroup::device() const { return Device::cpu(); }
void NcclGroup::barrier() {}
Tensor NcclGroup::all_reduce_flat(const Tensor& x) { return x; }
Tensor NcclGroup::all_gather_flat(const Tensor& x) { return x; }
Tensor NcclGroup::reduce_scatter_flat(const Tensor& x) { return x; }
Tensor NcclGroup::broadcast_flat(const Tensor& x, int) { return x; }
void NcclGroup::send_flat(const Tensor&, int) {}
Tensor NcclGroup::recv_flat(const Tensor& like, int) { return like; }
Tensor NcclGroup::sendrecv_flat(const Tensor& x, int, int) { return x; }
std::unique_ptr<Group::Pending> NcclGroup::start_all_reduce_flat(const Tensor& x) {
  return Group::start_all_reduce_flat(x);
}
std::unique_ptr<Group::Pending> NcclGroup::start_sendrecv_flat(const Tensor& x, int dst, int src) {
  return Group::start_sendrecv_flat(x, dst, src);
}

#endif

}  // namespace gg::dist
