// gg::to_dot: draws the tape behind some tensors as a Graphviz DOT digraph.
//
// Every Node reachable from the roots' grad_fn becomes one box labelled with its op name and
// output shape(s); leaves (AccumulateGrad) become ellipses labelled with their shape and, when
// given, a name. Arrows run from input to consumer (the reverse of next_edges), so the picture
// reads like the computation. Nodes are coloured by the pass that recorded them:
//
//   level 0   forward                 blue
//   level 1   backward                amber
//   level ≥ 2 backward of a backward  violet   (only a tape that records its own backward has these)
//   tangent   a JVP rule's ops        teal     (forward mode, autograd/forward_ad.h: the tangent's
//                                              computation, recorded when its inputs require grad;
//                                              in its level's cluster, tooltip and class say both)
//
// Render with:  dot -Tsvg graph.dot -o graph.svg   (or -Tpng). See examples/graph/main.cpp.
#pragma once
#include <string>
#include <utility>
#include <vector>

#include "../core/tensor.h"

namespace gg {

struct DotOptions {
  // Names to print in the picture. A leaf's name labels its ellipse; a non-leaf's name is added
  // to the box of the node that produced it (e.g. {loss, "loss"}). Matched by identity
  // (Tensor::is_same), so name the very handles you computed with.
  std::vector<std::pair<Tensor, std::string>> names;
  std::string title;           // caption above the legend; empty: none
  bool left_to_right = false;  // rankdir=LR instead of top to bottom
  bool cluster_levels = true;  // frame each level in its own subgraph cluster_k
  bool legend = true;          // a key to the colours, under the graph
  bool show_dtype = false;     // append the dtype (and the device, when not cpu) to shapes
};

// The DOT text for the tape behind `roots` (roots that do not require grad have no tape and
// are skipped). The walk is iterative, so long tapes are fine, and the text depends only on the
// graph's structure (nodes are numbered in creation order), never on addresses: the same
// computation gives the same text.
std::string to_dot(const TensorList& roots, const DotOptions& options = {});

}  // namespace gg
