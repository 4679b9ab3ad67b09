#include "ops/dispatch.h"

#include "core/error.h"
#include "kernels/cpu/attention.h"
#include "kernels/cpu/kernels.h"
#ifdef GG_HAS_CUDA
#include "core/cuda_runtime.h"
#include "kernels/cuda/kernels.h"
#define GG_IF_CUDA(call) \
  if (device.is_cuda()) return call;
#else
#define GG_IF_CUDA(call)
#endif

namespace gg::dispatch {
namespace {
[[noreturn]] void no_backend(const char* kernel, Device device) {
  throw DeviceError(std::string("gg: kernel '") + kernel + "' has no implementation for device " +
                    device.str() + " in this build");
}
}  // namespace

#define GG_DISPATCH(name, Params)                                   \
  void name(const kernels::Params& p, Device device) {              \
    if (device.is_cpu()) return kernels::cpu::name(p);              \
    GG_IF_CUDA(kernels::cuda::name(p))                              \
    no_backend(#name, device);                                      \
  }

GG_DISPATCH(fill, FillParams)
GG_DISPATCH(arange, ArangeParams)
GG_DISPATCH(unary, UnaryParams)
GG_DISPATCH(binary, BinaryParams)
GG_DISPATCH(where, WhereParams)
GG_DISPATCH(reduce_last, ReduceParams)
GG_DISPATCH(matmul, MatmulParams)
GG_DISPATCH(softmax_last, SoftmaxParams)
GG_DISPATCH(index_select, IndexParams)
GG_DISPATCH(index_add, IndexParams)
#undef GG_DISPATCH

void random(const kernels::RandomParams& p, Device device) {
  if (device.is_cpu()) return kernels::cpu::random(p);
#ifdef GG_HAS_CUDA
  // The seed and offset are kernel arguments: a captured graph would draw the same numbers on
  // every replay.
  GG_CHECK(!cuda::runtime::is_capturing(), CaptureError, "gg: random numbers on ", device.str(),
           " cannot be drawn inside a CUDA graph capture (every replay would repeat them); draw them outside "
           "and copy them into a static input");
  return kernels::cuda::random(p);
#endif
  no_backend("random", device);
}

void sum_strided(const kernels::SumStridedParams& p, Device device) {
  if (device.is_cpu()) return kernels::cpu::sum_strided(p);
  no_backend("sum_strided", device);
}

void copy(const kernels::CopyParams& p, Device device) {
  if (device.is_cpu()) return kernels::cpu::copy_strided(p);
  GG_IF_CUDA(kernels::cuda::copy_strided(p))
  no_backend("copy", device);
}

void copy_between_devices(void* dst, Device dst_device, const void* src, Device src_device, size_t nbytes) {
#ifdef GG_HAS_CUDA
  using cuda::runtime::CopyKind;
  if (src_device.is_cpu() && dst_device.is_cuda())
    return cuda::runtime::memcpy(dst, src, nbytes, CopyKind::host_to_device);
  if (src_device.is_cuda() && dst_device.is_cpu())
    return cuda::runtime::memcpy(dst, src, nbytes, CopyKind::device_to_host);
  if (src_device.is_cuda() && dst_device.is_cuda())
    return cuda::runtime::memcpy(dst, src, nbytes, CopyKind::device_to_device);
#else
  (void)dst;
  (void)src;
  (void)nbytes;
#endif
  throw DeviceError("gg::to: cannot copy from " + src_device.str() + " to " + dst_device.str() +
                    " (this build has no CUDA backend)");
}

namespace {
template <typename T>
const T* in(const void* p) { return static_cast<const T*>(p); }
template <typename T>
T* out(void* p) { return static_cast<T*>(p); }

template <typename T>
void attention_cpu(const kernels::AttentionFwdArgs& a) {
  kernels::cpu::attention_fwd<T>(a.shape, in<T>(a.Q), in<T>(a.K), in<T>(a.V), out<T>(a.O), out<T>(a.L));
}
template <typename T>
void attention_cpu(const kernels::AttentionBwdArgs& a) {
  kernels::cpu::attention_bwd<T>(a.shape, in<T>(a.Q), in<T>(a.K), in<T>(a.V), in<T>(a.O), in<T>(a.L), in<T>(a.dO),
                                 in<T>(a.dL), out<T>(a.dQ), out<T>(a.dK), out<T>(a.dV));
}
template <typename T>
void attention_cpu(const kernels::AttentionBobArgs& a) {
  kernels::cpu::attention_bwd_bwd<T>(a.shape, in<T>(a.Q), in<T>(a.K), in<T>(a.V), in<T>(a.O), in<T>(a.L),
                                     in<T>(a.dO), in<T>(a.dL), in<T>(a.Qt), in<T>(a.Kt), in<T>(a.Vt), out<T>(a.gQ),
                                     out<T>(a.gK), out<T>(a.gV), out<T>(a.gdO), out<T>(a.gdL), a.stage, out<T>(a.E),
                                     out<T>(a.F));
}

template <typename T>
void attention_cpu(const kernels::AttentionJvpArgs& a) {
  kernels::cpu::attention_jvp<T>(a.shape, in<T>(a.Q), in<T>(a.K), in<T>(a.V), in<T>(a.Qt), in<T>(a.Kt), in<T>(a.Vt),
                                 out<T>(a.O), out<T>(a.L), out<T>(a.Ot), out<T>(a.Lt));
}

// One level on the CPU (the CUDA kernels pick their own template by dtype).
template <typename Args>
void attention_on_cpu(const Args& a, Device device) {
  if (!device.is_cpu()) no_backend("attention", device);
  switch (a.dtype) {
    case DType::f32: return attention_cpu<float>(a);
    case DType::f64: return attention_cpu<double>(a);
    default:
      throw DTypeError(std::string("gg::attention: the CPU kernels support f32 and f64, got ") + dtype_name(a.dtype));
  }
}
}  // namespace

void attention_fwd(const kernels::AttentionFwdArgs& a, Device device) {
  GG_IF_CUDA(kernels::cuda::attention_fwd(a))
  attention_on_cpu(a, device);
}
void attention_bwd(const kernels::AttentionBwdArgs& a, Device device) {
  GG_IF_CUDA(kernels::cuda::attention_bwd(a))
  attention_on_cpu(a, device);
}
void attention_bwd_bwd(const kernels::AttentionBobArgs& a, Device device) {
  GG_IF_CUDA(kernels::cuda::attention_bwd_bwd(a))
  attention_on_cpu(a, device);
}
void attention_jvp(const kernels::AttentionJvpArgs& a, Device device) { attention_on_cpu(a, device); }

}  // namespace gg::dispatch
