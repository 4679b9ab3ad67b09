#include "core/cuda_graph.h"

#include <utility>

#include "core/error.h"

#ifdef GG_HAS_CUDA
#include "core/cuda_runtime.h"
#endif

namespace gg::cuda {

#ifdef GG_HAS_CUDA
using GraphHandle = cuda::runtime::CudaGraph;
#else
struct GraphHandle;
#endif

struct Graph::Impl {
  GraphHandle* graph = nullptr;
  TensorList outputs;
  int device = 0;
};

Graph::Graph() : impl_(std::make_unique<Impl>()) {}
Graph::~Graph() { reset(); }
Graph::Graph(Graph&& other) noexcept : impl_(std::exchange(other.impl_, std::make_unique<Impl>())) {}
Graph& Graph::operator=(Graph&& other) noexcept {
  if (this != &other) {
    reset();
    std::swap(impl_, other.impl_);
  }
  return *this;
}

const TensorList& Graph::outputs() const { return impl_->outputs; }
bool Graph::captured() const { return impl_->graph != nullptr; }

#ifdef GG_HAS_CUDA

void Graph::reset() {
  // Outputs first: their blocks then return to the graph, which frees them with itself.
  impl_->outputs.clear();
  cuda::runtime::destroy_graph(std::exchange(impl_->graph, nullptr));
}

const TensorList& Graph::capture(const std::function<TensorList()>& step) {
  GG_CHECK(static_cast<bool>(step), ValueError, "gg::cuda::Graph::capture: step is an empty function");
  reset();
  const int device = cuda::runtime::current_device();
  cuda::runtime::begin_capture();
  TensorList outputs;
  try {
    // `result` (and with it the tape behind the outputs) dies inside the capture, so the memory
    // only the tape used is freed inside the graph and reused by later allocations in it.
    const TensorList result = step();
    for (size_t i = 0; i < result.size(); ++i) {
      const Tensor& t = result[i];
      GG_CHECK(!t.defined() || t.device() == Device::cuda(device), ValueError, "gg::cuda::Graph::capture: output ",
               i, " is on ", t.device().str(), "; only tensors on cuda:", device,
               " (the capture's device) are recomputed by replay()");
      outputs.push_back(t.defined() ? t.detach() : t);
    }
  } catch (...) {
    cuda::runtime::abort_capture();
    throw;
  }
  impl_->graph = cuda::runtime::end_capture();
  impl_->device = device;
  impl_->outputs = std::move(outputs);
  return impl_->outputs;
}

void Graph::replay() {
  GG_CHECK(impl_->graph != nullptr, ValueError, "gg::cuda::Graph::replay: nothing has been captured");
  cuda::runtime::launch_graph(impl_->graph);
}

bool is_capturing() { return cuda::runtime::is_capturing(); }

#else

namespace {
[[noreturn]] void no_cuda(const char* what) {
  throw DeviceError(std::string("gg::cuda::Graph::") + what +
                    ": this build of gradgrad has no CUDA backend (GG_CUDA=OFF or no nvcc at configure time)");
}
}  // namespace

void Graph::reset() { impl_->outputs.clear(); }
const TensorList& Graph::capture(const std::function<TensorList()>&) { no_cuda("capture"); }
void Graph::replay() { no_cuda("replay"); }
bool is_capturing() { return false; }

#endif

}  // namespace gg::cuda
