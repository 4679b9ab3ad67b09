// A block of device memory shared by a tensor and all its views. Storage also carries the
// version counter that autograd uses to notice a saved tensor modified in place.
#pragma once
#include <atomic>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>

#include "device.h"

namespace gg {

struct MemoryStats {
  int64_t current_bytes = 0;  // bytes held by live storages on this device
  int64_t peak_bytes = 0;     // high-water mark since the last reset
  int64_t allocations = 0;    // number of allocations since start
};

// One allocator per device type. The CUDA backend's is registered by allocator_for on the
// first use of a CUDA device.
class Allocator {
 public:
  virtual ~Allocator() = default;
  virtual void* allocate(size_t nbytes, int device_index) = 0;
  virtual void deallocate(void* ptr, size_t nbytes, int device_index) = 0;
};
void register_allocator(DeviceType type, Allocator* allocator);
Allocator* allocator_for(Device device);  // throws DeviceError when the backend is missing

class Storage {
 public:
  Storage(size_t nbytes, Device device);
  // Memory owned by someone else (gg::from_blob): never allocated, freed or counted by the
  // library's allocators; `release` (may be empty) runs once, when the last tensor lets go.
  Storage(void* data, size_t nbytes, Device device, std::function<void(void*)> release);
  ~Storage();
  Storage(const Storage&) = delete;
  Storage& operator=(const Storage&) = delete;

  void* data() const { return data_; }
  size_t nbytes() const { return nbytes_; }
  Device device() const { return device_; }
  uint64_t version() const { return version_; }
  void bump_version() { ++version_; }

 private:
  void* data_ = nullptr;
  size_t nbytes_ = 0;
  Device device_;
  uint64_t version_ = 0;
  bool external_ = false;
  std::function<void(void*)> release_;
};

namespace cpu {
MemoryStats memory_stats();        // CPU tensor memory, counted by the CPU allocator
void reset_peak_memory_stats();    // peak := current
// Freed CPU blocks are kept for reuse (see storage.cpp); this gives the calling thread's back to
// the system. memory_stats counts live tensor bytes only, with or without cached blocks.
void empty_cache();
}  // namespace cpu

}  // namespace gg
