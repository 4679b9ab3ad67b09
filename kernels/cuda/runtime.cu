// Devices, the library stream, the stream-ordered allocator and copies.
#include <atomic>
#include <mutex>
#include <string>
#include <vector>

#include "kernels/cuda/check.cuh"
#include "kernels/cuda/runtime.h"

namespace gg::kernels::cuda {
namespace {

constexpr int kMaxDevices = 64;
struct DeviceState {
  std::once_flag init;
  cudaStream_t stream = nullptr;
  std::atomic<int64_t> current{0}, peak{0}, allocations{0};
};
DeviceState g_devices[kMaxDevices];
std::atomic<bool> g_allow_tf32{false};

// What cudaGetDeviceCount said, asked once per process. Every entry point below checks it before
// making any other CUDA call, so a machine without a driver or a GPU gets one clear DeviceError
// instead of whichever driver error the first call deep inside would have hit.
struct Availability {
  cudaError_t error;
  int count;
};
const Availability& availability() {
  static const Availability a = [] {
    int n = 0;
    const cudaError_t e = cudaGetDeviceCount(&n);
    if (e != cudaSuccess) {
      cudaGetLastError();  // so that a later cudaGetLastError does not report it
      n = 0;
    }
    return Availability{e, n};
  }();
  return a;
}

[[noreturn]] void throw_no_gpu(const std::string& what) {
  const Availability& a = availability();
  std::string why = a.error != cudaSuccess ? std::string("cudaGetDeviceCount failed: ") + cudaGetErrorName(a.error) +
                                                 " (" + cudaGetErrorString(a.error) + ")"
                                           : std::string("the CUDA runtime reports 0 devices");
  throw DeviceError("gg: cannot use " + what + ": no usable GPU found (" + why + ")");
}

// Throws DeviceError unless at least one GPU is usable.
void require_gpu(const char* what) {
  if (availability().count == 0) throw_no_gpu(what);
}

// Throws DeviceError unless cuda:<device> exists.
void require_device(int device) {
  const std::string name = "cuda:" + std::to_string(device);
  const Availability& a = availability();
  if (a.count == 0) throw_no_gpu(name);
  GG_CHECK(device >= 0 && device < a.count && device < kMaxDevices, DeviceError, "gg: cannot use ", name,
           ": no such device (", a.count, " CUDA device", a.count == 1 ? "" : "s", " found)");
}

DeviceState& state(int device) {
  require_device(device);
  DeviceState& s = g_devices[device];
  std::call_once(s.init, [&] {
    int prev = 0;
    CUDA_CHECK(cudaGetDevice(&prev));
    CUDA_CHECK(cudaSetDevice(device));
    CUDA_CHECK(cudaStreamCreateWithFlags(&s.stream, cudaStreamNonBlocking));
    // Keep freed blocks in the pool instead of returning them to the driver at each sync.
    cudaMemPool_t pool;
    CUDA_CHECK(cudaDeviceGetDefaultMemPool(&pool, device));
    uint64_t threshold = UINT64_MAX;
    CUDA_CHECK(cudaMemPoolSetAttribute(pool, cudaMemPoolAttrReleaseThreshold, &threshold));
    CUDA_CHECK(cudaSetDevice(prev));
  });
  return s;
}

}  // namespace

int device_count() { return availability().count; }

void set_device(int index) {
  require_device(index);
  CUDA_CHECK(cudaSetDevice(index));
}
int current_device() {
  require_gpu("the current CUDA device");
  int d = 0;
  CUDA_CHECK(cudaGetDevice(&d));
  return d;
}

int sm_count() {
  constexpr int kCached = 64;
  static std::atomic<int> cache[kCached]{};
  const int device = current_device();
  if (device < kCached) {
    const int c = cache[device].load(std::memory_order_relaxed);
    if (c > 0) return c;
  }
  int c = 0;
  CUDA_CHECK(cudaDeviceGetAttribute(&c, cudaDevAttrMultiProcessorCount, device));
  if (device < kCached) cache[device].store(c, std::memory_order_relaxed);
  return c;
}

void* stream() { return state(current_device()).stream; }

void synchronize() { CUDA_CHECK(cudaStreamSynchronize(cuda_stream())); }

void* allocate(size_t nbytes, int device) {
  DeviceState& s = state(device);
  void* p = nullptr;
  if (nbytes == 0) nbytes = 1;
  cudaError_t e = cudaMallocAsync(&p, nbytes, s.stream);
  if (e != cudaSuccess) {
    cudaGetLastError();
    size_t free_b = 0, total_b = 0;
    cudaMemGetInfo(&free_b, &total_b);
    throw DeviceError("gg: CUDA out of memory: tried to allocate " + std::to_string(nbytes) + " bytes on cuda:" +
                      std::to_string(device) + " (" + std::to_string(free_b) + " of " + std::to_string(total_b) +
                      " bytes free; " + std::to_string(s.current.load()) + " held by gradgrad tensors)");
  }
  int64_t now = s.current += static_cast<int64_t>(nbytes);
  int64_t peak = s.peak.load();
  while (now > peak && !s.peak.compare_exchange_weak(peak, now)) {
  }
  ++s.allocations;
  return p;
}

void deallocate(void* ptr, size_t nbytes, int device) {
  DeviceState& s = state(device);
  cudaFreeAsync(ptr, s.stream);  // no throw from a destructor path
  s.current -= static_cast<int64_t>(nbytes == 0 ? 1 : nbytes);
}

CudaMemoryStats memory_stats(int device) {
  DeviceState& s = state(device);
  return {s.current.load(), s.peak.load(), s.allocations.load()};
}

void reset_peak_memory_stats(int device) {
  DeviceState& s = state(device);
  s.peak = s.current.load();
}

void memcpy(void* dst, const void* src, size_t nbytes, CopyKind kind) {
  if (nbytes == 0) return;
  cudaMemcpyKind k = kind == CopyKind::host_to_device   ? cudaMemcpyHostToDevice
                     : kind == CopyKind::device_to_host ? cudaMemcpyDeviceToHost
                                                        : cudaMemcpyDeviceToDevice;
  CUDA_CHECK(cudaMemcpyAsync(dst, src, nbytes, k, cuda_stream()));
  // Host memory is pageable and may be freed by the caller right after: wait for host copies.
  if (kind != CopyKind::device_to_device) CUDA_CHECK(cudaStreamSynchronize(cuda_stream()));
}

void set_allow_tf32(bool allow) { g_allow_tf32 = allow; }
bool allow_tf32() { return g_allow_tf32; }

void check_last_launch(const char* file, int line) {
  cudaError_t e = cudaGetLastError();
  if (e != cudaSuccess) detail::throw_cuda(e, "kernel launch", file, line);
}

}  // namespace gg::kernels::cuda
