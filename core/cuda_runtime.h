// The CUDA runtime as the rest of the library sees it: devices, the stream every kernel runs
// on, stream-ordered allocation, copies, graph capture and error checks (gg::cuda in core/cuda.h
// is its public face; the CUDA kernels use it from below). No CUDA headers leak through here.
#pragma once
#include <cstddef>
#include <cstdint>

namespace gg::cuda::runtime {

// Number of usable CUDA devices; 0 when the driver reports none (e.g. a CI machine without a GPU).
int device_count();
void set_device(int index);
int current_device();
int sm_count();  // streaming multiprocessors of the current device (read once per device)

// The library's stream on the current device (created once per device). Returned as void* so
// that callers need no CUDA headers; kernels cast it back to cudaStream_t.
void* stream();
void synchronize();

// A stream owned by someone else (a cudaStream_t as void*; 0 is CUDA's legacy default stream)
// that replaces the library stream of `device` for the calling thread while `active`: stream(),
// kernels, copies and the stream-ordered allocate/deallocate on that device use it. Returns the
// previous setting, which the caller restores (gg::cuda::StreamGuard is the public face).
struct ThreadStream {
  bool active = false;
  int device = -1;
  void* stream = nullptr;
};
ThreadStream set_thread_stream(ThreadStream s);

// Stream-ordered allocation (cudaMallocAsync on the device's default memory pool, whose release
// threshold is raised so freed memory is kept for reuse). Counted for memory_stats.
void* allocate(size_t nbytes, int device);
void deallocate(void* ptr, size_t nbytes, int device);
struct CudaMemoryStats {
  int64_t current_bytes, peak_bytes, allocations;
};
CudaMemoryStats memory_stats(int device);
void reset_peak_memory_stats(int device);

enum class CopyKind { host_to_device, device_to_host, device_to_device };
// Copies on the library stream; copies to or from the host wait for the copy to finish.
void memcpy(void* dst, const void* src, size_t nbytes, CopyKind kind);

// cuBLAS math mode for f32 matmuls: false (default) = exact f32, true = TF32 tensor cores.
void set_allow_tf32(bool allow);
bool allow_tf32();

// Throws gg::DeviceError("CUDA error ... at file:line") when the last launch failed.
void check_last_launch(const char* file, int line);

// ---- CUDA graphs: stream capture of the library stream (gg::cuda::Graph is the public face).
//
// Between begin_capture() and end_capture() the current device's library stream is captured:
// kernels and device-to-device copies become graph nodes; allocate() becomes an allocation node
// (a fixed address for the life of the graph) and deallocate() of a block allocated during the
// capture a free node. A block allocated before the capture and released during it is not freed
// (the graph reads it on every replay): the graph keeps it until it is destroyed. So does a block
// that the capture allocated and did not free (a static output, a saved tensor) once its last
// tensor lets go of it while the graph lives. synchronize() and host copies throw CaptureError
// during a capture instead of invalidating it.
struct CudaGraph;                   // an instantiated graph and the memory it keeps
bool is_capturing();                // a capture is running (on any device)
void begin_capture();               // on the current device; throws CaptureError if one runs already
CudaGraph* end_capture();           // ends and instantiates; on failure throws, and the capture is over
void abort_capture() noexcept;      // ends a capture after an error and drops what it recorded
void launch_graph(CudaGraph* graph);            // on the library stream of the capture's device
void destroy_graph(CudaGraph* graph) noexcept;  // frees the memory it kept, stream-ordered

}  // namespace gg::cuda::runtime
