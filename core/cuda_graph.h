// CUDA graphs: record the GPU work of a whole step once, then replay it with a single launch,
// in the manner of torch.cuda.CUDAGraph. For small steps, where launching hundreds of tiny
// kernels costs more than running them, a replay removes nearly all of the host's work.
//
//   gg::Tensor x = gg::zeros({25, 10, 1}, gg::DType::f32, gg::Device::cuda());   // static input
//   ... run the step eagerly a few times first (warm-up: cuBLAS handles, optimiser state) ...
//   gg::cuda::Graph graph;
//   const gg::TensorList& out = graph.capture([&] { return gg::grad({loss_of(x)}, params); });
//   for (...) { gg::copy_(x, next_batch.to(x.device())); graph.replay(); use(out); }
//
// Rules, as for torch.cuda.graphs:
// - capture() runs `step` once on the host with the library's stream under capture: every op
//   records its kernels instead of running them, so nothing is computed until replay(). Host
//   code in `step` (shape logic, CPU ops, the tape) runs once, at capture, never again.
// - Static inputs: a replay reads the tensors `step` read, at the same addresses. Change their
//   contents in place (copy_, fill_, an optimiser's in-place update), never rebind them.
// - Static outputs: the tensors `step` returns are kept (detached) by the graph; each replay
//   rewrites them in place. Their contents are undefined before the first replay.
// - Memory: tensors allocated inside `step` come from graph allocation nodes and are reused by
//   every replay; a tensor created before the capture and dropped inside it, or a graph's own
//   tensor dropped after it, is kept until the Graph is destroyed (a replay may still read it).
// - Not allowed inside `step` (CaptureError, a DeviceError; the capture is abandoned and nothing
//   is left half-recorded): synchronize(), host <-> GPU copies (.item(), to_vector(), .cpu(),
//   .to(cuda) of a CPU tensor), random numbers on the GPU (a replay would repeat them), nested
//   captures. Anything lazily created on first use (optimiser state, cuBLAS workspaces) must be
//   created by an eager warm-up run of the step before capture().
// - Values that live on the host, such as a learning rate or Adam's step count, are frozen into
//   the graph at capture: keep an update that depends on them (gg::optim::Adam) outside the
//   graph, or capture one whose scalars do not change (SGD with fixed lr and momentum).
#pragma once
#include <functional>
#include <memory>

#include "tensor.h"

namespace gg::cuda {

class Graph {
 public:
  Graph();
  ~Graph();  // frees the graph and the memory it kept, ordered after its last replay
  Graph(Graph&& other) noexcept;
  Graph& operator=(Graph&& other) noexcept;
  Graph(const Graph&) = delete;
  Graph& operator=(const Graph&) = delete;

  // Captures `step` on the current CUDA device (dropping any earlier capture of this Graph) and
  // returns its outputs, which must be tensors on that device. Throws CaptureError for a call
  // that cannot be captured, DeviceError without a usable GPU; the exception `step` throws is
  // passed on after the capture is abandoned.
  const TensorList& capture(const std::function<TensorList()>& step);
  // Launches the captured work on the library stream (asynchronous, like any kernel).
  void replay();
  const TensorList& outputs() const;  // the static outputs (empty before capture)
  bool captured() const;
  void reset();  // back to the empty state

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

bool is_capturing();  // a Graph::capture is running in this process

}  // namespace gg::cuda
