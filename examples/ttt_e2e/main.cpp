// End-to-end test-time training (TTT-E2E, Tandon et al. 2025), tiny, with gradgrad.
//
//   A causal transformer LM (2 blocks, d_model 64, 4 heads, chunk-local causal gg::attention)
//   reads each sequence in chunks of 32 tokens. After every chunk it takes SGD steps on that
//   chunk's next-token loss, updating only the MLP weights of its last blocks (one copy per
//   sequence), and predicts the next chunk with the updated weights. The outer loop meta-learns
//   all initial weights through those inner steps: second order, so the outer gradient runs
//   backward-over-backward through causal attention (ttt.h explains where).
//
//   Data: every sequence comes from its own random sparse Markov chain over 16 tokens (markov.h),
//   so what was learned from a sequence's first chunks pays on its later ones.
//
//   Reported on held-out sequences, as the continuation loss (mean next-token CE on chunks 1..):
//     (1) no TTT:                the ordinarily trained model
//     (2) TTT, ordinary model:   inner steps at test time, but trained without them
//     (3) TTT, meta-learned:     trained with the inner loop (TTT-E2E)
//   and the entropy rate of the true chains as the floor.
//
// Files: markov.h (data), ttt.h (model on gg::nn, unroll, meta-loss), report.h (progress bar,
// statistics, plot); the outer optimiser is gg::optim::Adam with a warm-up + cosine schedule.
// See docs/examples.md.
#include <CLI/CLI.hpp>
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "gradgrad.h"
#include "markov.h"
#include "report.h"
#include "common/cli.h"
#include "common/data_parallel.h"
#include "common/metrics.h"
#include "common/run.h"
#include "ttt.h"

namespace {

using examples::seconds_since;
using nlohmann::json;
using ttt::Chunks;
using ttt::Model;
using ttt::Order;

// ------------------------------------------------------------------------- settings
constexpr uint64_t kValSeed = 2024, kEvalSeed = 2025;  // held-out sequences, independent of --seed
constexpr int64_t kEvalBatch = 64;
const std::vector<double> kLrGrid = {1.0 / 64, 1.0 / 16, 0.25, 0.5, 1.0, 2.0, 4.0};  // × η, for the ordinary model

struct Config {
  std::string device_name;
  gg::Device device = gg::Device::cpu();
  uint64_t seed = 0;
  int iterations = 1500;  // about 10 minutes per run on a 2-core CPU (OMP_NUM_THREADS=1)
  bool smoke = false;
  std::string out_dir = "ttt_e2e_out";
  ttt::ModelConfig model;
  int64_t seq_len = 128, batch = 16;
  int world_size = 1;  // data-parallel ranks sharing each batch (threads, or processes with --nccl)
  bool nccl = false;
  std::shared_ptr<gg::dist::Group> process_group;  // --nccl: this process's rank
  ttt::InnerLoop inner{1.0, 1};
  double lr = 3e-3, clip = 1.0;
  int64_t eval_seqs = 512, val_seqs = 128;
};

// ------------------------------------------------------------------------- self-checks
// In f64 on a tiny model (V 5, D 8, 2 heads, chunks of 4, 3 chunks, 3 sequences, 2 inner steps
// with η = 0.5, the MLPs of both blocks fast): the second-order outer gradient against finite
// differences, and the fused attention against the composite one.
struct Tiny {
  Model model;
  Chunks data;
  ttt::InnerLoop inner{0.5, 2};
};

Tiny make_tiny(gg::Device device) {
  const gg::DType f64 = gg::DType::f64;
  ttt::ModelConfig c;
  c.vocab = 5, c.d_model = 8, c.heads = 2, c.blocks = 2, c.mlp_hidden = 16, c.chunk = 4, c.ttt_blocks = 2;
  gg::manual_seed(7);
  const Model base = ttt::init_model(c, f64, device);
  gg::TensorList p;  // away from the almost linear initial point, so second-order terms are not tiny
  for (const gg::Tensor& t : base.parameters()) p.push_back((t.detach() + gg::randn_like(t) * 0.3).requires_grad_());
  ttt::MarkovSampler sampler(11, c.vocab);
  Tiny tiny{base.with_parameters(p), ttt::make_chunks(sampler.sample(3, 12), c.chunk, c.vocab, f64, device)};
  return tiny;
}

double directional(const gg::TensorList& g, const gg::TensorList& v) {
  double d = 0.0;
  for (size_t i = 0; i < g.size(); ++i) d += gg::sum(g[i] * v[i]).item();
  return d;
}

// (1) <∇θ meta-loss, v> for a random direction v, against central differences of the meta-loss.
bool check_outer_gradient(gg::Device device, json& out) {
  const Tiny t = make_tiny(device);
  const gg::TensorList theta = t.model.parameters();
  gg::TensorList v;
  for (const gg::Tensor& p : theta) v.push_back(gg::randn_like(p));
  auto loss_at = [&](double h) {  // meta-loss(θ + h·v)
    gg::TensorList shifted;
    for (size_t i = 0; i < theta.size(); ++i) shifted.push_back((theta[i].detach() + v[i] * h).requires_grad_());
    return ttt::meta_loss(t.model.with_parameters(shifted), t.data, t.inner, Order::first_order).item();
  };
  // Five-point central differences (error O(h⁴)): the unrolled meta-loss is strongly curved
  // along a random direction through all weights (at h = 1e-3 the estimate is 5% off), and the
  // three-point formula's O(h²) error alone reaches 1e-5 relative at h = 1e-5.
  const double h = 1e-5;
  const double fd = (8.0 * (loss_at(h) - loss_at(-h)) - (loss_at(2 * h) - loss_at(-2 * h))) / (12 * h);
  auto along = [&](Order order) { return directional(gg::grad({ttt::meta_loss(t.model, t.data, t.inner, order)}, theta), v); };
  const double second = along(Order::second_order), first = along(Order::first_order);
  const double rel = std::abs(second - fd) / std::max(std::abs(fd), 1e-12);
  const double tolerance = 1e-6;
  const bool ok = rel < tolerance;
  std::printf("  outer gradient along a random direction: finite differences %.10f, second order %.10f "
              "(rel. error %.1e, tolerance %.0e) %s; first order %.10f\n",
              fd, second, rel, tolerance, ok ? "ok" : "FAILED", first);
  out = {{"phase", "check"}, {"check", "outer_gradient_vs_finite_differences"}, {"finite_differences", fd},
         {"second_order", second}, {"first_order", first}, {"rel_error", rel}, {"ok", ok}};
  return ok;
}

// (2) The whole second-order outer gradient with the fused attention (its BoB kernel runs in
//     the outer backward) equals the one with gg::attention_composite.
bool check_fused_vs_composite(gg::Device device, json& out) {
  const Tiny t = make_tiny(device);
  ttt::ModelConfig c = t.model.cfg;
  c.composite_attention = true;
  const Model composite = t.model.with_config(c);
  const gg::TensorList theta = t.model.parameters();
  const gg::TensorList fused_g = gg::grad({ttt::meta_loss(t.model, t.data, t.inner, Order::second_order)}, theta);
  const gg::TensorList comp_g = gg::grad({ttt::meta_loss(composite, t.data, t.inner, Order::second_order)}, theta);
  double diff = 0.0, scale = 0.0;
  for (size_t i = 0; i < theta.size(); ++i) {
    diff = std::max(diff, gg::max(gg::abs(fused_g[i] - comp_g[i])).item());
    scale = std::max(scale, gg::max(gg::abs(comp_g[i])).item());
  }
  const double rel = diff / std::max(scale, 1e-300), tolerance = 1e-10;
  const bool ok = rel < tolerance;
  std::printf("  outer gradient, fused attention vs attention_composite: max |diff| / max |g| = %.1e "
              "(tolerance %.0e) %s\n", rel, tolerance, ok ? "ok" : "FAILED");
  out = {{"phase", "check"}, {"check", "fused_vs_composite_attention"}, {"rel_diff", rel}, {"ok", ok}};
  return ok;
}

// ------------------------------------------------------------------------- training
struct TrainResult {
  double seconds = 0.0;
  bool ranks_agree = true;  // every data-parallel rank ended with rank 0's parameters
};

// Meta-training (TTT-E2E, second order) or ordinary LM training (Order::none). Both see the
// same sequences in the same order.
//
// --world-size N runs N data-parallel ranks (gg::dist::run_threads): every rank draws the same
// global batch, keeps its share of the sequences, scales its loss by that share, and the
// gradients are summed over ranks in one all_reduce per step before clipping; every rank's
// Adam then makes the same update. Rank 0 trains `model` itself. With --nccl this process is one
// rank (cfg.process_group) and trains its own `model`.
TrainResult train(const Config& cfg, Model& model, Order order, examples::Metrics& metrics) {
  const char* phase = order == Order::none ? "ordinary" : "meta";
  const int P = cfg.world_size;
  gg::dist::Group* const process_group = cfg.process_group.get();
  std::vector<Model> rank_models{model};
  for (int r = 1; r < P && !process_group; ++r) {  // the other thread ranks start from copies
    gg::TensorList copy;
    for (const gg::Tensor& t : model.parameters()) copy.push_back(gg::clone(t.detach()).requires_grad_());
    rank_models.push_back(model.with_parameters(copy));
  }
  ttt::ProgressBar bar(phase, cfg.iterations);
  const int warmup = std::max(1, std::min(100, cfg.iterations / 10));
  const auto start = std::chrono::steady_clock::now();
  examples::run_ranks(P, process_group, [&](gg::dist::Group* group) {
    const int r = group ? group->rank() : 0;
    const bool logs = r == 0 || process_group;  // with --nccl every process writes its own output
    const Model& m = rank_models[process_group ? 0 : static_cast<size_t>(r)];
    ttt::MarkovSampler sampler(cfg.seed * 1000003 + 1, cfg.model.vocab);
    gg::optim::Adam adam(m.parameters(), {cfg.lr});
    const int64_t b0 = cfg.batch * r / P, b1 = cfg.batch * (r + 1) / P;  // this rank's sequences
    double last_loss = NAN;
    for (int it = 1; it <= cfg.iterations; ++it) {
      // Linear warm-up, then cosine decay to a tenth of the peak.
      const double lr = it <= warmup ? gg::optim::linear_warmup(it - 1, warmup, cfg.lr)
                                     : gg::optim::cosine(it - warmup, std::max(1, cfg.iterations - warmup), cfg.lr,
                                                         0.1 * cfg.lr);
      Chunks data = ttt::make_chunks(sampler.sample(cfg.batch, cfg.seq_len), cfg.model.chunk, cfg.model.vocab,
                                     gg::DType::f32, cfg.device);
      if (P > 1)
        for (int64_t c = 0; c < data.count(); ++c) {
          data.inputs[static_cast<size_t>(c)] = gg::slice(data.inputs[static_cast<size_t>(c)], 0, b0, b1);
          data.targets[static_cast<size_t>(c)] = gg::slice(data.targets[static_cast<size_t>(c)], 0, b0, b1);
        }
      gg::Tensor loss = ttt::meta_loss(m, data, cfg.inner, order);
      if (P > 1) loss = loss * (static_cast<double>(b1 - b0) / static_cast<double>(cfg.batch));  // share of the mean
      // across ranks: the sum of the shares' gradients, each bucket's all-reduce started as soon
      // as the backward has completed it
      gg::TensorList grads = group ? gg::dist::grad_all_reduce(*group, {loss}, adam.params(), {}, {}, false)
                                   : gg::grad({loss}, adam.params());
      const double grad_norm = gg::optim::clip_grad_norm(grads, cfg.clip);
      adam.lr = lr;
      adam.step(grads);
      last_loss = group ? group->all_reduce(loss.detach()).item() : loss.item();
      // Every step, on every rank (all of them see these numbers): a non-finite one ends the run.
      const json step_record = {{"phase", phase}, {"step", it}, {"loss", last_loss}, {"grad_norm", grad_norm}};
      if (logs)
        metrics.check(step_record);  // also writes the error record
      else
        examples::check_finite(step_record);
      if (logs && examples::is_log_step(it, cfg.iterations))
        metrics.train(phase, it, last_loss, seconds_since(start), {{"grad_norm", grad_norm}, {"lr", lr}});
      if (logs) bar.update(it, last_loss);
    }
  });
  // Every rank made the same updates: check that no rank's parameters drifted from rank 0's.
  std::vector<gg::TensorList> rank_params;
  for (const Model& m : rank_models) rank_params.push_back(m.parameters());
  std::vector<std::string> names;
  for (size_t i = 0; i < rank_params[0].size(); ++i) names.push_back("parameter " + std::to_string(i));
  TrainResult result;
  result.ranks_agree = examples::ranks_agree(process_group, rank_params, names);
  bar.finish();
  result.seconds = seconds_since(start);
  return result;
}

// ------------------------------------------------------------------------- evaluation
struct HeldOut {
  std::vector<Chunks> batches;
  std::vector<std::vector<double>> floor;  // [chunk][sequence]: the oracle's mean CE on that chunk
};

HeldOut make_held_out(const Config& cfg, uint64_t seed, int64_t count) {
  ttt::MarkovSampler sampler(seed, cfg.model.vocab);
  const int64_t C = cfg.model.chunk, chunks = cfg.seq_len / C;
  HeldOut h;
  h.floor.assign(static_cast<size_t>(chunks), {});
  for (int64_t done = 0; done < count; done += kEvalBatch) {
    const ttt::SequenceBatch s = sampler.sample(std::min(kEvalBatch, count - done), cfg.seq_len);
    h.batches.push_back(ttt::make_chunks(s, C, cfg.model.vocab, gg::DType::f32, cfg.device));
    for (int64_t b = 0; b < s.batch; ++b)
      for (int64_t c = 0; c < chunks; ++c) {
        double sum = 0.0;
        for (int64_t t = c * C; t < (c + 1) * C; ++t) sum += s.oracle(b, t);
        h.floor[static_cast<size_t>(c)].push_back(sum / static_cast<double>(C));
      }
  }
  return h;
}

// [chunk][sequence] losses over all held-out sequences.
std::vector<std::vector<double>> chunk_losses(const Model& m, const HeldOut& h, double lr, int steps) {
  std::vector<std::vector<double>> all;
  for (const Chunks& batch : h.batches) {
    const auto part = ttt::test_time_losses(m, batch, lr, steps);
    all.resize(part.size());
    for (size_t c = 0; c < part.size(); ++c) all[c].insert(all[c].end(), part[c].begin(), part[c].end());
  }
  return all;
}

// Per sequence: the mean over the continuation chunks 1 .. (chunk 0 is the same for every setting).
std::vector<double> continuation(const std::vector<std::vector<double>>& per_chunk) {
  std::vector<double> out(per_chunk[0].size(), 0.0);
  for (size_t c = 1; c < per_chunk.size(); ++c)
    for (size_t b = 0; b < out.size(); ++b) out[b] += per_chunk[c][b] / static_cast<double>(per_chunk.size() - 1);
  return out;
}

std::vector<double> chunk_means(const std::vector<std::vector<double>>& per_chunk) {
  std::vector<double> out;
  for (const auto& c : per_chunk) out.push_back(ttt::summarize(c).mean);
  return out;
}

std::vector<double> minus(const std::vector<double>& a, const std::vector<double>& b) {
  std::vector<double> d(a.size());
  for (size_t i = 0; i < a.size(); ++i) d[i] = a[i] - b[i];
  return d;
}

struct Setting {
  std::string name, key;
  const Model* model;
  double lr;
  int steps;
  std::vector<std::vector<double>> per_chunk;  // [chunk][sequence]
  std::vector<double> cont;                    // continuation loss per sequence
};

// ------------------------------------------------------------------------- main
int run(const Config& cfg) {
  const auto program_start = std::chrono::steady_clock::now();
  const ttt::ModelConfig& mc = cfg.model;
  const int64_t chunks = cfg.seq_len / mc.chunk;
  std::printf("TTT-E2E (end-to-end test-time training, Tandon et al. 2025), tiny, with gradgrad\n");
  std::printf("  device %s, seed %llu, %d iterations per model%s\n", cfg.device.str().c_str(),
              static_cast<unsigned long long>(cfg.seed), cfg.iterations, cfg.smoke ? " (--smoke)" : "");
  std::printf("  LM: %lld blocks, d_model %lld, %lld heads, MLP %lld, vocab %lld, %s head; chunk-local causal "
              "attention\n",
              static_cast<long long>(mc.blocks), static_cast<long long>(mc.d_model), static_cast<long long>(mc.heads),
              static_cast<long long>(mc.mlp_hidden), static_cast<long long>(mc.vocab), mc.tied ? "tied" : "untied");
  std::printf("  sequences of %lld tokens = %lld chunks of %lld; TTT: %d SGD step(s) per chunk, η = %g, on the MLPs "
              "of the last %lld block(s)\n",
              static_cast<long long>(cfg.seq_len), static_cast<long long>(chunks), static_cast<long long>(mc.chunk),
              cfg.inner.steps, cfg.inner.lr, static_cast<long long>(mc.ttt_blocks));
  std::printf("  outer: batch %lld sequences, Adam %g (warm-up, cosine), clip %g\n", static_cast<long long>(cfg.batch),
              cfg.lr, cfg.clip);
  if (!examples::describe_data_parallel(cfg.process_group.get(), cfg.world_size, cfg.device, "batch")) return 2;
  std::printf("  output: %s\n\nself-checks (f64, tiny model):\n", cfg.out_dir.c_str());

  examples::Metrics metrics(
      cfg.out_dir, "ttt_e2e",
      {{"device", cfg.device.str()}, {"seed", cfg.seed}, {"iterations", cfg.iterations}, {"smoke", cfg.smoke},
       {"seq_len", cfg.seq_len}, {"batch", cfg.batch}, {"inner_lr", cfg.inner.lr}, {"inner_steps", cfg.inner.steps},
       {"outer_optimizer", "Adam"}, {"lr", cfg.lr}, {"clip", cfg.clip}, {"eval_seqs", cfg.eval_seqs},
       {"val_seqs", cfg.val_seqs}, {"world_size", cfg.world_size}, {"nccl", cfg.nccl},
       {"model", {{"vocab", mc.vocab}, {"d_model", mc.d_model}, {"heads", mc.heads}, {"blocks", mc.blocks},
                  {"mlp_hidden", mc.mlp_hidden}, {"chunk", mc.chunk}, {"tied", mc.tied}, {"ttt_blocks", mc.ttt_blocks}}}});
  json check1, check2;
  const bool fd_ok = check_outer_gradient(cfg.device, check1);
  const bool fused_ok = check_fused_vs_composite(cfg.device, check2);
  metrics.write(check1);
  metrics.write(check2);

  // Both models start from the same weights and see the same training sequences.
  gg::manual_seed(cfg.seed);
  Model ordinary = ttt::init_model(mc, gg::DType::f32, cfg.device);
  Model meta = ordinary.with_parameters([&] {
    gg::TensorList copy;
    for (const gg::Tensor& t : ordinary.parameters()) copy.push_back(gg::clone(t.detach()).requires_grad_());
    return copy;
  }());

  std::printf("\nordinary training (next-token loss, no inner steps):\n");
  const TrainResult o = train(cfg, ordinary, Order::none, metrics);
  std::printf("  %d iterations in %.1f s: %.1f ms per step\n", cfg.iterations, o.seconds, 1e3 * o.seconds / cfg.iterations);
  std::printf("meta-training (TTT-E2E: through the inner steps, second order):\n");
  const TrainResult m = train(cfg, meta, Order::second_order, metrics);
  std::printf("  %d iterations in %.1f s: %.1f ms per outer step\n", cfg.iterations, m.seconds, 1e3 * m.seconds / cfg.iterations);
  if (!o.ranks_agree || !m.ranks_agree) return 1;

  // The ordinary model's best inner learning rate, picked on validation sequences (not the test set).
  const auto eval_start = std::chrono::steady_clock::now();
  const HeldOut val = make_held_out(cfg, kValSeed, cfg.val_seqs);
  double best_lr = cfg.inner.lr, best_val = INFINITY;
  std::printf("\nTTT inner learning rate for the ordinary model, on %lld validation sequences:\n",
              static_cast<long long>(cfg.val_seqs));
  for (double f : kLrGrid) {
    const double v = ttt::summarize(continuation(chunk_losses(ordinary, val, f * cfg.inner.lr, cfg.inner.steps))).mean;
    std::printf("  η = %-7g continuation loss %.4f\n", f * cfg.inner.lr, v);
    metrics.write({{"phase", "validation"}, {"model", "ordinary"}, {"inner_lr", f * cfg.inner.lr},
                   {"continuation_loss", v}});
    if (v < best_val) best_val = v, best_lr = f * cfg.inner.lr;
  }

  const HeldOut test = make_held_out(cfg, kEvalSeed, cfg.eval_seqs);
  std::vector<Setting> settings = {
      {"(1) no TTT, ordinary model", "no_ttt", &ordinary, 0.0, 0, {}, {}},
      {"(2) TTT, ordinary model", "ttt_ordinary", &ordinary, cfg.inner.lr, cfg.inner.steps, {}, {}},
      {"(2') TTT, ordinary, best η", "ttt_ordinary_best_lr", &ordinary, best_lr, cfg.inner.steps, {}, {}},
      {"(3) TTT, meta-learned model", "ttt_meta", &meta, cfg.inner.lr, cfg.inner.steps, {}, {}},
      {"    meta-learned, no TTT", "meta_no_ttt", &meta, 0.0, 0, {}, {}},
  };
  for (Setting& s : settings) {
    s.per_chunk = chunk_losses(*s.model, test, s.lr, s.steps);
    s.cont = continuation(s.per_chunk);
  }
  const std::vector<double> floor = continuation(test.floor);
  const double eval_seconds = seconds_since(eval_start);

  // ---- summary
  std::printf("\nresults on %lld held-out sequences (seed %llu; evaluated in %.1f s): continuation loss = mean\n"
              "next-token cross-entropy (nats) on chunks 1..%lld, per sequence; mean ± 95%% CI, sd over sequences\n\n",
              static_cast<long long>(cfg.eval_seqs), static_cast<unsigned long long>(kEvalSeed), eval_seconds,
              static_cast<long long>(chunks - 1));
  std::printf("  %-30s %8s   %22s   %s\n", "setting", "η", "continuation loss", "per chunk 0..");
  for (const Setting& s : settings) {
    const ttt::Summary r = ttt::summarize(s.cont);
    std::printf("  %-30s %8g   %7.4f ± %.4f (sd %.3f)  ", s.name.c_str(), s.lr, r.mean, r.ci95, r.sd);
    for (double c : chunk_means(s.per_chunk)) std::printf(" %.3f", c);
    std::printf("\n");
    metrics.write({{"phase", "eval"}, {"setting", s.key}, {"inner_lr", s.lr}, {"inner_steps", s.steps},
                   {"continuation_loss", r.mean}, {"ci95", r.ci95}, {"sd", r.sd},
                   {"per_chunk", chunk_means(s.per_chunk)}});
  }
  const ttt::Summary fl = ttt::summarize(floor);
  std::printf("  %-30s %8s   %7.4f ± %.4f (sd %.3f)  ", "floor: true chains' entropy", "", fl.mean, fl.ci95, fl.sd);
  for (double c : chunk_means(test.floor)) std::printf(" %.3f", c);
  std::printf("\n");
  metrics.write({{"phase", "eval"}, {"setting", "floor"}, {"continuation_loss", fl.mean}, {"ci95", fl.ci95},
                 {"sd", fl.sd}, {"per_chunk", chunk_means(test.floor)}});

  // Paired differences: (3) against each baseline, sequence by sequence.
  std::printf("\npaired differences per sequence, (3) minus baseline (negative: meta-learned TTT is better):\n");
  const Setting& best = settings[3];
  bool lowest = true;
  for (size_t i : {size_t{0}, size_t{1}, size_t{2}}) {
    const ttt::Summary d = ttt::summarize(minus(best.cont, settings[i].cont));
    lowest = lowest && d.mean < 0;
    std::printf("  (3) − %-28s %+.4f ± %.4f\n", settings[i].name.c_str(), d.mean, d.ci95);
    metrics.write({{"phase", "eval"}, {"difference", "ttt_meta - " + settings[i].key}, {"mean", d.mean},
                   {"ci95", d.ci95}});
  }
  std::printf("meta-learned TTT has the lowest continuation loss: %s\n", lowest ? "yes" : "NO");

  std::vector<std::vector<double>> curves;
  std::vector<std::string> names;
  for (size_t i : {size_t{0}, size_t{2}, size_t{3}}) {
    curves.push_back(chunk_means(settings[i].per_chunk));
    names.push_back(i == 2 ? "(2) TTT, ordinary model (best η)" : settings[i].name);
  }
  char title[200];
  std::snprintf(title, sizeof title, "TTT-E2E on per-sequence Markov chains: %lld held-out sequences, %d SGD step(s) per chunk",
                static_cast<long long>(cfg.eval_seqs), cfg.inner.steps);
  std::printf("\n%s\n", ttt::plot_chunk_losses(cfg.out_dir, title, names, curves, chunk_means(test.floor), mc.chunk).c_str());
  std::printf("metrics: %s/metrics.jsonl\n", cfg.out_dir.c_str());
  std::printf("time per outer step: meta-training %.1f ms, ordinary training %.1f ms (%s)\n",
              1e3 * m.seconds / cfg.iterations, 1e3 * o.seconds / cfg.iterations, cfg.device.str().c_str());
  metrics.write({{"phase", "summary"}, {"meta_ms_per_step", 1e3 * m.seconds / cfg.iterations},
                 {"ordinary_ms_per_step", 1e3 * o.seconds / cfg.iterations}, {"meta_lowest", lowest},
                 {"checks_ok", fd_ok && fused_ok}, {"total_s", seconds_since(program_start)}});
  return fd_ok && fused_ok ? 0 : 1;
}

}  // namespace

int main(int argc, char** argv) {
  std::setvbuf(stdout, nullptr, _IOLBF, 0);  // line-buffered even into a log file, to follow a long run
  CLI::App app{"TTT-E2E, tiny: test-time training of a causal transformer LM, meta-learned end to end (gradgrad)"};
  Config cfg;
  examples::add_device_option(app, cfg.device_name);
  app.add_option("--seed", cfg.seed, "seed for initialisation and training sequences")->capture_default_str();
  auto* iters = app.add_option("--iterations", cfg.iterations, "outer steps per model (ordinary and meta-learned)")
                    ->check(CLI::Range(1, 10000000))
                    ->capture_default_str();
  app.add_flag("--smoke", cfg.smoke, "a short run for testing: 10 iterations of batch 8, 64 test sequences, plus the checks");
  app.add_option("--out", cfg.out_dir, "output directory (metrics.jsonl, plot)")->capture_default_str();
  app.add_option("--inner-lr", cfg.inner.lr, "TTT inner SGD learning rate η")->check(CLI::PositiveNumber)->capture_default_str();
  app.add_option("--inner-steps", cfg.inner.steps, "TTT SGD steps per chunk")->check(CLI::Range(1, 100))->capture_default_str();
  app.add_option("--ttt-blocks", cfg.model.ttt_blocks, "fast weights: the MLPs of the last N blocks (1 or 2)")
      ->check(CLI::Range(1, 2))
      ->capture_default_str();
  app.add_option("--seq-len", cfg.seq_len, "tokens per sequence (a multiple of --chunk)")->check(CLI::Range(2, 4096))->capture_default_str();
  app.add_option("--chunk", cfg.model.chunk, "tokens per chunk (TTT mini-batch and attention window)")
      ->check(CLI::Range(1, 1024))
      ->capture_default_str();
  app.add_option("--vocab", cfg.model.vocab, "tokens in the Markov chains")->check(CLI::Range(4, 1024))->capture_default_str();
  app.add_option("--batch", cfg.batch, "sequences per outer step")->check(CLI::Range(1, 4096))->capture_default_str();
  auto* world = examples::add_world_size_option(app, cfg.world_size, "batch");
  examples::add_nccl_flag(app, cfg.nccl)->excludes(world);
  app.add_option("--lr", cfg.lr, "outer Adam learning rate (peak)")->check(CLI::PositiveNumber)->capture_default_str();
  app.add_flag("--tied", cfg.model.tied, "tie the output head to the token embedding");
  app.add_option("--eval-seqs", cfg.eval_seqs, "held-out test sequences")->check(CLI::Range(2, 100000))->capture_default_str();
  CLI11_PARSE(app, argc, argv);

  if (cfg.smoke) {
    if (iters->count() == 0) cfg.iterations = 10;
    cfg.batch = 8;
    cfg.eval_seqs = 64;
    cfg.val_seqs = 32;
  }
  if (!examples::check_world_size(cfg.world_size, cfg.batch, "the batch", "sequences")) return 2;
  if (cfg.seq_len % cfg.model.chunk != 0 || cfg.seq_len / cfg.model.chunk < 2) {
    std::fprintf(stderr, "error: --seq-len (%lld) must be a multiple of --chunk (%lld), at least 2 chunks\n",
                 static_cast<long long>(cfg.seq_len), static_cast<long long>(cfg.model.chunk));
    return 2;
  }
  return examples::prepare_and_run(cfg.device_name, cfg.device, cfg.out_dir, [&] {
    if (cfg.nccl)
      cfg.process_group = examples::join_nccl(cfg.device, cfg.world_size, cfg.out_dir, cfg.batch, "sequences");
    return run(cfg);
  });
}
