// Sequence-parallel attention over P ranks (gg::dist::attention): the second-order chain that
// bench_attention_gpu times on one device (forward, backward with create_graph, BoB of
// <Q̃,dQ> + <K̃,dK> + <Ṽ,dV>), with each rank holding its shard of the N rows of q, k and v.
//
//   scripts/launch.sh 8 build/bench/bench_dist --n 1048576 --causal       one process per GPU (NCCL)
//   build/bench/bench_dist --threads 2 --device cpu --dtype f64 --n 64   P ranks as threads
//
// One line of JSON per N, from rank 0:
//   ranks, launch ("nccl" or "threads"), N, B, H, hkv, d, dtype, causal, schedule, sharding
//   first_chain_ms  the first chain at this N (includes any one-time set-up)
//   chain_ms        median of --reps chains after --warmup untimed ones; each is timed from a
//                   barrier (every rank's device idle) to the barrier after every rank has
//                   synchronised its device, on rank 0's host clock
//   chain_runs_ms   the timed chains, in order
//   peak_GiB        the largest rank's peak tensor memory during the chains above what it held
//                   before (threads: the process's, all ranks together)
//   chain_TFLOPs    46 · visible pairs · d per head over chain_ms (as bench_attention_gpu counts)
//   fused_chain_ms  one rank only: the same chain through gg::attention on the whole sequence
//                   (the rank's rows are all of it, in order), timed the same way: the baseline
//                   that a speed-up over one GPU is taken against
// With --threads, a configuration that fails prints a line with "error" instead; one process per
// rank exits non-zero (scripts/launch.sh then stops the other ranks).
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <sstream>
#include <string>
#include <vector>

#include "bench/median.h"
#include "gradgrad.h"

namespace {

using namespace gg;
using Clock = std::chrono::steady_clock;

struct Config {
  std::vector<int64_t> sizes = {65536};
  int64_t batch = 1, heads = 8, hkv = 0, d = 64;  // hkv 0: heads
  std::string dtype = "bf16", device = "cuda", schedule = "ring", sharding = "zigzag";
  dist::Sharding cut() const { return sharding == "zigzag" ? dist::Sharding::zigzag : dist::Sharding::contiguous; }
  bool causal = false;
  int reps = 3, warmup = 1, threads = 0;  // threads 0: one process per rank (NcclGroup)
};

// The rows rank r holds of N: its contiguous block, or zig-zag chunks r and 2P - 1 - r
// (dist::zigzag_shard's cut: 2P chunks, the longer first).
int64_t rows_of(int64_t N, int64_t P, int64_t r, dist::Sharding sharding) {
  if (sharding == dist::Sharding::contiguous) return N / P + (r < N % P ? 1 : 0);
  auto chunk = [&](int64_t i) { return N / (2 * P) + (i < N % (2 * P) ? 1 : 0); };
  return chunk(r) + chunk(2 * P - 1 - r);
}

// The (query, key) pairs the mask lets through, per head: N² (full) or N(N + 1)/2 (causal).
double visible_pairs(int64_t N, bool causal) {
  const double n = static_cast<double>(N);
  return causal ? n * (n + 1) / 2 : n * n;
}

struct Inputs {
  Tensor q, k, v, dO, qt, kt, vt;
};

Inputs make_inputs(const Config& c, int64_t rows, DType dt, Device dev) {
  const int64_t hkv = c.hkv > 0 ? c.hkv : c.heads;
  const Shape qs = {c.batch, c.heads, rows, c.d}, ks = {c.batch, hkv, rows, c.d};
  Inputs in{randn(qs, dt, dev), randn(ks, dt, dev), randn(ks, dt, dev), randn(qs, dt, dev),
            randn(qs, dt, dev),  randn(ks, dt, dev), randn(ks, dt, dev)};
  for (Tensor* t : {&in.q, &in.k, &in.v, &in.dO}) t->requires_grad_();
  return in;
}

void sync(Device dev) {
  if (dev.is_cuda()) cuda::synchronize();
}
void reset_peak(Device dev) {
  if (dev.is_cuda()) cuda::reset_peak_memory_stats(dev.index);
  else cpu::reset_peak_memory_stats();
}
MemoryStats stats(Device dev) { return dev.is_cuda() ? cuda::memory_stats(dev.index) : cpu::memory_stats(); }

// One rank's part of the measurement at one N; rank 0 returns the JSON line.
std::string measure(dist::Group& g, const Config& c, int64_t N, const Inputs& in, Device dev) {
  const dist::Schedule schedule = c.schedule == "ring" ? dist::Schedule::ring : dist::Schedule::all_gather;
  const AttentionOptions opt{std::nullopt, c.causal};
  auto chain = [&](bool fused) {  // fused: through gg::attention instead (one rank)
    const Tensor o = fused ? attention(in.q, in.k, in.v, opt) : dist::attention(g, in.q, in.k, in.v, opt, c.cut(), schedule);
    GradOptions create;
    create.create_graph = true;
    const TensorList d1 = grad({o}, {in.q, in.k, in.v}, {in.dO}, create);
    const Tensor inner = sum(d1[0] * in.qt) + sum(d1[1] * in.kt) + sum(d1[2] * in.vt);
    grad({inner}, {in.q, in.k, in.v, in.dO});
  };
  auto timed = [&](bool fused) {
    sync(dev);
    g.barrier();
    const auto t0 = Clock::now();
    chain(fused);
    sync(dev);
    g.barrier();
    return std::chrono::duration<double, std::milli>(Clock::now() - t0).count();
  };
  sync(dev);
  g.barrier();
  const int64_t before = stats(dev).current_bytes;
  reset_peak(dev);
  const double first = timed(false);
  for (int i = 0; i < c.warmup; ++i) timed(false);
  std::vector<double> runs;
  for (int i = 0; i < c.reps; ++i) runs.push_back(timed(false));
  const double peak = static_cast<double>(stats(dev).peak_bytes - before) / double(1 << 30);
  const std::vector<double> peaks = g.all_gather(full({1}, peak, DType::f64, dev), 0).to_vector<double>();
  std::vector<double> fused_runs;
  if (g.size() == 1) {
    for (int i = 0; i < 1 + c.warmup; ++i) timed(true);
    for (int i = 0; i < c.reps; ++i) fused_runs.push_back(timed(true));
  }
  if (g.rank() != 0) return {};
  const double median = bench::median(runs);
  const int64_t hkv = c.hkv > 0 ? c.hkv : c.heads;
  const double work = visible_pairs(N, c.causal) * static_cast<double>(c.batch * c.heads * c.d);
  char buf[768];
  std::snprintf(buf, sizeof buf,
                "{\"bench\":\"dist_attention\",\"ranks\":%d,\"launch\":\"%s\",\"N\":%lld,\"B\":%lld,\"H\":%lld,"
                "\"hkv\":%lld,\"d\":%lld,\"dtype\":\"%s\",\"causal\":%s,\"schedule\":\"%s\",\"sharding\":\"%s\","
                "\"reps\":%d,\"first_chain_ms\":%.2f,\"chain_ms\":%.3f,\"peak_GiB\":%.3f,\"chain_TFLOPs\":%.1f,"
                "\"chain_runs_ms\":[",
                g.size(), c.threads > 0 ? "threads" : "nccl", static_cast<long long>(N),
                static_cast<long long>(c.batch), static_cast<long long>(c.heads), static_cast<long long>(hkv),
                static_cast<long long>(c.d), c.dtype.c_str(), c.causal ? "true" : "false", c.schedule.c_str(),
                c.sharding.c_str(), c.reps, first, median, *std::max_element(peaks.begin(), peaks.end()),
                46 * work / median / 1e9);
  std::string line = buf;
  for (size_t i = 0; i < runs.size(); ++i) {
    std::snprintf(buf, sizeof buf, "%s%.3f", i ? "," : "", runs[i]);
    line += buf;
  }
  line += "]";
  if (!fused_runs.empty()) {
    std::snprintf(buf, sizeof buf, ",\"fused_chain_ms\":%.3f", bench::median(fused_runs));
    line += buf;
  }
  return line + "}";
}

std::string error_line(const Config& c, int ranks, int64_t N, const std::exception& e) {
  std::string msg = e.what();
  for (char& ch : msg)
    if (ch == '"' || ch == '\\' || ch == '\n') ch = ' ';
  return "{\"bench\":\"dist_attention\",\"ranks\":" + std::to_string(ranks) + ",\"launch\":\"" +
         (c.threads > 0 ? "threads" : "nccl") + "\",\"N\":" + std::to_string(N) + ",\"error\":\"" +
         msg.substr(0, 200) + "\"}";
}

int usage(FILE* to, int rc) {
  std::fprintf(to,
               "usage: bench_dist [--n N,N...] [--batch B] [--heads H] [--hkv HKV] [--d D] [--dtype bf16|f16|f32|f64]\n"
               "                  [--causal] [--schedule ring|all_gather] [--sharding zigzag|contiguous]\n"
               "                  [--reps R] [--warmup W] [--threads P] [--device cuda|cpu]\n"
               "  one process per rank under scripts/launch.sh (NcclGroup), or --threads P ranks in this process\n");
  return rc;
}

}  // namespace

int main(int argc, char** argv) {
  Config c;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    auto next = [&]() -> std::string {
      if (i + 1 >= argc) std::exit(usage(stderr, 2));
      return argv[++i];
    };
    auto number = [&](int64_t lo) {
      const std::string v = next();
      char* end = nullptr;
      const long long x = std::strtoll(v.c_str(), &end, 10);
      if (v.empty() || *end != '\0' || x < lo) {
        std::fprintf(stderr, "bench_dist: %s must be an integer >= %lld, got '%s'\n", a.c_str(), (long long)lo,
                     v.c_str());
        std::exit(2);
      }
      return static_cast<int64_t>(x);
    };
    auto one_of = [&](std::initializer_list<const char*> choices) {
      const std::string v = next();
      for (const char* ch : choices)
        if (v == ch) return v;
      std::fprintf(stderr, "bench_dist: %s does not take '%s'\n", a.c_str(), v.c_str());
      std::exit(2);
    };
    if (a == "--n") {
      std::stringstream list(next());
      std::string item;
      c.sizes.clear();
      while (std::getline(list, item, ',')) {
        char* end = nullptr;
        const long long n = std::strtoll(item.c_str(), &end, 10);
        if (item.empty() || *end != '\0' || n < 1) {
          std::fprintf(stderr, "bench_dist: --n takes positive integers, got '%s'\n", item.c_str());
          return 2;
        }
        c.sizes.push_back(n);
      }
    } else if (a == "--batch") c.batch = number(1);
    else if (a == "--heads") c.heads = number(1);
    else if (a == "--hkv") c.hkv = number(0);
    else if (a == "--d") c.d = number(1);
    else if (a == "--dtype") c.dtype = one_of({"bf16", "f16", "f32", "f64"});
    else if (a == "--device") c.device = one_of({"cuda", "cpu"});
    else if (a == "--causal") c.causal = true;
    else if (a == "--schedule") c.schedule = one_of({"ring", "all_gather"});
    else if (a == "--sharding") c.sharding = one_of({"zigzag", "contiguous"});
    else if (a == "--reps") c.reps = static_cast<int>(number(1));
    else if (a == "--warmup") c.warmup = static_cast<int>(number(0));
    else if (a == "--threads") c.threads = static_cast<int>(number(0));
    else return a == "--help" ? usage(stdout, 0) : usage(stderr, 2);
  }
  std::setvbuf(stdout, nullptr, _IOLBF, 0);
  const DType dt = c.dtype == "bf16" ? DType::bf16 : c.dtype == "f16" ? DType::f16
                 : c.dtype == "f32"  ? DType::f32 : DType::f64;
  try {
    if (c.threads > 0) {
      const Device dev = c.device == "cuda" ? Device::cuda(0) : Device::cpu();
      for (const int64_t N : c.sizes) {
        // gg::randn is not thread safe: every rank's inputs first
        std::vector<Inputs> in;
        manual_seed(0);
        for (int r = 0; r < c.threads; ++r) in.push_back(make_inputs(c, rows_of(N, c.threads, r, c.cut()), dt, dev));
        std::string line;
        try {
          dist::run_threads(c.threads, [&](dist::Group& g) {
            const std::string l = measure(g, c, N, in[static_cast<size_t>(g.rank())], dev);
            if (g.rank() == 0) line = l;
          });
        } catch (const std::exception& e) {
          line = error_line(c, c.threads, N, e);
        }
        std::printf("%s\n", line.c_str());
      }
      return 0;
    }
    GG_CHECK(c.device == "cuda", ValueError, "one process per rank runs on CUDA (NcclGroup); use --threads P "
             "for ranks on the CPU");
    // A rank that fails exits non-zero, and scripts/launch.sh stops the others.
    const auto group = dist::NcclGroup::create();
    for (const int64_t N : c.sizes) {
      manual_seed(static_cast<uint64_t>(group->rank()));
      const Inputs in = make_inputs(c, rows_of(N, group->size(), group->rank(), c.cut()), dt, group->device());
      const std::string line = measure(*group, c, N, in, group->device());
      if (group->rank() == 0) std::printf("%s\n", line.c_str());
    }
  } catch (const std::exception& e) {
    std::fprintf(stderr, "bench_dist: %s\n", e.what());
    return 2;
  }
  return 0;
}
