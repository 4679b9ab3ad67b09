#include "core/storage.h"

#include <cstdlib>
#include <cstring>
#include <new>

#include "core/error.h"

namespace gg {
namespace {

std::atomic<int64_t> g_cpu_current{0}, g_cpu_peak{0}, g_cpu_allocs{0};

// Host memory, 64-byte aligned (cache line, AVX-512), counted so tests can prove memory bounds.
class CpuAllocator final : public Allocator {
 public:
  void* allocate(size_t nbytes, int) override {
    size_t rounded = (std::max<size_t>(nbytes, 1) + 63) / 64 * 64;
    void* p = std::aligned_alloc(64, rounded);
    if (!p) throw std::bad_alloc();
    int64_t now = g_cpu_current.fetch_add(static_cast<int64_t>(nbytes)) + static_cast<int64_t>(nbytes);
    int64_t peak = g_cpu_peak.load();
    while (now > peak && !g_cpu_peak.compare_exchange_weak(peak, now)) {
    }
    ++g_cpu_allocs;
    return p;
  }
  void deallocate(void* p, size_t nbytes, int) override {
    std::free(p);
    g_cpu_current -= static_cast<int64_t>(nbytes);
  }
};

CpuAllocator g_cpu_allocator;
Allocator* g_allocators[2] = {&g_cpu_allocator, nullptr};

}  // namespace

void register_allocator(DeviceType type, Allocator* allocator) {
  g_allocators[static_cast<int>(type)] = allocator;
}

Allocator* allocator_for(Device device) {
  Allocator* a = g_allocators[static_cast<int>(device.type)];
  GG_CHECK(a != nullptr, DeviceError, "gg: no allocator for device ", device.str(),
           " (was gradgrad built with GG_CUDA, and is a GPU present?)");
  return a;
}

Storage::Storage(size_t nbytes, Device device) : nbytes_(nbytes), device_(device) {
  data_ = allocator_for(device)->allocate(nbytes, device.index);
}

Storage::~Storage() { allocator_for(device_)->deallocate(data_, nbytes_, device_.index); }

namespace cpu {
MemoryStats memory_stats() { return {g_cpu_current.load(), g_cpu_peak.load(), g_cpu_allocs.load()}; }
void reset_peak_memory_stats() { g_cpu_peak = g_cpu_current.load(); }
}  // namespace cpu

}  // namespace gg
