// The tape. Every recorded op makes one Node; its edges point at the nodes that produced its
// inputs (or at the AccumulateGrad node of a leaf). A node's backward is written in gg ops, so
// when the engine runs it with grad mode on (create_graph) the backward itself is recorded
// as new nodes, which can be differentiated again.
#pragma once
#include <atomic>
#include <cstdint>
#include <functional>
#include <initializer_list>
#include <memory>
#include <string>
#include <type_traits>
#include <vector>

#include "../core/tensor.h"

namespace gg {

class Node;

struct Edge {
  std::shared_ptr<Node> node;  // null: this input needs no gradient
  uint32_t input_nr = 0;       // which output of `node` the gradient is for
  bool valid() const { return node != nullptr; }
};

// Shape, dtype and device of one output, so a missing gradient can be materialised as zeros.
struct TensorMeta {
  Shape shape;
  DType dtype;
  Device device;
};

class Node : public std::enable_shared_from_this<Node> {
 public:
  Node();
  // Frees the graph below this node iteratively: a long tape must not recurse once per node.
  virtual ~Node();
  Node(const Node&) = delete;
  Node& operator=(const Node&) = delete;

  // grads[i] is the gradient for output i (zeros when none arrived, or undefined if the node
  // was recorded with materialize_grads = false);
  // needs[j] says whether input j's gradient is wanted. Returns one tensor per input
  // (undefined where not needed).
  virtual TensorList apply(const TensorList& grads, const std::vector<bool>& needs) = 0;
  virtual const char* name() const = 0;
  // Frees saved tensors after a backward without retain_graph.
  virtual void release_saved() {}
  // Teardown helper: moves out every node this one keeps alive (edges, and the grad_fn of saved
  // tensors nobody else holds), so the destructor can free them without recursion.
  virtual void take_children(std::vector<std::shared_ptr<Node>>& out);

  std::vector<Edge> next_edges;     // one per input
  std::vector<TensorMeta> outputs;  // one per output
  uint64_t sequence_nr;             // creation order: later nodes run first
  bool materialize_grads = true;    // false: missing output gradients reach apply() undefined
  int level;                        // 0: recorded in the forward; k: recorded by a backward
                                    // pass over nodes of level k-1 at most (create_graph)
  bool tangent;                     // recorded by a forward-mode (JVP) rule: a tangent's computation
  // Outputs whose tensors asked to keep their gradient (Tensor::retain_grad): Tensor::backward
  // adds the gradient arriving at output `nr` into that tensor's grad(), as for a leaf.
  struct RetainedGrad {
    uint32_t nr;
    std::weak_ptr<TensorImpl> tensor;
  };
  std::vector<RetainedGrad> retained_grads;
};

// Saves a tensor for the backward. An op's own output is stored without its grad_fn (that
// would be a reference cycle) and re-attached when unpacked. The storage version is recorded
// so that an in-place change after saving is reported instead of giving a wrong gradient.
class SavedVariable {
 public:
  SavedVariable() = default;
  SavedVariable(const Tensor& t, bool is_output);
  Tensor unpack(const std::shared_ptr<Node>& owner, const char* node_name, size_t index) const;
  void reset() { data_ = Tensor(); }
  // If this saved tensor is the last handle on its data, gives up its grad_fn (teardown).
  std::shared_ptr<Node> take_grad_fn();
  // Forward mode: a saved output is stored detached, so the tangents its op gave it after saving
  // are copied in here (autograd/forward_ad.cpp), and come back with it on unpack.
  bool is_output() const { return is_output_; }
  uint32_t output_nr() const { return output_nr_; }
  void set_tangents(const Tensor& output);

 private:
  Tensor data_;
  bool is_output_ = false;
  bool requires_grad_ = false;
  uint32_t output_nr_ = 0;
  uint64_t version_ = 0;
};

struct BackwardArgs {
  const TensorList& grads;   // gradient of each output
  const TensorList& saved;   // unpacked saved tensors, in the order they were saved
  const std::vector<bool>& needs;  // needs[i]: input i wants a gradient
};
using BackwardFn = std::function<TensorList(const BackwardArgs&)>;

// What a forward-mode (JVP) rule gets, at one dual level (autograd/forward_ad.h): the tangent of
// each input (undefined for an input without one at this level: a zero tangent, whose terms the
// rule skips; at least one is defined), and the op's inputs and outputs (primals, on the tape as
// the op recorded them). It returns one tangent per output (undefined: zero), written in gg ops
// like a backward, so that tangents carry tangents of outer levels and can be differentiated in
// reverse mode.
struct JvpArgs {
  const TensorList& tangents;
  const TensorList& inputs;
  const TensorList& outputs;
};
using JvpFn = std::function<TensorList(const JvpArgs&)>;

// The node every op records: a name, saved tensors, and a backward closure in gg ops.
class FunctionNode final : public Node {
 public:
  FunctionNode(const char* name, BackwardFn fn) : name_(name), fn_(std::move(fn)) {}
  ~FunctionNode() override;
  TensorList apply(const TensorList& grads, const std::vector<bool>& needs) override;
  const char* name() const override { return name_; }
  void release_saved() override;
  void take_children(std::vector<std::shared_ptr<Node>>& out) override;
  std::vector<SavedVariable> saved;

 private:
  const char* name_;
  BackwardFn fn_;
  bool released_ = false;
};

// Sink for a leaf's gradient: adds it into leaf.grad() (Tensor::backward only; gg::grad reads
// the gradient arriving here without running it).
class AccumulateGrad final : public Node {
 public:
  explicit AccumulateGrad(std::shared_ptr<TensorImpl> leaf);
  TensorList apply(const TensorList& grads, const std::vector<bool>& needs) override;
  const char* name() const override { return "AccumulateGrad"; }
  std::shared_ptr<TensorImpl> leaf;
};

// The edge along which a gradient for `t` flows: its grad_fn, or its leaf accumulator.
Edge gradient_edge(const Tensor& t);

// What a recorded node asks of the engine besides its backward.
struct RecordOptions {
  bool materialize_grads = true;  // false: missing output gradients reach the backward undefined
};

namespace detail {
// A view of a few tensors (a TensorList or a braced list), so that record needs no vector.
struct TensorSpan {
  const Tensor* first;
  size_t count;
  const Tensor* begin() const { return first; }
  const Tensor* end() const { return first + count; }
  size_t size() const { return count; }
};
bool should_record(TensorSpan inputs);  // grad mode on and some input requires grad
std::shared_ptr<FunctionNode> record_node(const char* name, TensorSpan inputs, TensorSpan outputs,
                                          TensorSpan to_save, BackwardFn backward, const RecordOptions& options);
// How many dual levels are open, over all threads (autograd/forward_ad.cpp). The one check every
// op pays for forward mode: while it is 0, record() does nothing more than before.
extern std::atomic<int> g_open_dual_levels;
inline bool forward_ad_active() { return g_open_dual_levels.load(std::memory_order_relaxed) != 0; }
// Gives the outputs their tangents at each visible dual level where some input has one, by `jvp`
// (null: the op has no JVP rule, an AutogradError naming it if a tangent arrives).
void forward_jvp(const char* name, TensorSpan inputs, TensorSpan outputs, const JvpFn* jvp, FunctionNode* node);
// Gives `to` every tangent `from` has at an open level (a detached copy that keeps them).
void copy_tangents(const Tensor& from, const Tensor& to);
// Whether `t` carries a tangent at a level open on this thread.
bool has_open_tangent(const Tensor& t);
// Whether `t` carries a tangent at a level whose tangents propagate now (inside a level's rule:
// the levels outside it).
bool has_visible_tangent(const Tensor& t);
template <typename J>
constexpr bool is_jvp_rule = std::is_invocable_r_v<TensorList, const std::decay_t<J>&, const JvpArgs&>;
}  // namespace detail

// Records one op: if grad mode is on and some input requires grad, makes a FunctionNode (set up
// by `options`) with edges to the inputs, saves `to_save`, and makes it the grad_fn of each
// output. Returns the node, or null when nothing was recorded.
//
// Forward mode: the form with a `jvp` rule (after the backward) also gives the outputs their
// tangents when some input carries one at an open dual level (autograd/forward_ad.h), whether
// or not anything is recorded; the rule runs during this call only, so it may capture locals by
// reference. Without a rule, a tangent arriving at the op is an AutogradError naming it.
std::shared_ptr<FunctionNode> record(const char* name, const TensorList& inputs, const TensorList& outputs,
            const TensorList& to_save, BackwardFn backward, const RecordOptions& options = {});
std::shared_ptr<FunctionNode> record(const char* name, const TensorList& inputs, const TensorList& outputs,
            const TensorList& to_save, BackwardFn backward, const JvpFn& jvp, const RecordOptions& options = {});

// The same for braced lists, the form every op uses ({a, b}, {y}, {a, b}, backward, jvp): no
// vector is built, and when nothing is recorded (grad mode off, no input requiring grad) neither
// is the std::function around the backward. With no dual level open anywhere, forward mode costs
// one relaxed load.
template <typename F>
std::shared_ptr<FunctionNode> record(const char* name, std::initializer_list<Tensor> inputs,
                                     std::initializer_list<Tensor> outputs, std::initializer_list<Tensor> to_save,
                                     F&& backward, const RecordOptions& options = {}) {
  const detail::TensorSpan in{inputs.begin(), inputs.size()}, out{outputs.begin(), outputs.size()};
  std::shared_ptr<FunctionNode> node;
  if (detail::should_record(in))
    node = detail::record_node(name, in, out, {to_save.begin(), to_save.size()}, BackwardFn(std::forward<F>(backward)),
                               options);
  if (detail::forward_ad_active()) detail::forward_jvp(name, in, out, nullptr, node.get());
  return node;
}

template <typename F, typename J, std::enable_if_t<detail::is_jvp_rule<J>, int> = 0>
std::shared_ptr<FunctionNode> record(const char* name, std::initializer_list<Tensor> inputs,
                                     std::initializer_list<Tensor> outputs, std::initializer_list<Tensor> to_save,
                                     F&& backward, J&& jvp, const RecordOptions& options = {}) {
  const detail::TensorSpan in{inputs.begin(), inputs.size()}, out{outputs.begin(), outputs.size()};
  std::shared_ptr<FunctionNode> node;
  if (detail::should_record(in))
    node = detail::record_node(name, in, out, {to_save.begin(), to_save.size()}, BackwardFn(std::forward<F>(backward)),
                               options);
  if (detail::forward_ad_active()) {
    const JvpFn rule = std::cref(jvp);
    detail::forward_jvp(name, in, out, &rule, node.get());
  }
  return node;
}

namespace detail {
int current_backward_level();
void set_backward_level(int level);
// How many JVP rules are running on this thread (autograd/forward_ad.cpp): nodes recorded while
// one runs are tangent computations (Node::tangent, drawn apart by gg::to_dot).
int jvp_rule_depth();
void set_jvp_rule_depth(int depth);
}  // namespace detail

}  // namespace gg
