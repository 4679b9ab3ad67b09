// Dual levels and the propagation of tangents through recorded ops (autograd/forward_ad.h).
//
// State, per thread: the stack of open levels, and how many of them are visible. A rule of level
// k runs with only levels 0..k-1 visible, so the ops inside it carry tangents of the outer levels
// (the tangent of a tangent) and never recompute level k's own. Each level lists the tensors it
// gave a tangent (weakly), to erase its tangents when it closes: a tangent that requires grad can
// hold, through its history, the very tensor that holds it, and closing the level breaks that cycle.
#include "autograd/forward_ad.h"

#include <algorithm>
#include <vector>

#include "autograd/node.h"
#include "core/error.h"
#include "ops/ops.h"

namespace gg {
namespace detail {
std::atomic<int> g_open_dual_levels{0};
}  // namespace detail

namespace fwd {
namespace {

std::atomic<uint64_t> g_next_level_id{1};

struct Level {
  uint64_t id;
  std::vector<std::weak_ptr<TensorImpl>> holders;  // tensors given a tangent at this level
};

struct State {
  std::vector<std::unique_ptr<Level>> stack;  // outermost first
  size_t visible = 0;                         // levels stack[0 .. visible) propagate
};
thread_local State t_state;

Level* find_level(uint64_t id) {
  for (auto& l : t_state.stack)
    if (l->id == id) return l.get();
  return nullptr;
}

const std::shared_ptr<TensorImpl>* find_tangent(const TensorImpl& impl, uint64_t id) {
  for (const LevelTangent& e : impl.tangents)
    if (e.level == id) return &e.tangent;
  return nullptr;
}

void set_tangent(const Tensor& t, Level& level, const Tensor& tangent) {
  std::vector<LevelTangent>& v = t.impl().tangents;
  for (LevelTangent& e : v)
    if (e.level == level.id) {
      e.tangent = tangent.impl_ptr();
      return;
    }
  v.push_back({level.id, tangent.impl_ptr()});
  level.holders.push_back(t.impl_ptr());
}

void erase_tangent(TensorImpl& impl, uint64_t id) {
  auto& v = impl.tangents;
  v.erase(std::remove_if(v.begin(), v.end(), [id](const LevelTangent& e) { return e.level == id; }), v.end());
}

// Only levels 0 .. k-1 visible while a rule of level k runs (and what it records is marked as a
// tangent's computation).
class VisibleLevels {
 public:
  explicit VisibleLevels(size_t k) : saved_(t_state.visible) {
    t_state.visible = k;
    gg::detail::set_jvp_rule_depth(gg::detail::jvp_rule_depth() + 1);
  }
  ~VisibleLevels() {
    t_state.visible = saved_;
    gg::detail::set_jvp_rule_depth(gg::detail::jvp_rule_depth() - 1);
  }
  VisibleLevels(const VisibleLevels&) = delete;
  VisibleLevels& operator=(const VisibleLevels&) = delete;

 private:
  size_t saved_;
};

Level& open_level(const char* what, const DualLevel* level) {
  GG_CHECK(!t_state.stack.empty(), AutogradError, "gg::fwd::", what,
           ": no dual level is open on this thread; open one first (gg::fwd::DualLevel level;)");
  if (!level) return *t_state.stack.back();
  Level* l = find_level(level->id());
  GG_CHECK(l != nullptr, AutogradError, "gg::fwd::", what, ": dual level ", level->depth(),
           " is not open on this thread");
  return *l;
}

// A view of x recorded as an identity (so gradients reach x, and x's tangents at the visible
// levels come along); the callers set or remove this level's tangent.
Tensor dual_view(const Tensor& x, const char* name) {
  Tensor y = make_view(x, x.shape(), x.strides(), x.offset());
  record(
      name, {x}, {y}, {}, [](const BackwardArgs& g) -> TensorList { return {g.grads[0]}; },
      [](const JvpArgs& j) -> TensorList { return {j.tangents[0]}; });
  return y;
}

}  // namespace

DualLevel::DualLevel()
    : id_(g_next_level_id++), depth_(static_cast<int>(t_state.stack.size())), prev_visible_(t_state.visible) {
  t_state.stack.push_back(std::make_unique<Level>(Level{id_, {}}));
  t_state.visible = t_state.stack.size();
  ++detail::g_open_dual_levels;
}

DualLevel::~DualLevel() {
  auto& stack = t_state.stack;
  for (size_t i = stack.size(); i-- > 0;) {
    if (stack[i]->id != id_) continue;
    for (const auto& w : stack[i]->holders)
      if (auto impl = w.lock()) erase_tangent(*impl, id_);
    stack.erase(stack.begin() + static_cast<std::ptrdiff_t>(i));
    break;
  }
  t_state.visible = std::min(prev_visible_, stack.size());
  --detail::g_open_dual_levels;
}

bool is_active() { return !t_state.stack.empty(); }

namespace {
void check_dual_args(const Tensor& primal, const Tensor& tangent) {
  GG_CHECK(primal.defined(), ValueError, "gg::fwd::make_dual: primal is an undefined tensor");
  GG_CHECK(tangent.defined(), ValueError, "gg::fwd::make_dual: tangent is an undefined tensor");
  GG_CHECK(is_floating(primal.dtype()), DTypeError, "gg::fwd::make_dual: primal must be a floating tensor, got ",
           dtype_name(primal.dtype()));
  GG_CHECK(tangent.shape() == primal.shape(), ShapeError, "gg::fwd::make_dual: tangent has shape ",
           shape_str(tangent.shape()), " but primal has shape ", shape_str(primal.shape()));
  GG_CHECK(tangent.dtype() == primal.dtype(), DTypeError, "gg::fwd::make_dual: tangent has dtype ",
           dtype_name(tangent.dtype()), " but primal has dtype ", dtype_name(primal.dtype()));
  GG_CHECK(tangent.device() == primal.device(), DeviceError, "gg::fwd::make_dual: tangent is on ",
           tangent.device().str(), " but primal is on ", primal.device().str());
}

Tensor make_dual_at(Level& level, const Tensor& primal, const Tensor& tangent) {
  check_dual_args(primal, tangent);
  Tensor y = dual_view(primal, "make_dual");
  set_tangent(y, level, tangent);
  return y;
}

Dual unpack_dual_at(Level& level, const Tensor& t) {
  GG_CHECK(t.defined(), ValueError, "gg::fwd::unpack_dual: the tensor is undefined");
  const std::shared_ptr<TensorImpl>* found = find_tangent(t.impl(), level.id);
  if (!found) return {t, Tensor()};
  Tensor tangent(*found);
  Tensor primal = dual_view(t, "unpack_dual");
  erase_tangent(primal.impl(), level.id);
  return {primal, tangent};
}
}  // namespace

Tensor make_dual(const Tensor& primal, const Tensor& tangent) {
  return make_dual_at(open_level("make_dual", nullptr), primal, tangent);
}
Tensor make_dual(const Tensor& primal, const Tensor& tangent, const DualLevel& level) {
  return make_dual_at(open_level("make_dual", &level), primal, tangent);
}
Dual unpack_dual(const Tensor& t) { return unpack_dual_at(open_level("unpack_dual", nullptr), t); }
Dual unpack_dual(const Tensor& t, const DualLevel& level) {
  return unpack_dual_at(open_level("unpack_dual", &level), t);
}

}  // namespace fwd

// ---------------------------------------------------------------- the hooks in record()

void SavedVariable::set_tangents(const Tensor& output) {
  if (data_.defined() && !data_.is_same(output)) detail::copy_tangents(output, data_);
}

namespace detail {

void copy_tangents(const Tensor& from, const Tensor& to) {
  for (const LevelTangent& e : from.impl().tangents)
    if (fwd::Level* l = fwd::find_level(e.level)) fwd::set_tangent(to, *l, Tensor(e.tangent));
}

bool has_open_tangent(const Tensor& t) {
  if (!t.defined()) return false;
  for (const LevelTangent& e : t.impl().tangents)
    if (fwd::find_level(e.level)) return true;
  return false;
}

bool has_visible_tangent(const Tensor& t) {
  if (!t.defined()) return false;
  for (size_t k = 0; k < fwd::t_state.visible; ++k)
    if (fwd::find_tangent(t.impl(), fwd::t_state.stack[k]->id)) return true;
  return false;
}

void forward_jvp(const char* name, TensorSpan inputs, TensorSpan outputs, const JvpFn* jvp, FunctionNode* node) {
  fwd::State& s = fwd::t_state;
  bool any_tangent = false;
  for (const Tensor& t : inputs) any_tangent = any_tangent || (t.defined() && !t.impl().tangents.empty());
  if (s.visible == 0 || !any_tangent) return;
  TensorList ins, outs;
  for (size_t k = 0; k < s.visible; ++k) {  // outer levels first: level k's rule uses their tangents
    fwd::Level& level = *s.stack[k];
    TensorList tangents(inputs.size());
    size_t first = inputs.size();
    for (size_t i = 0; i < inputs.size(); ++i) {
      if (!inputs.first[i].defined()) continue;
      if (const auto* p = fwd::find_tangent(inputs.first[i].impl(), level.id)) {
        tangents[i] = Tensor(*p);
        first = std::min(first, i);
      }
    }
    if (first == inputs.size()) continue;
    GG_CHECK(jvp != nullptr, AutogradError, "gg::", name, ": this op has no forward-mode (JVP) rule, but its input ",
             first, " (shape ", shape_str(inputs.first[first].shape()), ") carries a tangent at dual level ", k,
             "; differentiate it in reverse mode (gg::grad) instead");
    if (ins.empty()) {
      ins.assign(inputs.begin(), inputs.end());
      outs.assign(outputs.begin(), outputs.end());
    }
    TensorList result;
    {
      fwd::VisibleLevels only_outer(k);
      result = (*jvp)(JvpArgs{tangents, ins, outs});
    }
    GG_CHECK(result.size() == outputs.size(), AutogradError, "gg::", name, ": its JVP rule returned ", result.size(),
             " tangents for ", outputs.size(), " outputs");
    for (size_t j = 0; j < result.size(); ++j) {
      const Tensor& t = result[j];
      if (!t.defined()) continue;
      const Tensor& y = outputs.first[j];
      GG_CHECK(t.shape() == y.shape(), ShapeError, "gg::", name, ": its JVP rule gave output ", j,
               " a tangent of shape ", shape_str(t.shape()), ", expected ", shape_str(y.shape()));
      GG_CHECK(t.dtype() == y.dtype(), DTypeError, "gg::", name, ": its JVP rule gave output ", j,
               " a tangent of dtype ", dtype_name(t.dtype()), ", expected ", dtype_name(y.dtype()));
      GG_CHECK(t.device() == y.device(), DeviceError, "gg::", name, ": its JVP rule gave output ", j,
               " a tangent on ", t.device().str(), ", expected ", y.device().str());
      fwd::set_tangent(y, level, t);
    }
  }
  if (node)
    for (SavedVariable& sv : node->saved)
      if (sv.is_output()) sv.set_tangents(outputs.first[sv.output_nr()]);
}

}  // namespace detail
}  // namespace gg
