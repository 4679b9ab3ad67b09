// Reverse-mode differentiation over the tape.
#pragma once
#include "core/tensor.h"

namespace gg {

struct GradOptions {
  bool create_graph = false;  // record the backward so it can be differentiated again
  int retain_graph = -1;      // keep saved tensors for another pass; -1: same as create_graph
  bool allow_unused = false;  // an input the outputs do not depend on gets an undefined tensor
};

// Gradients of sum_i <grad_outputs[i], outputs[i]> with respect to each input.
// grad_outputs may be empty (or hold undefined tensors) for one-element outputs: 1 is used.
TensorList grad(const TensorList& outputs, const TensorList& inputs,
                const TensorList& grad_outputs = {}, const GradOptions& options = {});

// One output, one input.
Tensor grad(const Tensor& output, const Tensor& input, const Tensor& grad_output = Tensor(),
            const GradOptions& options = {});

}  // namespace gg
