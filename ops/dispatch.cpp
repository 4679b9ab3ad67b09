#include "ops/dispatch.h"

#include "core/error.h"
#include "kernels/cpu/attention.h"
#include "kernels/cpu/kernels.h"

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
    no_backend(#name, device);                                      \
  }

GG_DISPATCH(fill, FillParams)
GG_DISPATCH(random, RandomParams)
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

void copy(const kernels::CopyParams& p, Device device) {
  if (device.is_cpu()) return kernels::cpu::copy_strided(p);
  no_backend("copy", device);
}

namespace {
template <typename T>
const T* in(const void* p) { return static_cast<const T*>(p); }
template <typename T>
T* out(void* p) { return static_cast<T*>(p); }

template <typename T>
void attention_cpu(int level, const kernels::AttentionArgs& a) {
  namespace k = kernels::cpu;
  if (level == 0)
    k::attention_fwd<T>(a.shape, in<T>(a.Q), in<T>(a.K), in<T>(a.V), out<T>(a.out0), out<T>(a.out1));
  else if (level == 1)
    k::attention_bwd<T>(a.shape, in<T>(a.Q), in<T>(a.K), in<T>(a.V), in<T>(a.O), in<T>(a.L), in<T>(a.dO),
                        out<T>(a.out0), out<T>(a.out1), out<T>(a.out2));
  else
    k::attention_bwd_bwd<T>(a.shape, in<T>(a.Q), in<T>(a.K), in<T>(a.V), in<T>(a.O), in<T>(a.L), in<T>(a.dO),
                            in<T>(a.Qt), in<T>(a.Kt), in<T>(a.Vt), out<T>(a.out0), out<T>(a.out1), out<T>(a.out2),
                            out<T>(a.out3));
}

void attention(int level, const kernels::AttentionArgs& a, Device device) {
  if (!device.is_cpu()) no_backend("attention", device);
  switch (a.dtype) {
    case DType::f32: return attention_cpu<float>(level, a);
    case DType::f64: return attention_cpu<double>(level, a);
    default:
      throw DTypeError(std::string("gg::attention: the CPU kernels support f32 and f64, got ") + dtype_name(a.dtype));
  }
}
}  // namespace

void attention_fwd(const kernels::AttentionArgs& a, Device device) { attention(0, a, device); }
void attention_bwd(const kernels::AttentionArgs& a, Device device) { attention(1, a, device); }
void attention_bwd_bwd(const kernels::AttentionArgs& a, Device device) { attention(2, a, device); }

}  // namespace gg::dispatch
