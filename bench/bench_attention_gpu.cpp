// gg::attention on the GPU, measured the way bench/attention_torch.py measures PyTorch, so both
// can run in one call (scripts/bench-gpu.sh attention) and be compared line by line; the same
// program measures grouped heads, Nq != Nk and windows (scripts/bench-gpu.sh options).
// One JSON object per line on stdout. The configuration:
//   B, hq (also as H), hkv, nq (also as N), nk, d, dtype, causal,
//   window_left, window_right   the window of gg::AttentionOptions, null when unbounded
//   visible_fraction  the (query, key) pairs the mask lets through, over Nq·Nk
// and the measurements:
//   fwd_ms     forward only (no tape)
//   fwdbwd_ms  forward + first backward (gg::grad w.r.t. q, k, v with cotangent dO)
//   bob_ms     the second grad call only: d/d(q, k, v, dO) of <Qt,dQ> + <Kt,dK> + <Vt,dV>,
//              first-order graph already built (create_graph)
//   chain_ms   forward + backward(create_graph) + BoB from scratch
//   first_chain_ms  the very first chain at this size (includes any one-time set-up)
//   chain_runs_ms   every timed chain behind chain_ms, in the order they ran
//   chain_peak_GiB  peak tensor memory of the chain above the inputs (gg::cuda::memory_stats)
//   reps       timed repeats behind each median
//   *_TFLOPs   effective rates: forward 4·P·d, backward 10·P·d, BoB 32·P·d, chain 46·P·d per
//              head, P the counted (query, key) pairs (counted_pairs below), not the kernels'
//              issued flops
//   fwd_kernel     the kernel family the shape takes: "wgmma" (bf16/f16, d 64/128, the sm_90a
//                  kernels built and a 9.x device), "mma.sync" (bf16/f16, d 32/64/128 otherwise),
//                  or "generic" (f32, other d)
//   deterministic  gg::attention_deterministic(): false when run with GG_ATTENTION_DETERMINISTIC=0
// A line with "mode":"chain_only" has chain_ms, chain_peak_GiB, inputs_GiB and chain_TFLOPs of
// one chain from cold; "mode":"skipped" has the estimate that made it skip (--skip-above);
// "error" carries the exception's message.
// Times: median of repeats after warm-up, CUDA events on the library's stream via
// cudaDeviceSynchronize around each repeat.
//   bench_attention_gpu [--n 1024,4096,...] [--nk NK] [--d 64] [--heads 16] [--hkv HKV] [--batch 1]
//                       [--dtype bf16|f16|f32] [--causal] [--window-left W] [--window-right W]
//                       [--reps 5] [--chain-only] [--chain-only-above MS] [--skip-above MS]
//   --heads: query heads Hq. --hkv: key/value heads (default Hq; Hq must be a multiple of it).
//   --n: the query lengths Nq. --nk: the key length for every --n (default Nk = Nq).
//   --window-left, --window-right: keys a query sees before / after its aligned position
//   (default unbounded); --causal is window_right = 0.
//   --chain-only: one chain per size (no warm-up, no other stages): time and peak memory, for
//   sizes so long that a single chain takes minutes (the 1M-token run).
//   --chain-only-above MS: time the stages only where the first chain at a size took at most MS
//   milliseconds; above, write that first chain as a --chain-only line.
//   --skip-above MS: before each size after the first, estimate its chain as the previous size's
//   first chain times the ratio of their visible pairs (what a kernel that skips masked tiles
//   takes; one that visits them takes longer under a window); where the estimate exceeds MS,
//   write a "skipped" line instead of running that size.
#include <cuda_runtime.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <optional>
#include <sstream>
#include <string>
#include <vector>

#include "bench/median.h"
#include "gradgrad.h"
#include "kernels/cuda/attention/testing.h"
#include "kernels/params.h"

using namespace gg;

namespace {

constexpr double kGiB = double(1 << 30);

// The median of reps timed runs after warm untimed ones; all: every run's time, in order.
double median_ms(const std::function<void()>& f, int warm, int reps, std::vector<double>* all = nullptr) {
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
  if (all) *all = t;
  return bench::median(t);
}

std::vector<int64_t> parse_list(const std::string& s) {
  std::vector<int64_t> v;
  std::stringstream ss(s);
  std::string item;
  while (std::getline(ss, item, ',')) v.push_back(std::stoll(item));
  return v;
}

// The (query, key) pairs the mask lets through, row by row, with the kernels' own definition
// of a row's key range (kernels/params.h, AttentionShape::first_key / last_key: query i at the
// bottom-right aligned position i' = i + Nk - Nq sees i' - window_left <= j <= i' + window_right).
int64_t visible_pairs(const kernels::AttentionShape& s) {
  int64_t pairs = 0;
  for (int64_t i = 0; i < s.N; ++i) pairs += std::max<int64_t>(0, s.last_key(i) - s.first_key(i) + 1);
  return pairs;
}

// The pairs the effective rates count per head. The plain causal square (Nq = Nk, no window)
// keeps the convention of the earlier results files, N²/2 exactly, although the mask lets
// N(N+1)/2 through (1/N more: 0.006% at N = 16384), so that the rates of those lines stay
// identical; every other mask counts its visible pairs exactly (Nq·Nk for the full mask).
double counted_pairs(const kernels::AttentionShape& s, bool windowed, int64_t visible) {
  if (s.causal && !windowed && s.keys() == s.N) return 0.5 * double(s.N) * double(s.N);
  return double(visible);
}

std::string json_escape(const std::string& s) {
  std::string out;
  for (char c : s) {
    if (c == '"' || c == '\\') out += '\\', out += c;
    else if (static_cast<unsigned char>(c) < 0x20) out += ' ';
    else out += c;
  }
  return out;
}

std::string opt_json(const std::optional<int64_t>& w) { return w ? std::to_string(*w) : "null"; }

int usage(FILE* to, int rc) {
  std::fprintf(to,
               "usage: bench_attention_gpu [--n list] [--nk NK] [--d D] [--heads HQ] [--hkv HKV] [--batch B]\n"
               "                           [--dtype bf16|f16|f32] [--causal] [--window-left W] [--window-right W]\n"
               "                           [--reps R] [--chain-only] [--chain-only-above MS] [--skip-above MS]\n");
  return rc;
}

}  // namespace

int main(int argc, char** argv) {
  std::vector<int64_t> ns = {1024, 4096, 8192, 16384, 32768};
  int64_t d = 64, heads = 16, hkv = -1, batch = 1, nk_arg = -1;
  std::optional<int64_t> window_left, window_right;
  int reps = 5;
  double chain_only_above = 0, skip_above = 0;
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
    auto positive = [&](int64_t v) {
      if (v <= 0) {
        std::fprintf(stderr, "bench_attention_gpu: %s must be positive, got %lld\n", a.c_str(), (long long)v);
        std::exit(2);
      }
      return v;
    };
    auto window = [&]() -> std::optional<int64_t> {
      const int64_t w = std::stoll(next());
      if (w < 0) {
        std::fprintf(stderr, "bench_attention_gpu: %s must be >= 0, got %lld\n", a.c_str(), (long long)w);
        std::exit(2);
      }
      return w;
    };
    if (a == "--n") ns = parse_list(next());
    else if (a == "--nk") nk_arg = positive(std::stoll(next()));
    else if (a == "--d") d = std::stoll(next());
    else if (a == "--heads") heads = std::stoll(next());
    else if (a == "--hkv") hkv = positive(std::stoll(next()));
    else if (a == "--batch") batch = std::stoll(next());
    else if (a == "--reps") reps = int(positive(std::stoi(next())));
    else if (a == "--causal") causal = true;
    else if (a == "--window-left") window_left = window();
    else if (a == "--window-right") window_right = window();
    else if (a == "--chain-only") chain_only = true;
    else if (a == "--chain-only-above") chain_only_above = std::stod(next());
    else if (a == "--skip-above") skip_above = std::stod(next());
    else if (a == "--dtype") {
      std::string t = next();
      dtype = t == "f16" ? DType::f16 : t == "f32" ? DType::f32 : DType::bf16;
    } else {
      return a == "--help" ? usage(stdout, 0) : usage(stderr, 2);
    }
  }
  if (hkv < 0) hkv = heads;
  if (!cuda::is_available()) {
    std::fprintf(stderr, "bench_attention_gpu: no CUDA device\n");
    return 1;
  }
  const Device gpu = Device::cuda(0);
  const bool windowed = window_left.has_value() || window_right.has_value();
  double prev_first_ms = 0, prev_visible = 0;  // the last measured size, for --skip-above
  for (int64_t n : ns) {
    const int64_t nq = n, nk = nk_arg > 0 ? nk_arg : n;
    kernels::AttentionShape mask;
    mask.B = batch, mask.H = heads, mask.N = nq, mask.d = d, mask.scale = 0, mask.causal = causal;
    mask.Hkv = hkv, mask.Nk = nk, mask.window_left = window_left.value_or(-1);
    mask.window_right = window_right.value_or(-1);
    const int64_t visible = visible_pairs(mask);
    const double area = double(nq) * double(nk);
    // counted pairs · d over all heads: the effective rates multiply it by 4, 10, 32 or 46
    const double work = counted_pairs(mask, windowed, visible) * double(d) * double(batch * heads);
    // bf16/f16 at d 32/64/128 run on tensor cores (kernels/cuda/attention/traits.cuh, choose_path):
    // sm_90a at d 64/128 on a 9.x device with a 90a build, grouped and windowed shapes included;
    // the sm_80 kernels otherwise
    const bool tensor_cores = dtype != DType::f32 && (d == 32 || d == 64 || d == 128);
    const char* kernel = !tensor_cores ? "generic"
                         : kernels::cuda::testing::sm90_path_available() && d != 32 ? "wgmma"
                                                                                   : "mma.sync";
    char cfg[512];
    std::snprintf(cfg, sizeof cfg,
                  "\"B\":%lld,\"H\":%lld,\"hq\":%lld,\"hkv\":%lld,\"N\":%lld,\"nq\":%lld,\"nk\":%lld,\"d\":%lld,"
                  "\"dtype\":\"%s\",\"causal\":%s,\"window_left\":%s,\"window_right\":%s,\"visible_fraction\":%.6f",
                  (long long)batch, (long long)heads, (long long)heads, (long long)hkv, (long long)nq, (long long)nq,
                  (long long)nk, (long long)d, dtype_name(dtype), causal ? "true" : "false",
                  opt_json(window_left).c_str(), opt_json(window_right).c_str(), area > 0 ? double(visible) / area : 0.0);
    const std::string config = cfg;
    const std::string mode = chain_only ? "\"mode\":\"chain_only\"," : "";
    std::string row;
    const double estimate = prev_visible > 0 ? prev_first_ms * double(visible) / prev_visible : 0;
    if (skip_above > 0 && estimate > skip_above) {
      char buf[160];
      std::snprintf(buf, sizeof buf, ",\"estimated_chain_ms\":%.0f,\"skip_above_ms\":%.0f}", estimate, skip_above);
      std::printf("{\"impl\":\"gradgrad\",\"mode\":\"skipped\",%s%s\n", config.c_str(), buf);
      std::fflush(stdout);
      continue;
    }
    try {
      manual_seed(0);
      const Shape qs = {batch, heads, nq, d}, ks = {batch, hkv, nk, d};
      Tensor q = randn(qs, dtype, gpu).requires_grad_(), k = randn(ks, dtype, gpu).requires_grad_(),
             v = randn(ks, dtype, gpu).requires_grad_();
      Tensor dO = randn(qs, dtype, gpu).requires_grad_();
      Tensor qt = randn(qs, dtype, gpu), kt = randn(ks, dtype, gpu), vt = randn(ks, dtype, gpu);
      const AttentionOptions opt{std::nullopt, causal, window_left, window_right};
      auto first_order = [&]() {
        Tensor o = attention(q, k, v, opt);
        TensorList g = grad({o}, {q, k, v}, {dO}, std::nullopt, /*create_graph=*/true);
        return sum(g[0] * qt) + sum(g[1] * kt) + sum(g[2] * vt);
      };
      auto chain = [&]() { grad({first_order()}, {q, k, v, dO}); };

      cuda::reset_peak_memory_stats(0);
      const int64_t base = cuda::memory_stats(0).current_bytes;
      cudaDeviceSynchronize();
      auto t0 = std::chrono::steady_clock::now();
      chain();
      cudaDeviceSynchronize();
      const double first_ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
      const double first_peak = double(cuda::memory_stats(0).peak_bytes - base) / kGiB;
      prev_first_ms = first_ms, prev_visible = double(visible);
      char buf[1024];
      if (chain_only || (chain_only_above > 0 && first_ms > chain_only_above)) {
        const double inputs = double(cuda::memory_stats(0).current_bytes) / kGiB;
        std::snprintf(buf, sizeof buf,
                      "{\"impl\":\"gradgrad\",\"mode\":\"chain_only\",\"fwd_kernel\":\"%s\",%s,\"chain_ms\":%.1f,"
                      "\"chain_peak_GiB\":%.3f,\"inputs_GiB\":%.3f,\"chain_TFLOPs\":%.1f}",
                      kernel, config.c_str(), first_ms, first_peak, inputs, 46 * work / first_ms / 1e9);
        row = buf;
      } else {
        double fwd = median_ms([&] { NoGradGuard ng; attention(q, k, v, opt); }, 2, reps);
        double fwdbwd = median_ms([&] { grad({attention(q, k, v, opt)}, {q, k, v}, {dO}); }, 2, reps);
        cuda::reset_peak_memory_stats(0);
        const int64_t base2 = cuda::memory_stats(0).current_bytes;
        // Three untimed chains first: in one process the second and third chains of a size ran
        // slower than the later ones (windowed 256K on the H200: 119-123 ms against 114), so
        // that one warm-up left a median of three inside that transient.
        std::vector<double> chains;
        double ch = median_ms(chain, 3, reps, &chains);
        double peak = double(cuda::memory_stats(0).peak_bytes - base2) / kGiB;
        Tensor inner = first_order();
        double bob = median_ms([&] { grad({inner}, {q, k, v, dO}, {}, /*retain_graph=*/true); }, 1, reps);
        std::snprintf(buf, sizeof buf,
                      "{\"impl\":\"gradgrad\",\"fwd_kernel\":\"%s\",\"deterministic\":%s,%s,\"reps\":%d,"
                      "\"fwd_ms\":%.4f,\"fwdbwd_ms\":%.4f,\"bob_ms\":%.4f,\"chain_ms\":%.4f,\"first_chain_ms\":%.2f,"
                      "\"chain_peak_GiB\":%.3f,\"fwd_TFLOPs\":%.1f,\"bwd_TFLOPs\":%.1f,\"bob_TFLOPs\":%.1f,"
                      "\"chain_TFLOPs\":%.1f",
                      kernel, attention_deterministic() ? "true" : "false", config.c_str(), reps, fwd, fwdbwd, bob,
                      ch, first_ms, peak, 4 * work / fwd / 1e9, 10 * work / (fwdbwd - fwd) / 1e9,
                      32 * work / bob / 1e9, 46 * work / ch / 1e9);
        row = buf;
        row += ",\"chain_runs_ms\":[";
        for (size_t i = 0; i < chains.size(); ++i) {
          std::snprintf(buf, sizeof buf, "%s%.3f", i ? "," : "", chains[i]);
          row += buf;
        }
        row += "]}";
      }
    } catch (const std::exception& e) {
      row = "{\"impl\":\"gradgrad\"," + mode + config + ",\"error\":\"" +
            json_escape(std::string(e.what()).substr(0, 200)) + "\"}";
    }
    std::printf("%s\n", row.c_str());
    std::fflush(stdout);
  }
  return 0;
}
