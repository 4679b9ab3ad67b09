#include "ops/dispatch.h"

#include "core/error.h"
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

}  // namespace gg::dispatch
