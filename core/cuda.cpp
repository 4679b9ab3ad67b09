#include "core/cuda.h"

#include "core/error.h"

#ifdef GG_HAS_CUDA
#include "core/cuda_runtime.h"
#endif

namespace gg::cuda {

#ifdef GG_HAS_CUDA
namespace {
class CudaAllocator final : public Allocator {
 public:
  void* allocate(size_t nbytes, int device) override { return cuda::runtime::allocate(nbytes, device); }
  void deallocate(void* p, size_t nbytes, int device) override { cuda::runtime::deallocate(p, nbytes, device); }
};
}  // namespace

// Never destroyed: storages of static tensors may be freed after other statics are gone.
Allocator* detail::backend_allocator(Device) {
  static CudaAllocator* const allocator = new CudaAllocator;
  return allocator;
}

int device_count() { return cuda::runtime::device_count(); }
void synchronize() { cuda::runtime::synchronize(); }
MemoryStats memory_stats(int device) {
  auto s = cuda::runtime::memory_stats(device);
  return {s.current_bytes, s.peak_bytes, s.allocations};
}
void reset_peak_memory_stats(int device) { cuda::runtime::reset_peak_memory_stats(device); }
void set_allow_tf32(bool allow) { cuda::runtime::set_allow_tf32(allow); }
bool allow_tf32() { return cuda::runtime::allow_tf32(); }

StreamGuard::StreamGuard(Device device, void* stream) {
  GG_CHECK(device.is_cuda(), DeviceError, "gg::cuda::StreamGuard: needs a CUDA device, got ", device.str());
  prev_device_ = cuda::runtime::current_device();
  cuda::runtime::set_device(device.index);
  const cuda::runtime::ThreadStream prev = cuda::runtime::set_thread_stream({true, device.index, stream});
  prev_active_ = prev.active;
  prev_stream_device_ = prev.device;
  prev_stream_ = prev.stream;
}
StreamGuard::~StreamGuard() {
  cuda::runtime::set_thread_stream({prev_active_, prev_stream_device_, prev_stream_});
  try {
    cuda::runtime::set_device(prev_device_);
  } catch (const Error&) {  // a destructor does not throw; the device existed when the guard began
  }
}
#else
namespace {
[[noreturn]] void no_cuda(const char* what) {
  throw DeviceError(std::string("gg::cuda::") + what + ": this build of gradgrad has no CUDA backend (GG_CUDA=OFF "
                    "or no nvcc at configure time)");
}
}  // namespace
Allocator* detail::backend_allocator(Device device) {
  throw DeviceError("gg: cannot use " + device.str() + ": this build of gradgrad has no CUDA backend (GG_CUDA=OFF "
                    "or no nvcc at configure time)");
}
int device_count() { return 0; }
void synchronize() { no_cuda("synchronize"); }
MemoryStats memory_stats(int) { no_cuda("memory_stats"); }
void reset_peak_memory_stats(int) { no_cuda("reset_peak_memory_stats"); }
void set_allow_tf32(bool) { no_cuda("set_allow_tf32"); }
bool allow_tf32() { return false; }
StreamGuard::StreamGuard(Device, void*) { no_cuda("StreamGuard"); }
StreamGuard::~StreamGuard() = default;
#endif

bool is_available() { return device_count() > 0; }

}  // namespace gg::cuda
