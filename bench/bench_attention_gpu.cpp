// gg::attention on the GPU, measured the way bench/attention_torch.py measures
// PyTorch, so both can run in one call (scripts/bench-gpu.sh attention) and be compared line by
// line. One JSON object per line on stdout:
//   fwd_ms     forward only (no tape)
//   fwdbwd_ms  forward + first backward (gg::grad w.r.t. q, k, v with cotangent dO)
//   bob_ms     the second grad call only: d/d(q, k, v, dO) of <Qt,dQ> + <Kt,dK> + <Vt,dV>,
//              first-order graph already built (create_graph)
//   chain_ms   forward + backward(create_graph) + BoB from scratch
//   first_chain_ms  the very first chain at this N (includes any one-time set-up)
//   chain_peak_GiB  peak tensor memory of the chain (gg::cuda::memory_stats)
//   *_TFLOPs   effective rates: forward 4·N²·d, backward 10·N²·d, BoB 32·N²·d per head,
//              halved when causal (the convention, not the kernels' issued flops)
//   fwd_kernel     "wgmma" where the sm_90a kernels apply (built and a 9.x device), else "mma.sync"
//   deterministic  gg::attention_deterministic(): false when run with GG_ATTENTION_DETERMINISTIC=0
// Times: median of repeats after warm-up, CUDA events on the library's stream via
// cudaDeviceSynchronize around each repeat.
//   bench_attention_gpu [--n 1024,4096,...] [--d 64] [--heads 16] [--batch 1] [--dtype bf16|f16|f32]
//                       [--causal] [--reps 5] [--chain-only]
//   --chain-only: one chain per N (no warm-up, no other stages): time and peak memory, for N so
//   long that a single chain takes minutes (the 1M-token run).
#include <cuda_runtime.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <sstream>
#include <string>
#include <vector>

#include "gradgrad.h"
#include "kernels/cuda/kernels.h"

using namespace gg;

namespace {

double median_ms(const std::function<void()>& f, int warm, int reps) {
  for (int i = 0; i < warm; ++i) f();
  cudaDeviceSynchronize();
  std::vector<double> t;
  for (int i = 0; i < reps; ++i) {
    cudaEvent_t a, b;
    cudaEventCreate(&a);
    cudaEventCreate(&b);
    cudaDeviceSynchronize();
    cudaEventRecord(a);
    f();
    cudaDeviceSynchronize();
    cudaEventRecord(b);
    cudaEventSynchronize(b);
    float ms = 0;
    cudaEventElapsedTime(&ms, a, b);
    t.push_back(ms);
    cudaEventDestroy(a);
    cudaEventDestroy(b);
  }
  std::sort(t.begin(), t.end());
  return t[t.size() / 2];
}

std::vector<int64_t> parse_list(const std::string& s) {
  std::vector<int64_t> v;
  std::stringstream ss(s);
  std::string item;
  while (std::getline(ss, item, ',')) v.push_back(std::stoll(item));
  return v;
}

}  // namespace

int main(int argc, char** argv) {
  std::vector<int64_t> ns = {1024, 4096, 8192, 16384, 32768};
  int64_t d = 64, heads = 16, batch = 1;
  int reps = 5;
  bool causal = false, chain_only = false;
  DType dtype = DType::bf16;
  for (int i = 1; i < argc; ++i) {
    std::string a = argv[i];
    auto next = [&]() -> std::string {
      if (i + 1 >= argc) {
        std::fprintf(stderr, "bench_attention_gpu: %s needs a value\n", a.c_str());
        std::exit(2);
      }
      return argv[++i];
    };
    if (a == "--n") ns = parse_list(next());
    else if (a == "--d") d = std::stoll(next());
    else if (a == "--heads") heads = std::stoll(next());
    else if (a == "--batch") batch = std::stoll(next());
    else if (a == "--reps") reps = std::stoi(next());
    else if (a == "--causal") causal = true;
    else if (a == "--chain-only") chain_only = true;
    else if (a == "--dtype") {
      std::string t = next();
      dtype = t == "f16" ? DType::f16 : t == "f32" ? DType::f32 : DType::bf16;
    } else {
      std::fprintf(stderr, "usage: bench_attention_gpu [--n list] [--d D] [--heads H] [--batch B] [--dtype bf16|f16|f32] "
                           "[--causal] [--reps R]\n");
      return a == "--help" ? 0 : 2;
    }
  }
  if (!cuda::is_available()) {
    std::fprintf(stderr, "bench_attention_gpu: no CUDA device\n");
    return 1;
  }
  const Device gpu = Device::cuda(0);
  for (int64_t n : ns) {
    const Shape s = {batch, heads, n, d};
    manual_seed(0);
    Tensor q = randn(s, dtype, gpu).requires_grad_(), k = randn(s, dtype, gpu).requires_grad_(),
           v = randn(s, dtype, gpu).requires_grad_();
    Tensor dO = randn(s, dtype, gpu).requires_grad_();
    Tensor qt = randn(s, dtype, gpu), kt = randn(s, dtype, gpu), vt = randn(s, dtype, gpu);
    const AttentionOptions opt{std::nullopt, causal};
    auto first_order = [&]() {
      Tensor o = attention(q, k, v, opt);
      TensorList g = grad({o}, {q, k, v}, {dO}, {/*create_graph=*/true});
      return sum(g[0] * qt) + sum(g[1] * kt) + sum(g[2] * vt);
    };
    auto chain = [&]() { grad({first_order()}, {q, k, v, dO}); };
    const double per_head = double(n) * double(n) * double(d) * double(batch * heads) * (causal ? 0.5 : 1.0);
    auto error_row = [&](const std::exception& e, const char* mode) {
      return std::string("{\"impl\":\"gradgrad\",") + mode + "\"N\":" + std::to_string(n) + ",\"error\":\"" +
             std::string(e.what()).substr(0, 200) + "\"}";
    };
    std::string row;
    if (chain_only) {
      try {
        cuda::reset_peak_memory_stats(0);
        const int64_t base = cuda::memory_stats(0).current_bytes;
        cudaDeviceSynchronize();
        auto t0 = std::chrono::steady_clock::now();
        chain();
        cudaDeviceSynchronize();
        const double ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
        const double peak = double(cuda::memory_stats(0).peak_bytes - base) / double(1 << 30);
        const double inputs = double(cuda::memory_stats(0).current_bytes) / double(1 << 30);
        char buf[512];
        std::snprintf(buf, sizeof buf,
                      "{\"impl\":\"gradgrad\",\"mode\":\"chain_only\",\"B\":%lld,\"H\":%lld,\"N\":%lld,\"d\":%lld,"
                      "\"dtype\":\"%s\",\"causal\":%s,\"chain_ms\":%.1f,\"chain_peak_GiB\":%.3f,\"inputs_GiB\":%.3f,"
                      "\"chain_TFLOPs\":%.1f}",
                      (long long)batch, (long long)heads, (long long)n, (long long)d, dtype_name(dtype),
                      causal ? "true" : "false", ms, peak, inputs, 46 * per_head / ms / 1e9);
        row = buf;
      } catch (const std::exception& e) {
        row = error_row(e, "\"mode\":\"chain_only\",");
      }
      std::printf("%s\n", row.c_str());
      std::fflush(stdout);
      continue;
    }
    try {
      cudaDeviceSynchronize();
      auto t0 = std::chrono::steady_clock::now();
      chain();
      cudaDeviceSynchronize();
      double first_ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
      double fwd = median_ms([&] { NoGradGuard ng; attention(q, k, v, opt); }, 2, reps);
      double fwdbwd = median_ms([&] { grad({attention(q, k, v, opt)}, {q, k, v}, {dO}); }, 2, reps);
      cuda::reset_peak_memory_stats(0);
      const int64_t base = cuda::memory_stats(0).current_bytes;
      double ch = median_ms(chain, 1, reps);
      double peak = double(cuda::memory_stats(0).peak_bytes - base) / double(1 << 30);
      Tensor inner = first_order();
      double bob = median_ms([&] { grad({inner}, {q, k, v, dO}, {}, {false, /*retain_graph=*/1}); }, 1, reps);
      char buf[768];
      std::snprintf(buf, sizeof buf,
                    "{\"impl\":\"gradgrad\",\"fwd_kernel\":\"%s\",\"deterministic\":%s,\"B\":%lld,\"H\":%lld,\"N\":%lld,\"d\":%lld,\"dtype\":\"%s\",\"causal\":%s,"
                    "\"fwd_ms\":%.4f,\"fwdbwd_ms\":%.4f,\"bob_ms\":%.4f,\"chain_ms\":%.4f,\"first_chain_ms\":%.2f,"
                    "\"chain_peak_GiB\":%.3f,\"fwd_TFLOPs\":%.1f,\"bwd_TFLOPs\":%.1f,\"bob_TFLOPs\":%.1f}",
                    kernels::cuda::testing::sm90_path_available() ? "wgmma" : "mma.sync",
                    attention_deterministic() ? "true" : "false", (long long)batch, (long long)heads, (long long)n, (long long)d, dtype_name(dtype),
                    causal ? "true" : "false", fwd, fwdbwd, bob, ch, first_ms, peak, 4 * per_head / fwd / 1e9,
                    10 * per_head / (fwdbwd - fwd) / 1e9, 32 * per_head / bob / 1e9);
      row = buf;
    } catch (const std::exception& e) {
      row = error_row(e, "");
    }
    std::printf("%s\n", row.c_str());
    std::fflush(stdout);
  }
  return 0;
}
