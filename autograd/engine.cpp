// The engine: finds the part of the tape between the outputs and the wanted inputs, then runs
// each node's backward once all gradients for its outputs have arrived (Kahn's algorithm with
// later-recorded nodes first). Walks are iterative, so long tapes cannot overflow the stack.
#include "autograd/engine.h"

#include <algorithm>
#include <queue>
#include <unordered_map>

#include "autograd/grad_mode.h"
#include "autograd/node.h"
#include "ops/ops.h"

namespace gg {
namespace {

struct Capture {
  Node* node;
  uint32_t nr;
  size_t input_index;
};

struct Graph {
  std::vector<Node*> nodes;  // discovery order
  std::unordered_map<Node*, size_t> index;
  std::vector<size_t> postorder;  // children before parents
};

Graph discover(const std::vector<Edge>& roots) {
  Graph g;
  std::vector<std::pair<Node*, size_t>> stack;  // (node, next child to visit)
  auto visit = [&](Node* n) {
    if (g.index.count(n)) return false;
    g.index[n] = g.nodes.size();
    g.nodes.push_back(n);
    stack.emplace_back(n, 0);
    return true;
  };
  for (const Edge& r : roots) {
    if (!r.valid() || !visit(r.node.get())) continue;
    while (!stack.empty()) {
      auto& [n, child] = stack.back();
      if (child < n->next_edges.size()) {
        const Edge& e = n->next_edges[child++];
        if (e.valid()) visit(e.node.get());
      } else {
        g.postorder.push_back(g.index[n]);
        stack.pop_back();
      }
    }
  }
  return g;
}

Tensor accumulate(const Tensor& acc, const Tensor& g) { return acc.defined() ? acc + g : g; }

void check_grad(const Tensor& g, const TensorMeta& meta, const char* what, const char* node) {
  GG_CHECK(g.shape() == meta.shape, ShapeError, "gg::", what, ": gradient for '", node, "' has shape ",
           shape_str(g.shape()), ", expected ", shape_str(meta.shape));
  GG_CHECK(g.dtype() == meta.dtype, DTypeError, "gg::", what, ": gradient for '", node, "' has dtype ",
           dtype_name(g.dtype()), ", expected ", dtype_name(meta.dtype));
  GG_CHECK(g.device() == meta.device, DeviceError, "gg::", what, ": gradient for '", node,
           "' is on ", g.device().str(), ", expected ", meta.device.str());
}

// Runs the backward. With `inputs` non-empty, returns the gradients arriving at them and runs
// no AccumulateGrad; otherwise accumulates into every reachable leaf's .grad().
TensorList run_backward(const char* what, const TensorList& outputs, const TensorList& grad_outputs,
                        const TensorList& inputs, bool keep_graph, bool create_graph, bool allow_unused) {
  GG_CHECK(grad_outputs.empty() || grad_outputs.size() == outputs.size(), ValueError, "gg::", what,
           ": got ", outputs.size(), " outputs but ", grad_outputs.size(), " grad_outputs");
  std::vector<Edge> roots;
  TensorList root_grads;
  for (size_t i = 0; i < outputs.size(); ++i) {
    const Tensor& y = outputs[i];
    GG_CHECK(y.defined(), ValueError, "gg::", what, ": output ", i, " is undefined");
    GG_CHECK(y.requires_grad(), AutogradError, "gg::", what, ": output ", i, " (shape ", shape_str(y.shape()),
             ") does not require grad and has no grad_fn: none of the tensors it was computed from "
             "requires grad, or it was computed under NoGradGuard");
    Tensor gy = grad_outputs.empty() ? Tensor() : grad_outputs[i];
    if (!gy.defined()) {
      GG_CHECK(y.numel() == 1, ValueError, "gg::", what, ": grad can be implicitly created only for one-element "
               "outputs, but output ", i, " has shape ", shape_str(y.shape()), "; pass grad_outputs");
      gy = ones_like(y);
    } else {
      GG_CHECK(gy.shape() == y.shape(), ShapeError, "gg::", what, ": grad_outputs[", i, "] has shape ",
               shape_str(gy.shape()), " but output ", i, " has shape ", shape_str(y.shape()));
      GG_CHECK(gy.dtype() == y.dtype(), DTypeError, "gg::", what, ": grad_outputs[", i, "] has dtype ",
               dtype_name(gy.dtype()), " but output ", i, " has dtype ", dtype_name(y.dtype()));
    }
    roots.push_back(gradient_edge(y));
    root_grads.push_back(gy);
  }

  std::vector<Capture> captures;
  std::vector<std::shared_ptr<Node>> keep_alive;  // accumulators created just for lookup
  for (size_t i = 0; i < inputs.size(); ++i) {
    GG_CHECK(inputs[i].defined(), ValueError, "gg::", what, ": input ", i, " is undefined");
    GG_CHECK(inputs[i].requires_grad(), AutogradError, "gg::", what, ": input ", i, " (shape ",
             shape_str(inputs[i].shape()), ") does not require grad; call requires_grad_() on it first");
    Edge e = gradient_edge(inputs[i]);
    keep_alive.push_back(e.node);
    captures.push_back({e.node.get(), e.input_nr, i});
  }
  const bool capture_mode = !inputs.empty();

  Graph g = discover(roots);
  const size_t n = g.nodes.size();
  std::vector<char> is_capture(n, 0), needed(n, 0), exec(n, 0);
  for (const Capture& c : captures) {
    auto it = g.index.find(c.node);
    if (it != g.index.end()) is_capture[it->second] = 1;
  }
  // needed: some wanted gradient lies at or below this node. exec: run its backward.
  for (size_t idx : g.postorder) {
    Node* node = g.nodes[idx];
    bool child_needed = false;
    for (const Edge& e : node->next_edges)
      if (e.valid() && needed[g.index[e.node.get()]]) child_needed = true;
    bool is_acc = dynamic_cast<AccumulateGrad*>(node) != nullptr;
    if (capture_mode) {
      needed[idx] = is_capture[idx] || child_needed;
      exec[idx] = child_needed && !is_acc;
    } else {
      needed[idx] = 1;
      exec[idx] = 1;
    }
  }
  std::vector<int> deps(n, 0);
  for (size_t i = 0; i < n; ++i) {
    if (!exec[i]) continue;
    for (const Edge& e : g.nodes[i]->next_edges)
      if (e.valid() && needed[g.index[e.node.get()]]) ++deps[g.index[e.node.get()]];
  }

  std::vector<TensorList> buffers(n);
  for (size_t i = 0; i < n; ++i) buffers[i].resize(g.nodes[i]->outputs.size());
  AutoGradMode mode(create_graph);
  // Nodes recorded during this pass (the backward ops and the sums of incoming gradients) sit
  // one level above the deepest node differentiated: 1 for a first backward, 2 for a backward
  // of a backward, and so on.
  int level = 0;
  for (Node* node : g.nodes) level = std::max(level, node->level + 1);
  struct LevelGuard {
    int saved = detail::current_backward_level();
    explicit LevelGuard(int l) { detail::set_backward_level(l); }
    ~LevelGuard() { detail::set_backward_level(saved); }
  } level_guard(level);
  for (size_t r = 0; r < roots.size(); ++r) {
    if (!roots[r].valid()) continue;
    size_t idx = g.index[roots[r].node.get()];
    Tensor& slot = buffers[idx][roots[r].input_nr];
    slot = accumulate(slot, root_grads[r]);
  }

  auto later_first = [&](size_t a, size_t b) { return g.nodes[a]->sequence_nr < g.nodes[b]->sequence_nr; };
  std::priority_queue<size_t, std::vector<size_t>, decltype(later_first)> ready(later_first);
  for (size_t i = 0; i < n; ++i)
    if (needed[i] && deps[i] == 0) ready.push(i);

  TensorList result(inputs.size());
  std::vector<char> reached(inputs.size(), 0);
  while (!ready.empty()) {
    size_t idx = ready.top();
    ready.pop();
    Node* node = g.nodes[idx];
    TensorList& buf = buffers[idx];
    if (is_capture[idx])
      for (const Capture& c : captures)
        if (c.node == node) {
          result[c.input_index] = buf[c.nr];
          reached[c.input_index] = 1;
        }
    if (!exec[idx]) continue;

    bool any = false;
    for (const Tensor& t : buf) any = any || t.defined();
    TensorList in_grads;
    if (any) {
      for (size_t k = 0; k < buf.size(); ++k)
        if (node->materialize_grads && !buf[k].defined()) {
          const TensorMeta& m = node->outputs[k];
          buf[k] = zeros(m.shape, m.dtype, m.device);
        }
      std::vector<bool> needs(node->next_edges.size());
      for (size_t k = 0; k < needs.size(); ++k) {
        const Edge& e = node->next_edges[k];
        needs[k] = e.valid() && needed[g.index[e.node.get()]];
      }
      in_grads = node->apply(buf, needs);
      GG_CHECK(in_grads.size() == node->next_edges.size(), AutogradError, "gg::", what, ": backward of '",
               node->name(), "' returned ", in_grads.size(), " gradients for ", node->next_edges.size(), " inputs");
    }
    buf.clear();
    if (!keep_graph) node->release_saved();
    for (size_t k = 0; k < node->next_edges.size(); ++k) {
      const Edge& e = node->next_edges[k];
      if (!e.valid()) continue;
      size_t child = g.index[e.node.get()];
      if (!needed[child]) continue;
      if (any && in_grads[k].defined()) {
        check_grad(in_grads[k], e.node->outputs[e.input_nr], what, node->name());
        Tensor& slot = buffers[child][e.input_nr];
        slot = accumulate(slot, in_grads[k]);
      }
      if (--deps[child] == 0) ready.push(child);
    }
  }

  for (size_t i = 0; i < inputs.size(); ++i) {
    if (reached[i] && result[i].defined()) continue;
    GG_CHECK(allow_unused, AutogradError, "gg::", what, ": input ", i, " (shape ", shape_str(inputs[i].shape()),
             ") was not used to compute the outputs; pass allow_unused=true if that is intended");
    result[i] = Tensor();
  }
  return result;
}

}  // namespace


TensorList AccumulateGrad::apply(const TensorList& grads, const std::vector<bool>&) {
  Tensor g = grads[0];
  Tensor old(leaf->grad);
  Tensor updated;
  if (GradMode::is_enabled()) updated = old.defined() ? old + g : g;        // create_graph: keep history
  else updated = old.defined() ? old + g : clone(g);                         // own copy, no history
  leaf->grad = updated.impl_ptr();
  return {};
}

TensorList grad(const TensorList& outputs, const TensorList& inputs, const TensorList& grad_outputs,
                const GradOptions& o) {
  GG_CHECK(!inputs.empty(), ValueError, "gg::grad: no inputs given");
  bool keep = o.retain_graph < 0 ? o.create_graph : o.retain_graph != 0;
  return run_backward("grad", outputs, grad_outputs, inputs, keep, o.create_graph, o.allow_unused);
}

Tensor grad(const Tensor& output, const Tensor& input, const Tensor& grad_output, const GradOptions& o) {
  return grad(TensorList{output}, TensorList{input},
              grad_output.defined() ? TensorList{grad_output} : TensorList{}, o)[0];
}

void Tensor::backward(const Tensor& gradient, bool create_graph, int retain_graph) const {
  bool keep = retain_graph < 0 ? create_graph : retain_graph != 0;
  run_backward("backward", {*this}, gradient.defined() ? TensorList{gradient} : TensorList{}, {}, keep,
               create_graph, false);
}

}  // namespace gg
