// The entry points of the CUDA attention kernels (kernels/cuda/kernels.h): per level, the
// dtype, the scratch of the row scalars, and the path (traits.cuh: choose_path) whose launcher
// runs the kernels (fwd.cuh, bwd.cuh, bwd_bwd.cuh declare them; one file per level and path
// defines them). Also the state of the tests' hooks (testing.h).
#include <atomic>

#include "kernels/cuda/attention/bwd.cuh"
#include "kernels/cuda/attention/bwd_bwd.cuh"
#include "kernels/cuda/attention/common.cuh"
#include "kernels/cuda/attention/fwd.cuh"
#include "kernels/cuda/attention/testing.h"
#include "kernels/cuda/kernels.h"

namespace gg::kernels::cuda {
namespace {

using namespace attn;

// ------------------------------------------------------------------------ forward

template <typename T>
void fwd(const AttentionFwdArgs& a) {
  const Params<T> p = make_params<T>(a);
  on_path<T>(
      a, Level::kFwd, [&](auto d) { launch_fwd_sm90<T, d()>(p); }, [&](auto d) { launch_fwd_sm80<T, d()>(p); },
      [&] { launch_fwd_generic<T>(p); });
}

// ------------------------------------------------------------------------ backward

template <typename T>
void bwd(const AttentionBwdArgs& a) {
  using Acc = typename Elem<T>::Acc;
  Params<T> p = make_params<T>(a);
  const int64_t rows = p.BH * p.N;
  Scratch D(static_cast<size_t>(rows) * sizeof(Acc));
  p.D = D.as<Acc>();
  launch_row_dot<T>(p.dO, p.O, p.D, rows, p.d, p.dL);  // phase 1: D = rowsum(dO∘O) - dL
  on_path<T>(
      a, Level::kBwd, [&](auto d) { launch_bwd_sm90<T, d()>(p); }, [&](auto d) { launch_bwd_sm80<T, d()>(p); },
      [&] { launch_bwd_generic<T>(p); });
}

// ------------------------------------------------------------------------ backward of the backward

template <typename T>
void bwd_bwd(const AttentionBobArgs& a) {
  using Acc = typename Elem<T>::Acc;
  Params<T> p = make_params<T>(a);
  const int64_t rows = p.BH * p.N;
  if (p.Qt == nullptr && p.Kt == nullptr && p.Vt == nullptr) {  // ℒ = 0: every gradient is zero
    if (a.stage == BobStage::kRowSums) {  // and so are E and F
      for (void* out : {a.E, a.F}) CUDA_CHECK(cudaMemsetAsync(out, 0, static_cast<size_t>(rows) * sizeof(Acc), cuda_stream()));
      return;
    }
    const size_t q_bytes = static_cast<size_t>(rows) * p.d * sizeof(T);
    const size_t k_bytes = static_cast<size_t>(p.BHkv()) * p.Nk * p.d * sizeof(T);
    for (void* out : {a.gQ, a.gdO}) CUDA_CHECK(cudaMemsetAsync(out, 0, q_bytes, cuda_stream()));
    for (void* out : {a.gK, a.gV}) CUDA_CHECK(cudaMemsetAsync(out, 0, k_bytes, cuda_stream()));
    if (a.gdL) CUDA_CHECK(cudaMemsetAsync(a.gdL, 0, static_cast<size_t>(rows) * sizeof(Acc), cuda_stream()));
    return;
  }
  // D, E, F; the stages take E and F from the caller
  const bool whole = a.stage == BobStage::kWhole;
  Scratch scalars((whole ? 3 : 1) * static_cast<size_t>(rows) * sizeof(Acc));
  p.D = scalars.as<Acc>();
  if (whole) {
    p.E = p.D + rows;
    p.F = p.E + rows;
  } else {
    p.E = static_cast<Acc*>(a.E);
    p.F = static_cast<Acc*>(a.F);
  }
  // D = rowsum(dO∘O): by launch_D in each path, or in the sm_90a BoB's pass 0 with P·Vt
  on_path<T>(
      a, Level::kBob, [&](auto d) { launch_bob_sm90<T, d()>(p, a.stage); },
      [&](auto d) { launch_bob_sm80<T, d()>(p, a.stage); }, [&] { launch_bob_generic<T>(p, a.stage); });
  // grad_dL = E = Σ_j P∘G (dL enters as D - dL); E = 0 without Qt and Kt (G = 0), not formed then
  if (!whole || a.gdL == nullptr) return;
  const size_t lse_bytes = static_cast<size_t>(rows) * sizeof(Acc);
  if (p.Qt || p.Kt)
    CUDA_CHECK(cudaMemcpyAsync(a.gdL, p.E, lse_bytes, cudaMemcpyDeviceToDevice, cuda_stream()));
  else
    CUDA_CHECK(cudaMemsetAsync(a.gdL, 0, lse_bytes, cuda_stream()));
}

}  // namespace

// ------------------------------------------------------------------------ the tests' hooks

namespace {
std::atomic<testing::AttentionPath> g_path{testing::AttentionPath::kAuto};
std::atomic<int> g_tail_split_sms{-1};  // -1: the device's SM count
}  // namespace

namespace testing {
void set_attention_path(AttentionPath path) { g_path = path; }
AttentionPath attention_path() { return g_path; }
void set_tail_split_sms(int sms) { g_tail_split_sms = sms < 0 ? -1 : sms; }
int tail_split_sms_override() { return g_tail_split_sms; }
bool sm90_path_available() {
#if defined(GG_CUDA_SM90A)
  static int major[64] = {};  // per device, read once
  const int dev = current_device();
  if (dev < 0 || dev >= 64) return false;
  if (major[dev] == 0) CUDA_CHECK(cudaDeviceGetAttribute(&major[dev], cudaDevAttrComputeCapabilityMajor, dev));
  return major[dev] == 9;
#else
  return false;
#endif
}
}  // namespace testing

void attention_fwd(const AttentionFwdArgs& a) {
  dispatch_dtype(a.dtype, "gg::attention", [&](auto tag) { fwd<decltype(tag)>(a); });
}

void attention_bwd(const AttentionBwdArgs& a) {
  dispatch_dtype(a.dtype, "gg::attention_backward", [&](auto tag) { bwd<decltype(tag)>(a); });
}

void attention_bwd_bwd(const AttentionBobArgs& a) {
  dispatch_dtype(a.dtype, "gg::attention_backward_backward", [&](auto tag) { bwd_bwd<decltype(tag)>(a); });
}

}  // namespace gg::kernels::cuda
