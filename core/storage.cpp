#include "core/storage.h"

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <new>
#include <utility>

#include "core/cuda.h"
#include "core/error.h"

namespace gg {
namespace {

std::atomic<int64_t> g_cpu_current{0}, g_cpu_peak{0}, g_cpu_allocs{0};

// ---- the CPU block cache
//
// A training loop asks for the same tensor sizes every iteration, thousands of times. Going to
// malloc for each costs more than the arithmetic on a small tensor, and for blocks of a few
// hundred KiB glibc hands memory back to the system on free and faults it in again (zeroed)
// on the next malloc. So freed blocks are kept in one free list per size class and reused.
//
// Size classes: multiples of 64 bytes up to 1 KiB, then four per power of two (1280, 1536,
// 1792, 2048, 2560, ...), so a block is at most 25% larger than the request. Blocks above
// kMaxCachedBlock bypass the cache. Each thread has its own lists (no locking); a block freed
// on another thread simply joins that thread's lists.

constexpr size_t kMaxCachedBlock = size_t{4} << 20;    // 4 MiB
constexpr size_t kMaxCachedBytes = size_t{256} << 20;  // per thread; beyond it, blocks are freed
constexpr int kSmallClasses = 16;                      // 64, 128, ..., 1024 bytes
constexpr int kClasses = kSmallClasses + 4 * 12;       // four per octave, 1 KiB to 4 MiB

struct SizeClass {
  int index;
  size_t bytes;  // the block size actually allocated
};

SizeClass size_class(size_t nbytes) {  // 1 <= nbytes <= kMaxCachedBlock
  if (nbytes <= 1024) {
    const size_t k = (nbytes + 63) / 64;
    return {static_cast<int>(k) - 1, k * 64};
  }
  const int lg = 63 - __builtin_clzll(nbytes - 1);  // 2^lg < nbytes <= 2^(lg + 1), lg >= 10
  const size_t octave = size_t{1} << lg, quarter = octave / 4;
  const size_t k = (nbytes - octave + quarter - 1) / quarter;  // 1..4
  return {kSmallClasses + 4 * (lg - 10) + static_cast<int>(k) - 1, octave + k * quarter};
}

void* aligned_block(size_t bytes) {  // 64-byte aligned (cache line, AVX-512); bytes % 64 == 0
  void* p = std::aligned_alloc(64, bytes);
  if (!p) throw std::bad_alloc();
  return p;
}

struct FreeBlock {
  FreeBlock* next;  // stored in the free block itself
};

class BlockCache {
 public:
  ~BlockCache() {
    release();
    destroyed = true;
  }
  void* take(const SizeClass& c) {
    FreeBlock* b = lists_[c.index];
    if (!b) return aligned_block(c.bytes);
    lists_[c.index] = b->next;
    cached_bytes_ -= c.bytes;
    return b;
  }
  void give(void* p, const SizeClass& c) {
    if (cached_bytes_ + c.bytes > kMaxCachedBytes) return std::free(p);
    auto* b = static_cast<FreeBlock*>(p);
    b->next = lists_[c.index];
    lists_[c.index] = b;
    cached_bytes_ += c.bytes;
  }
  void release() {
    for (FreeBlock*& head : lists_)
      while (head) std::free(std::exchange(head, head->next));
    cached_bytes_ = 0;
  }
  // Set once this thread's cache is gone (thread exit, or static destruction of the main
  // thread): storages freed after that go straight back to the system.
  static thread_local bool destroyed;

 private:
  FreeBlock* lists_[kClasses] = {};
  size_t cached_bytes_ = 0;
};
thread_local bool BlockCache::destroyed = false;
thread_local BlockCache t_cache;

// Host memory, counted so tests can prove memory bounds: current/peak are the bytes of live
// tensor storage, whatever the cache holds besides.
class CpuAllocator final : public Allocator {
 public:
  void* allocate(size_t nbytes, int) override {
    const size_t n = std::max<size_t>(nbytes, 1);
    void* p;
    if (n > kMaxCachedBlock) p = aligned_block((n + 63) / 64 * 64);
    else if (BlockCache::destroyed) p = aligned_block(size_class(n).bytes);  // still class-sized
    else p = t_cache.take(size_class(n));
    int64_t now = g_cpu_current.fetch_add(static_cast<int64_t>(nbytes)) + static_cast<int64_t>(nbytes);
    int64_t peak = g_cpu_peak.load();
    while (now > peak && !g_cpu_peak.compare_exchange_weak(peak, now)) {
    }
    ++g_cpu_allocs;
    return p;
  }
  void deallocate(void* p, size_t nbytes, int) override {
    g_cpu_current -= static_cast<int64_t>(nbytes);
    const size_t n = std::max<size_t>(nbytes, 1);
    if (n > kMaxCachedBlock || BlockCache::destroyed) return std::free(p);
    t_cache.give(p, size_class(n));
  }
};

CpuAllocator g_cpu_allocator;
std::atomic<Allocator*> g_allocators[2] = {&g_cpu_allocator, nullptr};

}  // namespace

void register_allocator(DeviceType type, Allocator* allocator) {
  g_allocators[static_cast<int>(type)].store(allocator, std::memory_order_release);
}

Allocator* allocator_for(Device device) {
  std::atomic<Allocator*>& slot = g_allocators[static_cast<int>(device.type)];
  Allocator* a = slot.load(std::memory_order_acquire);
  if (a == nullptr && device.is_cuda()) {
    // First use of a CUDA device: register the backend's allocator now (throws DeviceError in a
    // build without CUDA). An allocator registered meanwhile by another thread or by the user wins.
    Allocator* backend = cuda::detail::backend_allocator(device);
    a = slot.compare_exchange_strong(a, backend, std::memory_order_acq_rel) ? backend : a;
  }
  GG_CHECK(a != nullptr, DeviceError, "gg: no allocator registered for device ", device.str());
  return a;
}

Storage::Storage(size_t nbytes, Device device) : nbytes_(nbytes), device_(device) {
  Allocator* a = allocator_for(device);
  try {
    data_ = a->allocate(nbytes, device.index);
  } catch (const std::bad_alloc&) {
    throw OutOfMemoryError(detail::concat("gg: out of memory allocating ", nbytes, " bytes (",
                                          static_cast<double>(nbytes) / double(1 << 30), " GiB) on ", device.str()));
  }
}

Storage::Storage(void* data, size_t nbytes, Device device, std::function<void(void*)> release)
    : data_(data), nbytes_(nbytes), device_(device), external_(true), release_(std::move(release)) {}

Storage::~Storage() {
  if (!external_) allocator_for(device_)->deallocate(data_, nbytes_, device_.index);
  else if (release_) release_(data_);
}

namespace cpu {
MemoryStats memory_stats() { return {g_cpu_current.load(), g_cpu_peak.load(), g_cpu_allocs.load()}; }
void reset_peak_memory_stats() { g_cpu_peak = g_cpu_current.load(); }
void empty_cache() {
  if (!BlockCache::destroyed) t_cache.release();
}
}  // namespace cpu

}  // namespace gg
