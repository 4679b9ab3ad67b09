// Devices, the library stream, the stream-ordered allocator and copies.
#include <atomic>
#include <memory>
#include <mutex>
#include <string>
#include <unordered_map>
#include <unordered_set>
#include <vector>

#include "core/cuda_check.cuh"
#include "core/cuda_runtime.h"

namespace gg::cuda::runtime {
namespace {

constexpr int kMaxDevices = 64;
struct DeviceState {
  std::once_flag init;
  cudaStream_t stream = nullptr;
  std::atomic<int64_t> current{0}, peak{0}, allocations{0};
};
DeviceState g_devices[kMaxDevices];
thread_local ThreadStream t_stream;  // set_thread_stream

// The stream this thread's work on `device` goes to: an external one while set, else the library's.
cudaStream_t stream_for(DeviceState& s, int device) {
  return t_stream.active && t_stream.device == device ? static_cast<cudaStream_t>(t_stream.stream) : s.stream;
}
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

// ---- graph capture state (see cuda_runtime.h). Guarded by g_graph_mutex; g_graph_memory says whether
// any of it exists, so that allocate/deallocate outside capture pay one relaxed load.
struct Block {
  void* ptr;
  int64_t nbytes;
};
struct Capture {
  int device;
  std::unordered_set<void*> allocated;  // allocated during the capture and not freed in it
  std::vector<Block> kept;              // allocated before, released during the capture
  std::vector<std::pair<cudaGraph_t, cudaGraphExec_t>> retired;  // graphs destroyed during it
};
// Destroying an executable graph is not allowed while a global-mode capture runs (it would
// invalidate the capture): graphs destroyed then are retired, and destroyed when it ends.
void destroy_retired(Capture& c) {
  for (const auto& [graph, exec] : c.retired) {
    if (exec) cudaGraphExecDestroy(exec);
    if (graph) cudaGraphDestroy(graph);
  }
  c.retired.clear();
  cudaGetLastError();
}
std::mutex g_graph_mutex;
std::unique_ptr<Capture> g_capture;
std::unordered_map<void*, CudaGraph*> g_graph_blocks;  // blocks a graph allocated and did not free
std::atomic<bool> g_graph_memory{false};
std::atomic<bool> g_capturing{false};

void update_graph_flags() {  // with g_graph_mutex held
  g_capturing.store(g_capture != nullptr);
  g_graph_memory.store(g_capture != nullptr || !g_graph_blocks.empty());
}

void free_async(void* ptr, cudaStream_t stream) {
  // No throw on a destructor path; a failure (e.g. the block of a capture that was abandoned,
  // which was never allocated) must not linger as the "last error" of a later launch check.
  if (cudaFreeAsync(ptr, stream) != cudaSuccess) cudaGetLastError();
}

}  // namespace

struct CudaGraph {
  int device = 0;
  cudaGraph_t graph = nullptr;
  cudaGraphExec_t exec = nullptr;
  std::vector<Block> kept;  // freed when the graph is destroyed
};

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

void* stream() {
  const int device = current_device();
  return stream_for(state(device), device);
}

ThreadStream set_thread_stream(ThreadStream s) {
  if (s.active) state(s.device);  // checks the device and creates its pool settings once
  const ThreadStream prev = t_stream;
  t_stream = s;
  return prev;
}

void synchronize() {
  GG_CHECK(!is_capturing(), CaptureError,
           "gg::cuda::synchronize: not allowed while a CUDA graph is being captured (the host cannot wait for "
           "work that has only been recorded); synchronize before capture() or after replay()");
  CUDA_CHECK(cudaStreamSynchronize(cuda_stream()));
}

void* allocate(size_t nbytes, int device) {
  DeviceState& s = state(device);
  void* p = nullptr;
  if (nbytes == 0) nbytes = 1;
  cudaError_t e = cudaMallocAsync(&p, nbytes, stream_for(s, device));
  if (e == cudaSuccess && g_capturing.load(std::memory_order_relaxed)) {
    std::lock_guard<std::mutex> lock(g_graph_mutex);
    if (g_capture && g_capture->device == device) g_capture->allocated.insert(p);
  }
  if (e != cudaSuccess && is_capturing()) {
    cudaGetLastError();
    throw CaptureError("gg: allocating " + std::to_string(nbytes) + " bytes on cuda:" + std::to_string(device) +
                       " failed during CUDA graph capture: " + cudaGetErrorName(e) + " (" + cudaGetErrorString(e) +
                       ")");
  }
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
  const int64_t n = static_cast<int64_t>(nbytes == 0 ? 1 : nbytes);
  s.current -= n;
  if (g_graph_memory.load(std::memory_order_acquire)) {
    std::lock_guard<std::mutex> lock(g_graph_mutex);
    auto it = g_graph_blocks.find(ptr);
    if (it != g_graph_blocks.end()) {  // a graph's own block: it is rewritten on every replay
      it->second->kept.push_back({ptr, n});
      g_graph_blocks.erase(it);
      update_graph_flags();
      return;
    }
    if (g_capture && g_capture->device == device) {
      if (g_capture->allocated.erase(ptr) == 0) {  // older than the capture: the graph may read it
        g_capture->kept.push_back({ptr, n});
        return;
      }  // else allocated in this capture: a free node
    }
  }
  free_async(ptr, stream_for(s, device));
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
  GG_CHECK(kind == CopyKind::device_to_device || !is_capturing(), CaptureError, "gg: copying ", nbytes,
           " bytes ", kind == CopyKind::host_to_device ? "from the host to the GPU" : "from the GPU to the host",
           kind == CopyKind::host_to_device ? " (e.g. .to(cuda) or from_vector on a GPU)"
                                            : " (e.g. .item(), to_vector() or .cpu())",
           " is not allowed while a CUDA graph is being captured: a replay would not repeat it; copy inputs into "
           "static GPU tensors before replay() and read outputs after it");
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

// ------------------------------------------------------------------------------ CUDA graphs

bool is_capturing() { return g_capturing.load(std::memory_order_acquire); }

void begin_capture() {
  const int device = current_device();
  DeviceState& s = state(device);
  std::lock_guard<std::mutex> lock(g_graph_mutex);
  GG_CHECK(g_capture == nullptr, CaptureError, "gg::cuda::Graph::capture: a capture is already running on cuda:",
           g_capture ? g_capture->device : -1, "; captures cannot be nested");
  // Global mode: a call elsewhere in the process that would break the capture fails instead.
  CUDA_CHECK(cudaStreamBeginCapture(s.stream, cudaStreamCaptureModeGlobal));
  g_capture = std::make_unique<Capture>();
  g_capture->device = device;
  update_graph_flags();
}

namespace {
std::unique_ptr<Capture> take_capture() {
  std::lock_guard<std::mutex> lock(g_graph_mutex);
  std::unique_ptr<Capture> c = std::move(g_capture);
  update_graph_flags();
  return c;
}
}  // namespace

CudaGraph* end_capture() {
  std::unique_ptr<Capture> c = take_capture();
  GG_CHECK(c != nullptr, CaptureError, "gg::cuda::Graph: end of a capture that is not running");
  auto g = std::make_unique<CudaGraph>();
  g->device = c->device;
  g->kept = std::move(c->kept);
  const cudaStream_t stream = state(c->device).stream;
  cudaError_t e = cudaStreamEndCapture(stream, &g->graph);
  destroy_retired(*c);
  // Blocks allocated and not freed in the graph outlive a launch; relaunching frees and
  // reallocates them at the same address, so they stay valid as the graph's static outputs.
  if (e == cudaSuccess) e = cudaGraphInstantiateWithFlags(&g->exec, g->graph, cudaGraphInstantiateFlagAutoFreeOnLaunch);
  if (e != cudaSuccess) {
    cudaGetLastError();
    destroy_graph(g.release());  // frees the kept blocks: nothing will read them
    throw CaptureError(std::string("gg::cuda::Graph::capture: the capture could not be completed: ") +
                       cudaGetErrorName(e) + " (" + cudaGetErrorString(e) + ")");
  }
  std::lock_guard<std::mutex> lock(g_graph_mutex);
  for (void* p : c->allocated) g_graph_blocks[p] = g.get();
  update_graph_flags();
  return g.release();
}

void abort_capture() noexcept {
  std::unique_ptr<Capture> c = take_capture();
  if (!c) return;
  cudaGraph_t graph = nullptr;
  if (cudaStreamEndCapture(g_devices[c->device].stream, &graph) == cudaSuccess && graph) cudaGraphDestroy(graph);
  cudaGetLastError();
  destroy_retired(*c);
  // Nothing was launched: the blocks held back can go now. Blocks the capture allocated never
  // existed; tensors still pointing at them must not be read (their free is a harmless no-op).
  for (const Block& b : c->kept) free_async(b.ptr, g_devices[c->device].stream);
}

void launch_graph(CudaGraph* graph) {
  GG_CHECK(graph != nullptr, ValueError, "gg::cuda::Graph::replay: nothing has been captured");
  GG_CHECK(!is_capturing(), CaptureError, "gg::cuda::Graph::replay: not allowed while a capture is running");
  int prev = 0;
  CUDA_CHECK(cudaGetDevice(&prev));
  if (prev != graph->device) CUDA_CHECK(cudaSetDevice(graph->device));
  const cudaError_t e = cudaGraphLaunch(graph->exec, state(graph->device).stream);
  if (prev != graph->device) cudaSetDevice(prev);
  CUDA_CHECK(e);
}

void destroy_graph(CudaGraph* graph) noexcept {
  if (graph == nullptr) return;
  std::unique_ptr<CudaGraph> g(graph);
  {
    std::lock_guard<std::mutex> lock(g_graph_mutex);
    for (auto it = g_graph_blocks.begin(); it != g_graph_blocks.end();)  // still held by tensors:
      it = it->second == graph ? g_graph_blocks.erase(it) : std::next(it);  // they free them later
    if (g_capture && g_capture->device == g->device) {
      // A free now would be recorded into the running capture: that capture keeps them instead.
      g_capture->kept.insert(g_capture->kept.end(), g->kept.begin(), g->kept.end());
      g->kept.clear();
    }
    update_graph_flags();
    if (g_capture) {  // see destroy_retired
      for (const Block& b : g->kept) free_async(b.ptr, g_devices[g->device].stream);
      g_capture->retired.emplace_back(g->graph, g->exec);
      return;
    }
  }
  // Stream-ordered after the last replay; an executable graph still running is freed by CUDA
  // when it completes.
  for (const Block& b : g->kept) free_async(b.ptr, g_devices[g->device].stream);
  if (g->exec) cudaGraphExecDestroy(g->exec);
  if (g->graph) cudaGraphDestroy(g->graph);
  cudaGetLastError();
}

}  // namespace gg::cuda::runtime
