#include "autograd/node.h"

#include <atomic>

#include "autograd/grad_mode.h"

namespace gg {
namespace {
std::atomic<uint64_t> g_next_sequence_nr{0};
thread_local bool t_grad_enabled = true;
thread_local int t_backward_level = 0;
thread_local int t_jvp_rule_depth = 0;
}  // namespace

bool GradMode::is_enabled() { return t_grad_enabled; }
void GradMode::set_enabled(bool enabled) { t_grad_enabled = enabled; }

namespace detail {
int current_backward_level() { return t_backward_level; }
void set_backward_level(int level) { t_backward_level = level; }
int jvp_rule_depth() { return t_jvp_rule_depth; }
void set_jvp_rule_depth(int depth) { t_jvp_rule_depth = depth; }
}  // namespace detail

Node::Node() : sequence_nr(g_next_sequence_nr++), level(t_backward_level), tangent(t_jvp_rule_depth > 0) {}

void Node::take_children(std::vector<std::shared_ptr<Node>>& out) {
  for (Edge& e : next_edges)
    if (e.node) out.push_back(std::move(e.node));
  next_edges.clear();
}

namespace {
// Frees `pending` and everything only they keep alive, one node at a time.
void drain(std::vector<std::shared_ptr<Node>>& pending) {
  while (!pending.empty()) {
    std::shared_ptr<Node> n = std::move(pending.back());
    pending.pop_back();
    // Last owner: empty it first, so that its destructor (at the end of this scope) has
    // nothing left to free recursively.
    if (n.use_count() == 1) n->take_children(pending);
  }
}
}  // namespace

Node::~Node() {
  std::vector<std::shared_ptr<Node>> pending;
  Node::take_children(pending);
  drain(pending);
}

FunctionNode::~FunctionNode() {
  std::vector<std::shared_ptr<Node>> pending;
  FunctionNode::take_children(pending);
  drain(pending);
}

std::shared_ptr<Node> SavedVariable::take_grad_fn() {
  std::shared_ptr<Node> out;
  if (data_.defined() && data_.impl_ptr().use_count() == 1) out = std::move(data_.impl().grad_fn);
  return out;
}

void FunctionNode::take_children(std::vector<std::shared_ptr<Node>>& out) {
  Node::take_children(out);
  for (SavedVariable& s : saved)
    if (auto fn = s.take_grad_fn()) out.push_back(std::move(fn));
  saved.clear();
}

SavedVariable::SavedVariable(const Tensor& t, bool is_output)
    : is_output_(is_output), version_(t.defined() ? t.version() : 0) {
  if (!t.defined()) return;
  requires_grad_ = t.requires_grad();
  if (is_output) {  // keep data only; the grad_fn is the owner node, re-attached on unpack
    output_nr_ = t.output_nr();
    data_ = t.detach();
  } else {
    data_ = t;
  }
}

Tensor SavedVariable::unpack(const std::shared_ptr<Node>& owner, const char* node_name, size_t index) const {
  if (!data_.defined()) return data_;
  GG_CHECK(data_.version() == version_, AutogradError,
           "gg: a tensor needed for the gradient of '", node_name, "' (saved tensor ", index,
           ", shape ", shape_str(data_.shape()), ") was modified by an in-place operation: "
           "its version is ", data_.version(), ", expected ", version_,
           ". Clone it before modifying it, or modify it before it is used.");
  if (!is_output_ || !requires_grad_) return data_;
  Tensor t = make_view(data_, data_.shape(), data_.strides(), data_.offset());
  t.impl().grad_fn = owner;
  t.impl().output_nr = output_nr_;
  if (!data_.impl().tangents.empty()) detail::copy_tangents(data_, t);  // forward mode
  return t;
}

TensorList FunctionNode::apply(const TensorList& grads, const std::vector<bool>& needs) {
  GG_CHECK(!released_, AutogradError, "gg: trying to differentiate through the graph a second time (node '",
           name_, "'): its saved tensors were freed after the first pass. Pass retain_graph=true "
           "to the first grad/backward call if you need to run it twice.");
  TensorList unpacked;
  unpacked.reserve(saved.size());
  std::shared_ptr<Node> self = shared_from_this();
  for (size_t i = 0; i < saved.size(); ++i) unpacked.push_back(saved[i].unpack(self, name_, i));
  return fn_(BackwardArgs{grads, unpacked, needs});
}

void FunctionNode::release_saved() {
  if (saved.empty()) return;  // nothing saved: running it again is harmless
  for (auto& s : saved) s.reset();
  released_ = true;
}

AccumulateGrad::AccumulateGrad(std::shared_ptr<TensorImpl> l) : leaf(std::move(l)) {
  outputs.push_back({leaf->shape, leaf->dtype, leaf->storage->device()});
}

Edge gradient_edge(const Tensor& t) {
  TensorImpl& impl = t.impl();
  if (impl.grad_fn) return {impl.grad_fn, impl.output_nr};
  if (!impl.requires_grad) return {};
  std::shared_ptr<Node> acc = impl.grad_accumulator.lock();
  if (!acc) {
    acc = std::make_shared<AccumulateGrad>(t.impl_ptr());
    impl.grad_accumulator = acc;
  }
  return {acc, 0};
}

namespace detail {

bool should_record(TensorSpan inputs) {
  if (!GradMode::is_enabled()) return false;
  for (const Tensor& t : inputs)
    if (t.defined() && t.requires_grad()) return true;
  return false;
}

std::shared_ptr<FunctionNode> record_node(const char* name, TensorSpan inputs, TensorSpan outputs,
                                          TensorSpan to_save, BackwardFn backward, const RecordOptions& options) {
  auto node = std::make_shared<FunctionNode>(name, std::move(backward));
  node->materialize_grads = options.materialize_grads;
  node->next_edges.reserve(inputs.size());
  for (const Tensor& t : inputs) node->next_edges.push_back(t.defined() ? gradient_edge(t) : Edge{});
  node->outputs.reserve(outputs.size());
  for (size_t i = 0; i < outputs.size(); ++i) {
    TensorImpl& o = outputs.first[i].impl();
    o.grad_fn = node;
    o.output_nr = static_cast<uint32_t>(i);
    node->outputs.push_back({o.shape, o.dtype, o.storage->device()});
  }
  node->saved.reserve(to_save.size());
  for (const Tensor& t : to_save) {
    bool is_output = false;
    for (const Tensor& o : outputs) is_output = is_output || (t.defined() && t.is_same(o));
    node->saved.emplace_back(t, is_output);
  }
  return node;
}

}  // namespace detail

namespace {
std::shared_ptr<FunctionNode> record_list(const char* name, const TensorList& inputs, const TensorList& outputs,
                                          const TensorList& to_save, BackwardFn backward, const JvpFn* jvp,
                                          const RecordOptions& options) {
  const detail::TensorSpan in{inputs.data(), inputs.size()}, out{outputs.data(), outputs.size()};
  std::shared_ptr<FunctionNode> node;
  if (detail::should_record(in))
    node = detail::record_node(name, in, out, {to_save.data(), to_save.size()}, std::move(backward), options);
  if (detail::forward_ad_active()) detail::forward_jvp(name, in, out, jvp, node.get());
  return node;
}
}  // namespace

std::shared_ptr<FunctionNode> record(const char* name, const TensorList& inputs, const TensorList& outputs,
            const TensorList& to_save, BackwardFn backward, const RecordOptions& options) {
  return record_list(name, inputs, outputs, to_save, std::move(backward), nullptr, options);
}

std::shared_ptr<FunctionNode> record(const char* name, const TensorList& inputs, const TensorList& outputs,
            const TensorList& to_save, BackwardFn backward, const JvpFn& jvp, const RecordOptions& options) {
  return record_list(name, inputs, outputs, to_save, std::move(backward), &jvp, options);
}

}  // namespace gg
