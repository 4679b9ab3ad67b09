// gg::nn::Module: a named, ordered tree of parameters, usable two ways.
//
//   stateful:    Linear fc(3, 4);  Tensor y = fc(x);            // the module's own tensors
//   functional:  Tensor y = fc(params, x);                      // tensors passed in by name
//
// The functional form is torch.func.functional_call: `params` maps the module's parameter names
// ("weight", "q_proj.bias", "block.attn.out_proj.weight", ...) to any tensors of a compatible
// shape, e.g. θ − α·∇θ from an inner loop recorded with create_graph. Every module's forward is
// written once, against a Params view; the stateful call passes the module's own parameters.
#pragma once
#include <map>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "../core/tensor.h"
#if defined(GG_HAS_SAFETENSORS)  // built where nlohmann-json was found (CMakeLists.txt)
#include "../io/safetensors.h"
#endif

namespace gg::nn {

// Ordered (name, tensor) pairs: parameter lists, state dicts, per-task copies.
using NamedTensors = std::vector<std::pair<std::string, Tensor>>;

// A read-only view of named tensors under a prefix. p["weight"] looks up prefix + "weight";
// p.sub("attn") is the view under prefix + "attn.". Copies are cheap (a shared map and a string).
class Params {
 public:
  Params() = default;
  explicit Params(const NamedTensors& named);
  const Tensor& operator[](const std::string& name) const;  // throws ValueError when absent
  bool contains(const std::string& name) const;
  Params sub(const std::string& child) const;
  const std::string& prefix() const { return prefix_; }

 private:
  std::shared_ptr<const std::map<std::string, Tensor>> map_;
  std::string prefix_;
};

class Module {
 public:
  virtual ~Module() = default;
  Module() = default;
  Module(const Module&) = delete;
  Module& operator=(const Module&) = delete;

  // The computation, reading every parameter from `p` (names relative to this module).
  virtual Tensor forward(const Params& p, const Tensor& x) const = 0;
  Tensor forward(const Tensor& x) const { return forward(Params(named_parameters()), x); }
  Tensor operator()(const Tensor& x) const { return forward(x); }
  Tensor operator()(const Params& p, const Tensor& x) const { return forward(p, x); }
  Tensor operator()(const NamedTensors& p, const Tensor& x) const { return forward(Params(p), x); }

  // Every parameter of this module and its children, depth first in registration order, with
  // dotted names ("attn.q_proj.weight"). The tensors are the module's own (shared storage).
  NamedTensors named_parameters() const;
  TensorList parameters() const;
  // Direct children, in registration order.
  const std::vector<std::pair<std::string, std::shared_ptr<Module>>>& children() const { return children_; }

  // Detached copies of the values, for saving.
  NamedTensors state_dict() const;
  // Copies values into the parameters (under NoGradGuard). strict: every parameter must be
  // present and no unknown name may appear. Shapes must match (ShapeError), names must exist
  // (ValueError), values are cast to the parameter's dtype and device. All or nothing: every
  // name, shape and dtype is checked before the first copy, so a rejected state leaves every
  // parameter as it was.
  void load_state_dict(const NamedTensors& state, bool strict = true);
  // Drops every parameter's accumulated .grad().
  void zero_grad();

 protected:
  // Registers a leaf parameter (requires_grad set) and returns it.
  Tensor& register_parameter(const std::string& name, Tensor value);
  template <typename M>
  std::shared_ptr<M> register_module(const std::string& name, std::shared_ptr<M> module) {
    add_child(name, module);
    return module;
  }

 private:
  void add_child(const std::string& name, std::shared_ptr<Module> module);
  void collect(const std::string& prefix, NamedTensors& out) const;
  std::vector<std::pair<std::string, Tensor>> params_;
  std::vector<std::pair<std::string, std::shared_ptr<Module>>> children_;
};

// A container of child modules named "0", "1", ... (torch.nn.ModuleList). It has no forward of
// its own: its owner calls the children.
class ModuleList : public Module {
 public:
  void append(std::shared_ptr<Module> module);
  size_t size() const { return children().size(); }
  using Module::forward;
  Tensor forward(const Params& p, const Tensor& x) const override;  // throws ValueError
};

// torch.func.functional_call: module's computation with the given tensors as its parameters.
inline Tensor functional_call(const Module& module, const NamedTensors& params, const Tensor& x) {
  return module.forward(Params(params), x);
}

// Per-task copies without copying memory: each tensor gets a leading dim of size `tasks` as a
// stride-0 view, weights (r, c) -> (tasks, r, c), vectors (n) -> (tasks, 1, n), so that they
// broadcast against inputs of shape (tasks, N, features). A loss that SUMS per-task losses has as
// its gradient with respect to these views the stack of per-task gradients.
NamedTensors expand_params(const NamedTensors& params, int64_t tasks);

// The values only, in order.
TensorList values(const NamedTensors& named);
// Same names, other tensors (sizes must match).
NamedTensors with_values(const NamedTensors& named, const TensorList& values);

#if defined(GG_HAS_SAFETENSORS)
// A module's parameters to and from a safetensors file (io/safetensors.h), keyed by
// named_parameters() names, so "attn.q_proj.weight" in the file is that parameter.
void save(const Module& module, const std::string& path, const io::Metadata& metadata = {});
// Loads the file and copies its tensors into the module (Module::load_state_dict). Returns the
// file's __metadata__. All or nothing: the whole file is read and checked (format, then every
// name, shape and dtype) before any parameter changes.
io::Metadata load(Module& module, const std::string& path, bool strict = true);
#endif

}  // namespace gg::nn
