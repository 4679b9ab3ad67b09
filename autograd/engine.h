// Reverse-mode differentiation over the tape.
#pragma once
#include <cstddef>
#include <functional>
#include <initializer_list>
#include <optional>

#include "../core/tensor.h"

namespace gg {

// The options of gg::grad by name, for callers that set them one at a time or need
// on_gradient. Not an aggregate (it has a constructor), so a braced list cannot fill its fields
// by position: positional arguments follow libtorch's order in the overloads below instead.
struct GradOptions {
  GradOptions() {}
  std::optional<bool> retain_graph;  // keep saved tensors for another pass; unset: create_graph
  bool create_graph = false;         // record the backward so it can be differentiated again
  bool allow_unused = false;         // an input the outputs do not depend on gets an undefined tensor
  // Called once per input, in the pass, as soon as that input's gradient is complete (with the
  // input's index and the gradient grad will return for it; undefined for an unused input, once
  // the pass has ended): work on early gradients can start while the backward goes on, as
  // dist::grad_all_reduce starts its all-reduces. Not called for Tensor::backward.
  std::function<void(size_t input, const Tensor& gradient)> on_gradient = nullptr;
};

// Gradients of sum_i <grad_outputs[i], outputs[i]> with respect to each input.
// grad_outputs may be empty (or hold undefined tensors) for one-element outputs: 1 is used.
// Positional arguments in libtorch's order (torch::autograd::grad): retain_graph (unset: the
// value of create_graph), create_graph, allow_unused.
TensorList grad(const TensorList& outputs, const TensorList& inputs, const TensorList& grad_outputs = {},
                std::optional<bool> retain_graph = std::nullopt, bool create_graph = false,
                bool allow_unused = false);
TensorList grad(const TensorList& outputs, const TensorList& inputs, const TensorList& grad_outputs,
                const GradOptions& options);

// One output, one input: grad(y, x) with plain tensors returns one Tensor.
Tensor grad(const Tensor& output, const Tensor& input, const Tensor& grad_output = Tensor(),
            std::optional<bool> retain_graph = std::nullopt, bool create_graph = false, bool allow_unused = false);
Tensor grad(const Tensor& output, const Tensor& input, const Tensor& grad_output, const GradOptions& options);

// Braced lists, as written with libtorch: grad({y}, {x})[0], grad({o}, {q, k, v}, {dO}, {}, true).
// Without these overloads a one-element list {y} would select the Tensor form above (a braced
// list of one Tensor converts to Tensor exactly, to TensorList only through a constructor);
// a std::initializer_list parameter is preferred over both, so any braced list is a list.
// Mixing a braced list with a TensorList variable selects the TensorList form.
inline TensorList grad(std::initializer_list<Tensor> outputs, std::initializer_list<Tensor> inputs,
                       std::initializer_list<Tensor> grad_outputs = {},
                       std::optional<bool> retain_graph = std::nullopt, bool create_graph = false,
                       bool allow_unused = false) {
  return grad(TensorList(outputs), TensorList(inputs), TensorList(grad_outputs), retain_graph, create_graph,
              allow_unused);
}
inline TensorList grad(std::initializer_list<Tensor> outputs, std::initializer_list<Tensor> inputs,
                       std::initializer_list<Tensor> grad_outputs, const GradOptions& options) {
  return grad(TensorList(outputs), TensorList(inputs), TensorList(grad_outputs), options);
}

}  // namespace gg
