#include "nn/module.h"

#include <set>

#include "autograd/grad_mode.h"
#include "core/error.h"
#include "ops/ops.h"

namespace gg::nn {

Params::Params(const NamedTensors& named) {
  auto map = std::make_shared<std::map<std::string, Tensor>>();
  for (const auto& [name, t] : named) {
    GG_CHECK(map->emplace(name, t).second, ValueError, "gg::nn::Params: the name '", name, "' appears twice");
  }
  map_ = std::move(map);
}

const Tensor& Params::operator[](const std::string& name) const {
  const std::string full = prefix_ + name;
  if (map_) {
    auto it = map_->find(full);
    if (it != map_->end()) return it->second;
  }
  throw ValueError(detail::concat("gg::nn::Params: no parameter named '", full, "' (", map_ ? map_->size() : 0,
                                  " names given)"));
}

bool Params::contains(const std::string& name) const { return map_ && map_->count(prefix_ + name) > 0; }

Params Params::sub(const std::string& child) const {
  Params p = *this;
  p.prefix_ += child + ".";
  return p;
}

Tensor& Module::register_parameter(const std::string& name, Tensor value) {
  GG_CHECK(!name.empty() && name.find('.') == std::string::npos, ValueError,
           "gg::nn::Module::register_parameter: name '", name, "' must be non-empty and contain no '.'");
  for (const auto& [n, t] : params_) GG_CHECK(n != name, ValueError, "gg::nn::Module: parameter '", name, "' registered twice");
  for (const auto& [n, m] : children_) GG_CHECK(n != name, ValueError, "gg::nn::Module: '", name, "' is already a child module");
  Tensor leaf = value.detach();
  leaf.requires_grad_(true);
  params_.emplace_back(name, leaf);
  return params_.back().second;
}

void Module::add_child(const std::string& name, std::shared_ptr<Module> module) {
  GG_CHECK(module != nullptr, ValueError, "gg::nn::Module::register_module: '", name, "' is null");
  GG_CHECK(!name.empty() && name.find('.') == std::string::npos, ValueError,
           "gg::nn::Module::register_module: name '", name, "' must be non-empty and contain no '.'");
  for (const auto& [n, t] : params_) GG_CHECK(n != name, ValueError, "gg::nn::Module: '", name, "' is already a parameter");
  for (const auto& [n, m] : children_) GG_CHECK(n != name, ValueError, "gg::nn::Module: child '", name, "' registered twice");
  children_.emplace_back(name, std::move(module));
}

void Module::collect(const std::string& prefix, NamedTensors& out) const {
  for (const auto& [name, t] : params_) out.emplace_back(prefix + name, t);
  for (const auto& [name, child] : children_) child->collect(prefix + name + ".", out);
}

NamedTensors Module::named_parameters() const {
  NamedTensors out;
  collect("", out);
  return out;
}

TensorList Module::parameters() const { return values(named_parameters()); }

NamedTensors Module::state_dict() const {
  NamedTensors out;
  for (const auto& [name, t] : named_parameters()) out.emplace_back(name, clone(t.detach()));
  return out;
}

void Module::load_state_dict(const NamedTensors& state, bool strict) {
  NamedTensors mine = named_parameters();
  std::map<std::string, Tensor*> by_name;
  for (auto& [name, t] : mine) by_name[name] = &t;
  // Every check runs before the first copy, so a rejected state changes no parameter.
  std::set<std::string> seen;
  std::vector<std::pair<Tensor*, const Tensor*>> copies;  // (parameter, value)
  for (const auto& [name, value] : state) {
    auto it = by_name.find(name);
    if (it == by_name.end()) {
      GG_CHECK(!strict, ValueError, "gg::nn::Module::load_state_dict: unexpected key '", name, "'");
      continue;
    }
    GG_CHECK(seen.insert(name).second, ValueError, "gg::nn::Module::load_state_dict: key '", name, "' given twice");
    Tensor& p = *it->second;
    GG_CHECK(value.defined(), ValueError, "gg::nn::Module::load_state_dict: '", name, "' is an undefined tensor");
    GG_CHECK(value.shape() == p.shape(), ShapeError, "gg::nn::Module::load_state_dict: '", name, "' has shape ",
             shape_str(value.shape()), ", the parameter has shape ", shape_str(p.shape()));
    GG_CHECK(is_floating(value.dtype()) == is_floating(p.dtype()), DTypeError, "gg::nn::Module::load_state_dict: '",
             name, "' is ", dtype_name(value.dtype()), ", the parameter is ", dtype_name(p.dtype()));
    copies.emplace_back(&p, &value);
  }
  if (strict && seen.size() != mine.size()) {
    for (const auto& [name, t] : mine)
      GG_CHECK(seen.count(name), ValueError, "gg::nn::Module::load_state_dict: missing key '", name, "'");
  }
  NoGradGuard no_grad;
  for (const auto& [p, value] : copies) copy_(*p, to(to(value->detach(), p->device()), p->dtype()));
}

void Module::zero_grad() {
  for (auto& [name, t] : named_parameters()) {
    Tensor p = t;
    p.zero_grad();
  }
}

void ModuleList::append(std::shared_ptr<Module> module) {
  register_module(std::to_string(children().size()), std::move(module));
}

Tensor ModuleList::forward(const Params& p, const Tensor&) const {
  throw ValueError(detail::concat("gg::nn::ModuleList '", p.prefix(), "': a list has no forward; call its children"));
}

NamedTensors expand_params(const NamedTensors& params, int64_t tasks) {
  GG_CHECK(tasks >= 1, ValueError, "gg::nn::expand_params: tasks must be >= 1, got ", tasks);
  NamedTensors out;
  for (const auto& [name, t] : params) {
    Shape s = t.shape();
    GG_CHECK(s.size() == 1 || s.size() == 2, ShapeError, "gg::nn::expand_params: '", name,
             "' has shape ", shape_str(s), "; only 1-D and 2-D parameters can be expanded per task");
    Tensor base = s.size() == 1 ? reshape(t, {1, 1, s[0]}) : unsqueeze(t, 0);
    Shape target = base.shape();
    target[0] = tasks;
    out.emplace_back(name, expand(base, target));
  }
  return out;
}

TensorList values(const NamedTensors& named) {
  TensorList out;
  out.reserve(named.size());
  for (const auto& [name, t] : named) out.push_back(t);
  return out;
}

NamedTensors with_values(const NamedTensors& named, const TensorList& vals) {
  GG_CHECK(named.size() == vals.size(), ValueError, "gg::nn::with_values: ", named.size(), " names but ", vals.size(),
           " tensors");
  NamedTensors out;
  out.reserve(named.size());
  for (size_t i = 0; i < named.size(); ++i) out.emplace_back(named[i].first, vals[i]);
  return out;
}

#if defined(GG_HAS_SAFETENSORS)
void save(const Module& module, const std::string& path, const io::Metadata& metadata) {
  io::save_safetensors(path, module.state_dict(), metadata);
}

io::Metadata load(Module& module, const std::string& path, bool strict) {
  io::Safetensors file = io::load_safetensors(path);
  module.load_state_dict(file.tensors, strict);
  return file.metadata;
}
#endif

}  // namespace gg::nn
