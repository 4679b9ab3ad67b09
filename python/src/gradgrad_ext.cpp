// gradgrad._C: the fused attention primitives over DLPack tensors (PyTorch's, and any other
// framework's), without copies. Inputs are wrapped in place by gg::from_blob with their strides
// (the library copies a strided input only where a kernel needs it contiguous; gradgrad.torch
// makes inputs contiguous with torch before the call); outputs are the caller's tensors, written
// by the *_out functions; on CUDA the kernels and the library's scratch run on the caller's
// stream (`stream`: a cudaStream_t as an integer, 0 = the legacy default stream). The GIL is
// released while the kernels run. gg exceptions become Python exceptions with gg's message:
// ValueError (gg::ValueError, gg::ShapeError), TypeError (gg::DTypeError), RuntimeError (others).
#include <nanobind/nanobind.h>
#include <nanobind/ndarray.h>
#include <nanobind/stl/optional.h>
#include <nanobind/stl/tuple.h>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <optional>
#include <tuple>
#include <vector>

#include "gradgrad.h"

namespace nb = nanobind;

namespace {

using Array = nb::ndarray<>;
using OptArray = std::optional<Array>;

gg::DType dtype_of(const Array& a, const char* op, const char* arg) {
  const nb::dlpack::dtype t = a.dtype();
  if (t.lanes == 1 && t.code == static_cast<uint8_t>(nb::dlpack::dtype_code::Float)) {
    if (t.bits == 64) return gg::DType::f64;
    if (t.bits == 32) return gg::DType::f32;
    if (t.bits == 16) return gg::DType::f16;
  }
  if (t.lanes == 1 && t.code == static_cast<uint8_t>(nb::dlpack::dtype_code::Bfloat) && t.bits == 16)
    return gg::DType::bf16;
  throw gg::DTypeError(gg::detail::concat("gg::", op, ": ", arg, " has DLPack dtype code ", int(t.code), " with ",
                                          int(t.bits), " bits and ", int(t.lanes),
                                          " lanes; gradgrad takes float64, float32, bfloat16 and float16"));
}

gg::Device device_of(const Array& a, const char* op, const char* arg) {
  if (a.device_type() == nb::device::cpu::value) return gg::Device::cpu();
  if (a.device_type() == nb::device::cuda::value) return gg::Device::cuda(static_cast<int>(a.device_id()));
  throw gg::DeviceError(gg::detail::concat("gg::", op, ": ", arg, " is on DLPack device type ", a.device_type(),
                                           "; gradgrad takes CPU and CUDA tensors"));
}

// The array itself, as a gg tensor: same memory, shape and strides (elements).
gg::Tensor wrap(const Array& a, const char* op, const char* arg) {
  gg::Shape shape(a.ndim()), strides(a.ndim());
  for (size_t i = 0; i < a.ndim(); ++i) {
    shape[i] = static_cast<int64_t>(a.shape(i));
    strides[i] = a.stride(i);
  }
  return gg::from_blob(a.data(), shape, strides, dtype_of(a, op, arg), device_of(a, op, arg));
}

gg::Tensor wrap(const OptArray& a, const char* op, const char* arg) {
  return a ? wrap(*a, op, arg) : gg::Tensor();
}

gg::AttentionOptions options(std::optional<double> scale, bool causal, std::optional<int64_t> window_left,
                             std::optional<int64_t> window_right) {
  return {scale, causal, window_left, window_right};
}

// Runs `f` with the GIL released and, for CUDA tensors, on the caller's stream.
template <typename F>
void run_on(const gg::Tensor& q, uintptr_t stream, F&& f) {
  nb::gil_scoped_release no_gil;
  if (q.defined() && q.device().is_cuda()) {
    gg::cuda::StreamGuard guard(q.device(), reinterpret_cast<void*>(stream));
    f();
  } else {
    f();
  }
}

void forward(const Array& q, const Array& k, const Array& v, const Array& O, const Array& L,
             std::optional<double> scale, bool causal, std::optional<int64_t> window_left,
             std::optional<int64_t> window_right, uintptr_t stream) {
  const char* op = "attention_forward_out";
  const gg::Tensor tq = wrap(q, op, "q"), tk = wrap(k, op, "k"), tv = wrap(v, op, "v");
  const gg::Tensor tO = wrap(O, op, "O"), tL = wrap(L, op, "L");
  const gg::AttentionOptions o = options(scale, causal, window_left, window_right);
  run_on(tq, stream, [&] { gg::attention_forward_out(tq, tk, tv, tO, tL, o); });
}

void backward(const Array& q, const Array& k, const Array& v, const Array& O, const Array& L, const Array& dO,
              const OptArray& dL, const Array& dQ, const Array& dK, const Array& dV, std::optional<double> scale,
              bool causal, std::optional<int64_t> window_left, std::optional<int64_t> window_right,
              uintptr_t stream) {
  const char* op = "attention_backward_out";
  const gg::Tensor tq = wrap(q, op, "q"), tk = wrap(k, op, "k"), tv = wrap(v, op, "v");
  const gg::Tensor tO = wrap(O, op, "O"), tL = wrap(L, op, "L"), tdO = wrap(dO, op, "dO"), tdL = wrap(dL, op, "dL");
  const gg::Tensor tdQ = wrap(dQ, op, "dQ"), tdK = wrap(dK, op, "dK"), tdV = wrap(dV, op, "dV");
  const gg::AttentionOptions o = options(scale, causal, window_left, window_right);
  run_on(tq, stream, [&] { gg::attention_backward_out(tq, tk, tv, tO, tL, tdO, tdQ, tdK, tdV, o, tdL); });
}

void backward_backward(const Array& q, const Array& k, const Array& v, const Array& O, const Array& L,
                       const Array& dO, const OptArray& dL, const OptArray& qt, const OptArray& kt,
                       const OptArray& vt, const Array& gQ, const Array& gK, const Array& gV, const Array& gdO,
                       const OptArray& gdL, std::optional<double> scale, bool causal,
                       std::optional<int64_t> window_left, std::optional<int64_t> window_right, uintptr_t stream) {
  const char* op = "attention_backward_backward_out";
  const gg::Tensor tq = wrap(q, op, "q"), tk = wrap(k, op, "k"), tv = wrap(v, op, "v");
  const gg::Tensor tO = wrap(O, op, "O"), tL = wrap(L, op, "L"), tdO = wrap(dO, op, "dO"), tdL = wrap(dL, op, "dL");
  const gg::Tensor tqt = wrap(qt, op, "qt"), tkt = wrap(kt, op, "kt"), tvt = wrap(vt, op, "vt");
  const gg::Tensor tgQ = wrap(gQ, op, "gQ"), tgK = wrap(gK, op, "gK"), tgV = wrap(gV, op, "gV");
  const gg::Tensor tgdO = wrap(gdO, op, "gdO"), tgdL = wrap(gdL, op, "gdL");
  const gg::AttentionOptions o = options(scale, causal, window_left, window_right);
  run_on(tq, stream, [&] {
    gg::attention_backward_backward_out(tq, tk, tv, tO, tL, tdO, tqt, tkt, tvt, tgQ, tgK, tgV, tgdO, tgdL, o, tdL);
  });
}

void forward_jvp(const Array& q, const Array& k, const Array& v, const OptArray& qt, const OptArray& kt,
                 const OptArray& vt, const Array& Ot, const Array& Lt, std::optional<double> scale, bool causal,
                 std::optional<int64_t> window_left, std::optional<int64_t> window_right, uintptr_t stream) {
  const char* op = "attention_forward_jvp_out";
  const gg::Tensor tq = wrap(q, op, "q"), tk = wrap(k, op, "k"), tv = wrap(v, op, "v");
  const gg::Tensor tqt = wrap(qt, op, "qt"), tkt = wrap(kt, op, "kt"), tvt = wrap(vt, op, "vt");
  const gg::Tensor tOt = wrap(Ot, op, "Ot"), tLt = wrap(Lt, op, "Lt");
  const gg::AttentionOptions o = options(scale, causal, window_left, window_right);
  run_on(tq, stream, [&] { gg::attention_forward_jvp_out(tq, tk, tv, tqt, tkt, tvt, tOt, tLt, o); });
}

// Bench hooks (bench/attention_python.py): the same work through the C++ API on the caller's
// arrays, timed in C++ from a synchronised start to a synchronised end; the median over `reps`
// runs after one warm-up run, in seconds.
template <typename F>
double median_seconds(const gg::Tensor& q, uintptr_t stream, int reps, F&& f) {
  std::vector<double> t;
  run_on(q, stream, [&] {
    const bool cuda = q.device().is_cuda();
    for (int r = 0; r <= reps; ++r) {
      if (cuda) gg::cuda::synchronize();
      const auto t0 = std::chrono::steady_clock::now();
      f();
      if (cuda) gg::cuda::synchronize();
      if (r > 0) t.push_back(std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
    }
  });
  std::sort(t.begin(), t.end());
  return t.empty() ? 0.0 : t[t.size() / 2];
}

// `calls` forward calls (attention_forward_out into O, L) per timed run.
double bench_forward(const Array& q, const Array& k, const Array& v, const Array& O, const Array& L,
                     std::optional<double> scale, bool causal, std::optional<int64_t> window_left,
                     std::optional<int64_t> window_right, uintptr_t stream, int calls, int reps) {
  const char* op = "bench_forward";
  const gg::Tensor tq = wrap(q, op, "q"), tk = wrap(k, op, "k"), tv = wrap(v, op, "v");
  const gg::Tensor tO = wrap(O, op, "O"), tL = wrap(L, op, "L");
  const gg::AttentionOptions o = options(scale, causal, window_left, window_right);
  return median_seconds(tq, stream, reps, [&] {
    for (int i = 0; i < calls; ++i) gg::attention_forward_out(tq, tk, tv, tO, tL, o);
  });
}

// The chain: O = attention(q, k, v); (dQ, dK, dV) = grad(O, (q, k, v), dO) with create_graph;
// the gradient of <qt, dQ> + <kt, dK> + <vt, dV> with respect to q, k, v and dO.
double bench_chain(const Array& q, const Array& k, const Array& v, const Array& dO, const Array& qt,
                   const Array& kt, const Array& vt, std::optional<double> scale, bool causal,
                   std::optional<int64_t> window_left, std::optional<int64_t> window_right, uintptr_t stream,
                   int reps) {
  const char* op = "bench_chain";
  gg::Tensor tq = wrap(q, op, "q"), tk = wrap(k, op, "k"), tv = wrap(v, op, "v"), tdO = wrap(dO, op, "dO");
  const gg::Tensor tqt = wrap(qt, op, "qt"), tkt = wrap(kt, op, "kt"), tvt = wrap(vt, op, "vt");
  for (gg::Tensor* t : {&tq, &tk, &tv, &tdO}) t->requires_grad_();
  const gg::AttentionOptions o = options(scale, causal, window_left, window_right);
  gg::GradOptions record;
  record.create_graph = true;
  return median_seconds(tq, stream, reps, [&] {
    const gg::Tensor out = gg::attention(tq, tk, tv, o);
    const gg::TensorList g = gg::grad(gg::TensorList{out}, gg::TensorList{tq, tk, tv}, gg::TensorList{tdO}, record);
    const gg::Tensor s = gg::sum(g[0] * tqt) + gg::sum(g[1] * tkt) + gg::sum(g[2] * tvt);
    gg::grad(gg::TensorList{s}, gg::TensorList{tq, tk, tv, tdO});
  });
}

void translate(const std::exception_ptr& p, void*) {
  try {
    std::rethrow_exception(p);
  } catch (const gg::ShapeError& e) {
    PyErr_SetString(PyExc_ValueError, e.what());
  } catch (const gg::ValueError& e) {
    PyErr_SetString(PyExc_ValueError, e.what());
  } catch (const gg::DTypeError& e) {
    PyErr_SetString(PyExc_TypeError, e.what());
  } catch (const gg::Error& e) {
    PyErr_SetString(PyExc_RuntimeError, e.what());
  }
}

}  // namespace

NB_MODULE(_C, m) {
  m.doc() = "gradgrad's fused attention primitives over DLPack tensors (gradgrad.torch is the PyTorch face)";
  nb::register_exception_translator(translate);
  const auto none = nb::none();
  m.def("attention_forward", &forward, nb::arg("q"), nb::arg("k"), nb::arg("v"), nb::arg("O"), nb::arg("L"),
        nb::arg("scale").none() = none, nb::arg("causal") = false, nb::arg("window_left").none() = none,
        nb::arg("window_right").none() = none, nb::arg("stream") = 0,
        "Writes O and the row log-sum-exp L (gg::attention_forward_out).");
  m.def("attention_backward", &backward, nb::arg("q"), nb::arg("k"), nb::arg("v"), nb::arg("O"), nb::arg("L"),
        nb::arg("dO"), nb::arg("dL").none(), nb::arg("dQ"), nb::arg("dK"), nb::arg("dV"),
        nb::arg("scale").none() = none, nb::arg("causal") = false, nb::arg("window_left").none() = none,
        nb::arg("window_right").none() = none, nb::arg("stream") = 0,
        "Writes dQ, dK, dV (gg::attention_backward_out); dL may be None.");
  m.def("attention_backward_backward", &backward_backward, nb::arg("q"), nb::arg("k"), nb::arg("v"), nb::arg("O"),
        nb::arg("L"), nb::arg("dO"), nb::arg("dL").none(), nb::arg("qt").none(), nb::arg("kt").none(),
        nb::arg("vt").none(), nb::arg("gQ"), nb::arg("gK"), nb::arg("gV"), nb::arg("gdO"), nb::arg("gdL").none(),
        nb::arg("scale").none() = none, nb::arg("causal") = false, nb::arg("window_left").none() = none,
        nb::arg("window_right").none() = none, nb::arg("stream") = 0,
        "Writes gQ, gK, gV, gdO and gdL (gg::attention_backward_backward_out); dL, qt, kt, vt and gdL may be None.");
  m.def("attention_forward_jvp", &forward_jvp, nb::arg("q"), nb::arg("k"), nb::arg("v"), nb::arg("qt").none(),
        nb::arg("kt").none(), nb::arg("vt").none(), nb::arg("Ot"), nb::arg("Lt"), nb::arg("scale").none() = none,
        nb::arg("causal") = false, nb::arg("window_left").none() = none, nb::arg("window_right").none() = none,
        nb::arg("stream") = 0,
        "Writes the tangents Ot of O and Lt of L along the tangents qt, kt, vt of q, k, v "
        "(gg::attention_forward_jvp_out; the fused CPU kernel for f32/f64); qt, kt and vt may be None (zero).");
  m.def("_bench_forward", &bench_forward, nb::arg("q"), nb::arg("k"), nb::arg("v"), nb::arg("O"), nb::arg("L"),
        nb::arg("scale").none(), nb::arg("causal"), nb::arg("window_left").none(), nb::arg("window_right").none(),
        nb::arg("stream"), nb::arg("calls"), nb::arg("reps"));
  m.def("_bench_chain", &bench_chain, nb::arg("q"), nb::arg("k"), nb::arg("v"), nb::arg("dO"), nb::arg("qt"),
        nb::arg("kt"), nb::arg("vt"), nb::arg("scale").none(), nb::arg("causal"), nb::arg("window_left").none(),
        nb::arg("window_right").none(), nb::arg("stream"), nb::arg("reps"));
  m.def("cuda_available", [] { return gg::cuda::is_available(); }, "Built with CUDA, and a GPU is present.");
  // Test hooks: the address an array is read at (zero-copy checks), and the allocation counters of
  // gg's CPU allocator (a call on contiguous CPU inputs allocates nothing there).
  m.def("_data_ptr", [](const Array& a) { return reinterpret_cast<uintptr_t>(a.data()); });
  m.def("_cpu_memory_stats", [] {
    const gg::MemoryStats s = gg::cpu::memory_stats();
    return std::make_tuple(s.current_bytes, s.peak_bytes, s.allocations);
  });
}
