// Fused attention (gg::attention) against the composite ground truth (gg::attention_composite),
// f32 on the CPU: wall time and peak tensor memory of each derivative level.
//
// Shapes: q, k, v, dO, Q̃, K̃, Ṽ are (B, H, N, d) = (1, 1, N, d), d = 64 by default.
// Stages, each timed on its own (median of a few runs after one warm-up run):
//   forward   O = attention(q, k, v)                       (inputs require grad: the tape records)
//   backward  grad(O, {q, k, v}, dO), graph retained       (only the grad call is timed)
//   bob       grad(<Q̃,dQ> + <K̃,dK> + <Ṽ,dV>, {q, k, v, dO}) on a first-order graph built with
//             create_graph, graph retained                 (only this second grad call is timed)
//   chain     forward + backward(create_graph) + bob, from scratch each run
// Memory: gg::cpu::reset_peak_memory_stats() right before the timed region, then
// memory_stats().peak_bytes minus the bytes live before it, i.e. what the stage adds on top of
// its inputs (and, for backward and bob, on top of the graph it differentiates). Only tensor
// storage is counted: the kernels' own scratch (per-thread tiles, row-scalar vectors) is not.
//
// A composite stage whose time, extrapolated as N² from the previous N, would pass
// --max-seconds is skipped; one whose warm-up run passes it is reported from that single run.
//
// Run: ./build-attn/bench/bench_attention_cpu [--sizes 256,1024,4096] [--mask both] [--json out.jsonl]
//
// --jvp: instead of the above, the kernels alone (kernels/cpu/attention.h, raw f32 buffers, no
// tape): attention_fwd (O, L) against attention_jvp (O, L and their tangents for tangents of q,
// k and v), run alternately, median of --repeats pairs each and the median of the pairs' ratios
// JVP/forward (the JVP does three times the forward's matrix work).
#include <CLI/CLI.hpp>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <map>
#include <string>
#include <vector>

#include "bench/median.h"
#include "gradgrad.h"
#include "kernels/cpu/attention.h"

namespace {

using Clock = std::chrono::steady_clock;
using AttnFn = gg::Tensor (*)(const gg::Tensor&, const gg::Tensor&, const gg::Tensor&, const gg::AttentionOptions&);

gg::Tensor fused(const gg::Tensor& q, const gg::Tensor& k, const gg::Tensor& v, const gg::AttentionOptions& o) {
  return gg::attention(q, k, v, o);
}
gg::Tensor composite(const gg::Tensor& q, const gg::Tensor& k, const gg::Tensor& v, const gg::AttentionOptions& o) {
  return gg::attention_composite(q, k, v, o);
}

struct Config {
  std::vector<int64_t> sizes = {256, 1024, 4096};
  int64_t d = 64;
  int repeats = 9;             // timed runs after the warm-up (at least 3 unless skipped)
  double stage_budget_s = 20;  // fewer repeats (not under 3) when a stage is slow
  double max_seconds = 60;     // composite stages predicted or measured slower are skipped
  std::string mask = "both";  // full, causal or both
  std::string json_path;
  bool jvp = false;
};

enum class Stage { forward, backward, bob, chain };
const char* stage_name(Stage s) {
  switch (s) {
    case Stage::forward: return "forward";
    case Stage::backward: return "backward";
    case Stage::bob: return "bob";
    case Stage::chain: return "chain";
  }
  return "?";
}
constexpr Stage kStages[] = {Stage::forward, Stage::backward, Stage::bob, Stage::chain};

struct Result {
  bool ran = false;        // false: skipped
  bool single_run = false;  // the warm-up alone passed max_seconds; no repeats
  double median_s = 0, min_s = 0;
  int runs = 0;
  int64_t peak_bytes = 0;  // max over runs of (peak during the timed region - live before it)
  std::string note;
};

// Inputs of one (N, causal) case, shared by both implementations.
struct Inputs {
  gg::Tensor q, k, v, dO;  // (1, 1, N, d) leaves that require grad
  gg::Tensor qt, kt, vt;   // (1, 1, N, d) cotangents of dQ, dK, dV (constants)
};

Inputs make_inputs(int64_t N, int64_t d) {
  const gg::Shape s = {1, 1, N, d};
  Inputs in;
  for (gg::Tensor* t : {&in.q, &in.k, &in.v, &in.dO}) {
    *t = gg::randn(s);
    t->requires_grad_(true);
  }
  in.qt = gg::randn(s);
  in.kt = gg::randn(s);
  in.vt = gg::randn(s);
  return in;
}

// <Q̃, dQ> + <K̃, dK> + <Ṽ, dV>: the scalar whose gradient is BoB.
gg::Tensor bob_objective(const Inputs& in, const gg::TensorList& d) {
  return gg::sum(in.qt * d[0]) + gg::sum(in.kt * d[1]) + gg::sum(in.vt * d[2]);
}

// One timed run of `call` (which returns the tensors it made, kept alive until the clock stops).
template <typename Call>
void run_once(Call& call, double& seconds, int64_t& peak_bytes) {
  const int64_t live_before = gg::cpu::memory_stats().current_bytes;
  gg::cpu::reset_peak_memory_stats();
  const auto t0 = Clock::now();
  {
    gg::TensorList made = call();
    seconds = std::chrono::duration<double>(Clock::now() - t0).count();
    peak_bytes = gg::cpu::memory_stats().peak_bytes - live_before;
  }
}

template <typename Call>
Result measure(Call&& call, const Config& cfg) {
  Result r;
  r.ran = true;
  double warm_s = 0;
  int64_t warm_peak = 0;
  run_once(call, warm_s, warm_peak);
  r.peak_bytes = warm_peak;
  if (warm_s > cfg.max_seconds) {
    r.single_run = true;
    r.median_s = r.min_s = warm_s;
    r.runs = 1;
    r.note = "warm-up run only (> max-seconds)";
    return r;
  }
  const int by_budget = static_cast<int>(cfg.stage_budget_s / std::max(warm_s, 1e-9));
  const int runs = std::max(std::min(cfg.repeats, by_budget), std::min(cfg.repeats, 3));
  std::vector<double> times;
  for (int i = 0; i < runs; ++i) {
    double t = 0;
    int64_t peak = 0;
    run_once(call, t, peak);
    times.push_back(t);
    r.peak_bytes = std::max(r.peak_bytes, peak);
  }
  r.median_s = bench::median(times);
  r.min_s = *std::min_element(times.begin(), times.end());
  r.runs = static_cast<int>(times.size());
  return r;
}

Result run_stage(Stage stage, AttnFn f, const Inputs& in, bool causal, const Config& cfg) {
  const gg::AttentionOptions o{std::nullopt, causal};
  const gg::TensorList qkv = {in.q, in.k, in.v};
  const gg::TensorList wrt = {in.q, in.k, in.v, in.dO};
  gg::GradOptions keep, record;
  keep.retain_graph = true;
  record.create_graph = true;
  switch (stage) {
    case Stage::forward:
      return measure([&] { return gg::TensorList{f(in.q, in.k, in.v, o)}; }, cfg);
    case Stage::backward: {
      gg::Tensor O = f(in.q, in.k, in.v, o);
      return measure([&] { return gg::grad({O}, qkv, {in.dO}, keep); }, cfg);
    }
    case Stage::bob: {
      gg::Tensor O = f(in.q, in.k, in.v, o);
      gg::TensorList d = gg::grad({O}, qkv, {in.dO}, record);
      gg::Tensor inner = bob_objective(in, d);
      return measure([&] { return gg::grad({inner}, wrt, {}, keep); }, cfg);
    }
    case Stage::chain:
      return measure(
          [&] {
            gg::Tensor O = f(in.q, in.k, in.v, o);
            gg::TensorList d = gg::grad({O}, qkv, {in.dO}, record);
            return gg::grad({bob_objective(in, d)}, wrt);
          },
          cfg);
  }
  return {};
}

double mib(int64_t bytes) { return static_cast<double>(bytes) / (1024.0 * 1024.0); }

std::string load_average() {
  std::ifstream f("/proc/loadavg");
  std::string a, b, c;
  f >> a >> b >> c;
  return a + " " + b + " " + c;
}

std::string fmt(const char* format, double x) {
  char buf[64];
  std::snprintf(buf, sizeof buf, format, x);
  return buf;
}

// Milliseconds with about three significant digits.
std::string fmt_ms(double s) {
  const double ms = s * 1e3;
  return fmt(ms < 10 ? "%.3f" : ms < 100 ? "%.2f" : ms < 1000 ? "%.1f" : "%.0f", ms);
}

void write_json_line(std::ofstream& out, const char* impl, int64_t N, int64_t d, bool causal, Stage stage,
                     const Result& r) {
  out << "{\"impl\":\"" << impl << "\",\"dtype\":\"f32\",\"B\":1,\"H\":1,\"N\":" << N << ",\"d\":" << d
      << ",\"causal\":" << (causal ? "true" : "false") << ",\"stage\":\"" << stage_name(stage)
      << "\",\"skipped\":" << (r.ran ? "false" : "true");
  if (r.ran)
    out << ",\"median_ms\":" << r.median_s * 1e3 << ",\"min_ms\":" << r.min_s * 1e3 << ",\"runs\":" << r.runs
        << ",\"peak_bytes\":" << r.peak_bytes;
  if (!r.note.empty()) out << ",\"note\":\"" << r.note << "\"";
  out << "}\n";
}

// --jvp: attention_fwd against attention_jvp on the same inputs, alternating, f32, (1, 1, N, d).
int run_jvp_mode(const Config& cfg, const std::vector<bool>& masks) {
  namespace kc = gg::kernels::cpu;
  std::printf("| N | mask | forward ms | JVP ms | JVP/forward (median of pair ratios) | runs |\n");
  std::printf("|---:|---|---:|---:|---:|---:|\n");
  for (int64_t N : cfg.sizes)
    for (bool causal : masks) {
      const gg::Shape s = {1, 1, N, cfg.d};
      std::vector<std::vector<float>> in;
      for (int i = 0; i < 6; ++i) in.push_back(gg::randn(s).to_vector<float>());  // q, k, v and tangents
      std::vector<float> O(in[0].size()), L(static_cast<size_t>(N)), Od(O.size()), Ld(L.size());
      const gg::kernels::AttentionShape p{1, 1, N, cfg.d, 1.0 / std::sqrt(static_cast<double>(cfg.d)), causal};
      auto fwd = [&] { kc::attention_fwd<float>(p, in[0].data(), in[1].data(), in[2].data(), O.data(), L.data()); };
      auto jvp = [&] {
        kc::attention_jvp<float>(p, in[0].data(), in[1].data(), in[2].data(), in[3].data(), in[4].data(), in[5].data(),
                                 O.data(), L.data(), Od.data(), Ld.data());
      };
      auto timed = [](auto& f) {
        const auto t0 = Clock::now();
        f();
        return std::chrono::duration<double>(Clock::now() - t0).count();
      };
      fwd();  // warm-up
      jvp();
      std::vector<double> tf, tj, ratio;
      for (int r = 0; r < std::max(cfg.repeats, 3); ++r) {
        tf.push_back(timed(fwd));
        tj.push_back(timed(jvp));
        ratio.push_back(tj.back() / tf.back());
      }
      std::printf("| %lld | %s | %s | %s | %.2f | %zu |\n", static_cast<long long>(N), causal ? "causal" : "full",
                  fmt_ms(bench::median(tf)).c_str(), fmt_ms(bench::median(tj)).c_str(), bench::median(ratio),
                  tf.size());
      std::fflush(stdout);
    }
  std::printf("load average at end: %s\n", load_average().c_str());
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  Config cfg;
  CLI::App app{"Fused vs composite attention on the CPU (f32, B=1, H=1): forward, backward, BoB, chain"};
  app.add_option("--sizes", cfg.sizes, "sequence lengths N")->delimiter(',');
  app.add_option("--d", cfg.d, "head dim");
  app.add_option("--repeats", cfg.repeats, "timed runs per stage after one warm-up");
  app.add_option("--stage-budget", cfg.stage_budget_s, "seconds per stage; slow stages run fewer (>= 3) repeats");
  app.add_option("--max-seconds", cfg.max_seconds, "skip composite stages predicted slower than this (N^2 scaling)");
  app.add_option("--mask", cfg.mask, "full, causal or both")->check(CLI::IsMember({"full", "causal", "both"}));
  app.add_option("--json", cfg.json_path, "write one JSON line per (impl, N, causal, stage) to this file");
  app.add_flag("--jvp", cfg.jvp, "time the forward and JVP kernels alone (f32), not the op levels");
  CLI11_PARSE(app, argc, argv);

  if (cfg.jvp) {
    const char* threads = std::getenv("OMP_NUM_THREADS");
    std::printf("load average at start: %s; OMP_NUM_THREADS=%s\n", load_average().c_str(), threads ? threads : "(unset)");
    gg::manual_seed(0);
    std::vector<bool> jvp_masks;
    if (cfg.mask != "causal") jvp_masks.push_back(false);
    if (cfg.mask != "full") jvp_masks.push_back(true);
    return run_jvp_mode(cfg, jvp_masks);
  }
  std::ofstream json;
  if (!cfg.json_path.empty()) {
    json.open(cfg.json_path);
    if (!json) {
      std::fprintf(stderr, "bench_attention_cpu: cannot open --json file '%s'\n", cfg.json_path.c_str());
      return 1;
    }
  }
  std::printf("load average at start: %s\n", load_average().c_str());
  std::fflush(stdout);

  struct Row {
    int64_t N;
    bool causal;
    Stage stage;
    Result fused, composite;
  };
  std::vector<Row> rows;
  // Composite median time per (causal, stage) at the previous N, for the N² extrapolation.
  std::map<std::pair<bool, int>, std::pair<int64_t, double>> last_composite;

  gg::manual_seed(0);
  std::vector<bool> masks;
  if (cfg.mask != "causal") masks.push_back(false);
  if (cfg.mask != "full") masks.push_back(true);
  for (int64_t N : cfg.sizes)
    for (bool causal : masks) {
      const Inputs in = make_inputs(N, cfg.d);
      for (Stage stage : kStages) {
        Row row{N, causal, stage, {}, {}};
        row.fused = run_stage(stage, fused, in, causal, cfg);
        const auto key = std::make_pair(causal, static_cast<int>(stage));
        const auto it = last_composite.find(key);
        double predicted = 0;
        if (it != last_composite.end()) {
          const double ratio = static_cast<double>(N) / static_cast<double>(it->second.first);
          predicted = it->second.second * ratio * ratio;
        }
        if (predicted > cfg.max_seconds) {
          row.composite.note = "skipped: predicted " + fmt("%.0f", predicted) + " s > max-seconds";
        } else {
          row.composite = run_stage(stage, composite, in, causal, cfg);
          last_composite[key] = {N, row.composite.median_s};
        }
        std::fprintf(stderr, "N=%lld %s %-8s fused %s ms, composite %s ms\n", static_cast<long long>(N),
                     causal ? "causal" : "full  ", stage_name(stage), fmt_ms(row.fused.median_s).c_str(),
                     row.composite.ran ? fmt_ms(row.composite.median_s).c_str() : "skipped");
        if (json.is_open()) {
          write_json_line(json, "fused", N, cfg.d, causal, stage, row.fused);
          write_json_line(json, "composite", N, cfg.d, causal, stage, row.composite);
          json.flush();
        }
        rows.push_back(row);
      }
    }

  std::printf("load average at end: %s\n\n", load_average().c_str());
  std::printf("| N | mask | stage | fused ms | composite ms | time fused/comp | fused peak MiB | composite peak MiB | "
              "memory fused/comp |\n");
  std::printf("|---:|---|---|---:|---:|---:|---:|---:|---:|\n");
  for (const Row& r : rows) {
    const Result &a = r.fused, &b = r.composite;
    const std::string mark = b.single_run ? " (1 run)" : "";
    std::printf("| %lld | %s | %s | %s | %s | %s | %s | %s | %s |\n", static_cast<long long>(r.N),
                r.causal ? "causal" : "full", stage_name(r.stage), fmt_ms(a.median_s).c_str(),
                b.ran ? (fmt_ms(b.median_s) + mark).c_str() : "skipped", b.ran ? fmt("%.2f", a.median_s / b.median_s).c_str() : "—",
                fmt("%.2f", mib(a.peak_bytes)).c_str(), b.ran ? fmt("%.1f", mib(b.peak_bytes)).c_str() : "—",
                b.ran && b.peak_bytes > 0 ? fmt("%.3f", static_cast<double>(a.peak_bytes) / b.peak_bytes).c_str() : "—");
  }
  for (const Row& r : rows)
    if (!r.composite.note.empty())
      std::printf("\nN=%lld %s %s composite: %s", static_cast<long long>(r.N), r.causal ? "causal" : "full",
                  stage_name(r.stage), r.composite.note.c_str());
  std::printf("\n");
  return 0;
}
