// The CUDA backend's public switches. Everything here is safe to call in a build without CUDA
// or on a machine without a GPU: is_available() is then false and the rest throw DeviceError.
#pragma once
#include "storage.h"

namespace gg::cuda {

bool is_available();  // built with GG_CUDA and at least one GPU present
int device_count();
void synchronize();   // waits for all work the library queued on the current device

// Bytes held by tensors on `device` (stream-ordered allocator, counted by the library).
MemoryStats memory_stats(int device = 0);
void reset_peak_memory_stats(int device = 0);

// f32 matmuls on TF32 tensor cores (faster, ~1e-3 relative error) or exact f32 (default).
void set_allow_tf32(bool allow);
bool allow_tf32();

// Makes `stream`, a CUDA stream owned by someone else (a cudaStream_t passed as void*, e.g.
// torch.cuda.current_stream().cuda_stream; 0 is CUDA's legacy default stream), the library stream
// of `device` for the calling thread while the guard lives, and `device` the current device:
// kernels, copies and stream-ordered allocations and frees on it are queued on `stream`, after
// the owner's work, with no synchronisation. Guards nest (each restores what it found). A free is
// ordered on the stream current when it happens, so memory the library allocates under a guard
// should be freed under it (or the caller orders the streams). Not for use while a
// gg::cuda::Graph capture runs. In a build without CUDA the constructor throws DeviceError.
class StreamGuard {
 public:
  StreamGuard(Device device, void* stream);
  ~StreamGuard();
  StreamGuard(const StreamGuard&) = delete;
  StreamGuard& operator=(const StreamGuard&) = delete;

 private:
  int prev_device_ = 0;
  bool prev_active_ = false;
  int prev_stream_device_ = -1;
  void* prev_stream_ = nullptr;
};

namespace detail {
// The CUDA allocator, for allocator_for() to register the first time a CUDA device is used.
// It is reached through this call rather than a static initialiser in core/cuda.cpp, which a
// linker drops from a static library when the program calls nothing else in that file. Throws
// DeviceError naming `device` in a build without the CUDA backend.
Allocator* backend_allocator(Device device);
}  // namespace detail

}  // namespace gg::cuda
