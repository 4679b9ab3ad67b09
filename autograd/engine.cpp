// The engine: finds the part of the tape between the outputs and the wanted inputs, then runs
// each node's backward once all gradients for its outputs have arrived (Kahn's algorithm with
// later-recorded nodes first). run_backward, at the bottom of the anonymous namespace, reads as
// the list of steps; each step is a function above it. Every walk is iterative, so a long tape
// cannot overflow the stack.
#include "autograd/engine.h"

#include <algorithm>
#include <queue>
#include <unordered_map>

#include "autograd/grad_mode.h"
#include "autograd/node.h"
#include "ops/ops.h"

namespace gg {
namespace {

// ---------------------------------------------------------------- step 1: outputs and inputs

// Where the backward starts: the outputs' edges and the gradient fed into each (1 for a
// one-element output when none is given).
struct Roots {
  std::vector<Edge> edges;
  TensorList grads;
};

Roots check_outputs(const char* what, const TensorList& outputs, const TensorList& grad_outputs) {
  GG_CHECK(grad_outputs.empty() || grad_outputs.size() == outputs.size(), ValueError, "gg::", what,
           ": got ", outputs.size(), " outputs but ", grad_outputs.size(), " grad_outputs");
  Roots roots;
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
    roots.edges.push_back(gradient_edge(y));
    roots.grads.push_back(gy);
  }
  return roots;
}

// gg::grad's inputs: the gradient for input `input_index` is whatever arrives at output `nr`
// of `node` (the input's grad_fn, or its leaf accumulator).
struct Capture {
  Node* node;
  uint32_t nr;
  size_t input_index;
};

struct Captures {
  std::vector<Capture> list;
  std::vector<std::shared_ptr<Node>> keep_alive;  // accumulators created just for lookup
};

Captures check_inputs(const char* what, const TensorList& inputs) {
  Captures c;
  for (size_t i = 0; i < inputs.size(); ++i) {
    GG_CHECK(inputs[i].defined(), ValueError, "gg::", what, ": input ", i, " is undefined");
    GG_CHECK(inputs[i].requires_grad(), AutogradError, "gg::", what, ": input ", i, " (shape ",
             shape_str(inputs[i].shape()), ") does not require grad; call requires_grad_() on it first");
    Edge e = gradient_edge(inputs[i]);
    c.keep_alive.push_back(e.node);
    c.list.push_back({e.node.get(), e.input_nr, i});
  }
  return c;
}

// ---------------------------------------------------------------- step 2: collect the graph

struct Graph {
  std::vector<Node*> nodes;  // discovery order
  std::unordered_map<Node*, size_t> index;
  std::vector<size_t> postorder;  // children before parents
  size_t at(const Edge& e) const { return index.at(e.node.get()); }
};

// Every node reachable from the roots, by an explicit-stack depth-first walk.
Graph collect_graph(const std::vector<Edge>& roots) {
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

// ---------------------------------------------------------------- step 3: count dependencies

// Per node (indexed like Graph::nodes): needed = some wanted gradient lies at or below it;
// exec = run its backward; capture = a gg::grad input's gradient arrives here; deps = how many
// executed nodes still have to send it a gradient before it is ready.
struct Plan {
  std::vector<char> needed, exec, capture;
  std::vector<int> deps;
  bool wants(const Graph& g, const Edge& e) const { return e.valid() && needed[g.at(e)]; }
};

// With captures (gg::grad), only the nodes between the outputs and the inputs run, and no
// AccumulateGrad does; without (Tensor::backward), everything reachable runs.
Plan count_dependencies(const Graph& g, const std::vector<Capture>& captures) {
  const size_t n = g.nodes.size();
  const bool capture_mode = !captures.empty();
  Plan p{std::vector<char>(n, 0), std::vector<char>(n, 0), std::vector<char>(n, 0), std::vector<int>(n, 0)};
  for (const Capture& c : captures) {
    auto it = g.index.find(c.node);
    if (it != g.index.end()) p.capture[it->second] = 1;
  }
  for (size_t idx : g.postorder) {  // children first, so `needed` is known below each node
    Node* node = g.nodes[idx];
    bool child_needed = false;
    for (const Edge& e : node->next_edges) child_needed = child_needed || p.wants(g, e);
    const bool is_acc = dynamic_cast<AccumulateGrad*>(node) != nullptr;
    p.needed[idx] = !capture_mode || p.capture[idx] || child_needed;
    p.exec[idx] = !capture_mode || (child_needed && !is_acc);
  }
  for (size_t i = 0; i < n; ++i) {
    if (!p.exec[i]) continue;
    for (const Edge& e : g.nodes[i]->next_edges)
      if (p.wants(g, e)) ++p.deps[g.at(e)];
  }
  return p;
}

// ---------------------------------------------------------------- step 4: seed

Tensor accumulate(const Tensor& acc, const Tensor& g) { return acc.defined() ? acc + g : g; }

// One slot per output of every node, for the gradients arriving there; the roots' slots get
// the output gradients.
std::vector<TensorList> seed(const Graph& g, const Roots& roots) {
  std::vector<TensorList> buffers(g.nodes.size());
  for (size_t i = 0; i < g.nodes.size(); ++i) buffers[i].resize(g.nodes[i]->outputs.size());
  for (size_t r = 0; r < roots.edges.size(); ++r) {
    if (!roots.edges[r].valid()) continue;
    Tensor& slot = buffers[g.at(roots.edges[r])][roots.edges[r].input_nr];
    slot = accumulate(slot, roots.grads[r]);
  }
  return buffers;
}

// Nodes recorded during this pass (the backward ops and the sums of incoming gradients) sit one
// level above the deepest node differentiated: 1 for a first backward, 2 for a backward of a
// backward, and so on.
class BackwardLevel {
 public:
  explicit BackwardLevel(const Graph& g) : saved_(detail::current_backward_level()) {
    int level = 0;
    for (Node* node : g.nodes) level = std::max(level, node->level + 1);
    detail::set_backward_level(level);
  }
  ~BackwardLevel() { detail::set_backward_level(saved_); }
  BackwardLevel(const BackwardLevel&) = delete;
  BackwardLevel& operator=(const BackwardLevel&) = delete;

 private:
  int saved_;
};

// ---------------------------------------------------------------- step 5: run one node

void check_grad(const Tensor& g, const TensorMeta& meta, const char* what, const char* node) {
  GG_CHECK(g.shape() == meta.shape, ShapeError, "gg::", what, ": gradient for '", node, "' has shape ",
           shape_str(g.shape()), ", expected ", shape_str(meta.shape));
  GG_CHECK(g.dtype() == meta.dtype, DTypeError, "gg::", what, ": gradient for '", node, "' has dtype ",
           dtype_name(g.dtype()), ", expected ", dtype_name(meta.dtype));
  GG_CHECK(g.device() == meta.device, DeviceError, "gg::", what, ": gradient for '", node,
           "' is on ", g.device().str(), ", expected ", meta.device.str());
}

// Calls the node's backward on the gradients of its outputs (missing ones as zeros, unless the
// node asks otherwise). Returns one gradient per input, or nothing when no gradient arrived at
// all (then its inputs get none from it either).
TensorList apply_node(const char* what, Node* node, TensorList& buf, const Graph& g, const Plan& plan) {
  bool any = false;
  for (const Tensor& t : buf) any = any || t.defined();
  if (!any) return {};
  for (size_t k = 0; k < buf.size(); ++k)
    if (node->materialize_grads && !buf[k].defined()) {
      const TensorMeta& m = node->outputs[k];
      buf[k] = zeros(m.shape, m.dtype, m.device);
    }
  std::vector<bool> needs(node->next_edges.size());
  for (size_t k = 0; k < needs.size(); ++k) needs[k] = plan.wants(g, node->next_edges[k]);
  TensorList in_grads = node->apply(buf, needs);
  GG_CHECK(in_grads.size() == node->next_edges.size(), AutogradError, "gg::", what, ": backward of '",
           node->name(), "' returned ", in_grads.size(), " gradients for ", node->next_edges.size(), " inputs");
  return in_grads;
}

// ---------------------------------------------------------------- step 7: accumulate into inputs

// Adds each input gradient into the slot of the node that produced that input, and hands back
// the nodes that have now heard from everything above them.
template <typename Ready>
void send_to_inputs(const char* what, Node* node, const TensorList& in_grads, const Graph& g, Plan& plan,
                    std::vector<TensorList>& buffers, Ready& ready) {
  for (size_t k = 0; k < node->next_edges.size(); ++k) {
    const Edge& e = node->next_edges[k];
    if (!plan.wants(g, e)) continue;
    const size_t child = g.at(e);
    if (!in_grads.empty() && in_grads[k].defined()) {
      check_grad(in_grads[k], e.node->outputs[e.input_nr], what, node->name());
      Tensor& slot = buffers[child][e.input_nr];
      slot = accumulate(slot, in_grads[k]);
    }
    if (--plan.deps[child] == 0) ready.push(child);
  }
}

// ---------------------------------------------------------------- step 5b: retained grads

// The sum a gradient slot keeps across passes (a leaf's, or a retained non-leaf's grad()): with
// create_graph the sum stays on the tape; without, it is a constant with storage of its own.
Tensor add_into_grad(const Tensor& old, const Tensor& g) {
  if (GradMode::is_enabled()) return old.defined() ? old + g : g;
  return old.defined() ? old + g : clone(g);
}

// Tensor::backward only: the gradients that arrived at outputs whose tensors called retain_grad.
void keep_retained_grads(Node* node, const TensorList& buf) {
  for (const Node::RetainedGrad& r : node->retained_grads) {
    const std::shared_ptr<TensorImpl> t = r.tensor.lock();
    if (!t || !buf[r.nr].defined()) continue;
    t->grad = add_into_grad(Tensor(t->grad), buf[r.nr]).impl_ptr();
  }
}

// ---------------------------------------------------------------- the pass

// Runs the backward. With `inputs` non-empty, returns the gradients arriving at them and runs
// no AccumulateGrad; otherwise accumulates into every reachable leaf's .grad().
TensorList run_backward(const char* what, const TensorList& outputs, const TensorList& grad_outputs,
                        const TensorList& inputs, bool keep_graph, bool create_graph, bool allow_unused,
                        const std::function<void(size_t, const Tensor&)>& on_gradient = {}) {
  // 1. What to differentiate, and with respect to what.
  const Roots roots = check_outputs(what, outputs, grad_outputs);
  const Captures captures = check_inputs(what, inputs);

  // 2-3. The part of the tape that matters, and how many gradients each node waits for.
  const Graph g = collect_graph(roots.edges);
  Plan plan = count_dependencies(g, captures.list);

  // GRAD OF GRAD: the backward runs with grad mode = create_graph. With it on, each node's
  // backward (written in gg ops) is recorded as new nodes, so the gradients this pass returns
  // are on the tape and a later grad differentiates through them. Nothing else is needed.
  AutoGradMode record_backward(create_graph);  // <-- the line that makes grad-of-grad work
  BackwardLevel level(g);

  // 4. Seed the outputs' gradients.
  std::vector<TensorList> buffers = seed(g, roots);

  // 5-7. The ready queue: a node runs once every node above it has sent its gradient; among
  // ready nodes the latest recorded runs first.
  auto later_first = [&](size_t a, size_t b) { return g.nodes[a]->sequence_nr < g.nodes[b]->sequence_nr; };
  std::priority_queue<size_t, std::vector<size_t>, decltype(later_first)> ready(later_first);
  for (size_t i = 0; i < g.nodes.size(); ++i)
    if (plan.needed[i] && plan.deps[i] == 0) ready.push(i);

  TensorList result(inputs.size());
  std::vector<char> reached(inputs.size(), 0);
  while (!ready.empty()) {
    const size_t idx = ready.top();
    ready.pop();
    Node* node = g.nodes[idx];
    TensorList& buf = buffers[idx];
    if (plan.capture[idx])  // a gg::grad input: its gradient is complete now
      for (const Capture& c : captures.list)
        if (c.node == node) {
          result[c.input_index] = buf[c.nr];
          reached[c.input_index] = 1;
          if (on_gradient && result[c.input_index].defined()) on_gradient(c.input_index, result[c.input_index]);
        }
    if (!plan.exec[idx]) continue;
    if (inputs.empty()) keep_retained_grads(node, buf);

    const TensorList in_grads = apply_node(what, node, buf, g, plan);  // 5. run its backward
    buf.clear();
    if (!keep_graph) node->release_saved();                            // 6. release saved tensors
    send_to_inputs(what, node, in_grads, g, plan, buffers, ready);     // 7. accumulate into inputs
  }

  // 8. Inputs no gradient reached.
  for (size_t i = 0; i < inputs.size(); ++i) {
    if (reached[i] && result[i].defined()) continue;
    GG_CHECK(allow_unused, AutogradError, "gg::", what, ": input ", i, " (shape ", shape_str(inputs[i].shape()),
             ") was not used to compute the outputs; pass allow_unused=true if that is intended");
    result[i] = Tensor();
  }
  if (on_gradient)
    for (size_t i = 0; i < inputs.size(); ++i)
      if (!result[i].defined()) on_gradient(i, result[i]);
  return result;
}

}  // namespace


TensorList AccumulateGrad::apply(const TensorList& grads, const std::vector<bool>&) {
  leaf->grad = add_into_grad(Tensor(leaf->grad), grads[0]).impl_ptr();
  return {};
}

TensorList grad(const TensorList& outputs, const TensorList& inputs, const TensorList& grad_outputs,
                const GradOptions& o) {
  GG_CHECK(!inputs.empty(), ValueError, "gg::grad: no inputs given");
  const bool keep = o.retain_graph.value_or(o.create_graph);
  return run_backward("grad", outputs, grad_outputs, inputs, keep, o.create_graph, o.allow_unused, o.on_gradient);
}

TensorList grad(const TensorList& outputs, const TensorList& inputs, const TensorList& grad_outputs,
                std::optional<bool> retain_graph, bool create_graph, bool allow_unused) {
  GradOptions o;
  o.retain_graph = retain_graph;
  o.create_graph = create_graph;
  o.allow_unused = allow_unused;
  return grad(outputs, inputs, grad_outputs, o);
}

Tensor grad(const Tensor& output, const Tensor& input, const Tensor& grad_output, const GradOptions& o) {
  return grad(TensorList{output}, TensorList{input},
              grad_output.defined() ? TensorList{grad_output} : TensorList{}, o)[0];
}

Tensor grad(const Tensor& output, const Tensor& input, const Tensor& grad_output, std::optional<bool> retain_graph,
            bool create_graph, bool allow_unused) {
  GradOptions o;
  o.retain_graph = retain_graph;
  o.create_graph = create_graph;
  o.allow_unused = allow_unused;
  return grad(output, input, grad_output, o);
}

void Tensor::retain_grad() const {
  GG_CHECK(requires_grad(), AutogradError, "gg::Tensor::retain_grad: the tensor (shape ", shape_str(shape()),
           ") does not require grad, so no gradient reaches it");
  if (is_leaf()) return;  // a leaf keeps its gradient anyway
  for (const Node::RetainedGrad& r : grad_fn()->retained_grads)
    if (r.nr == output_nr() && r.tensor.lock() == impl_ptr()) return;
  grad_fn()->retained_grads.push_back({output_nr(), impl_ptr()});
}

void Tensor::backward(const Tensor& gradient, std::optional<bool> retain_graph, bool create_graph) const {
  run_backward("backward", {*this}, gradient.defined() ? TensorList{gradient} : TensorList{}, {},
               retain_graph.value_or(create_graph), create_graph, false);
}

}  // namespace gg
