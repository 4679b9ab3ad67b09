// Sine tasks (maml_sine's task family: y = A·sin(x − φ), A ~ U[0.1, 5], φ ~ U[0, π],
// x ~ U[−5, 5]) laid out as token sequences for the attention regressor.
//
// A token is three numbers [x, y, is_target]. A context token carries its label y; a target
// token carries 0 in place of y and 1 as its flag, and the model predicts y there. There are no
// positions: attention (without a causal mask) sees the tokens as a set.
//
//   support loss (the inner, task-specific loss): the K support points of a task, split into
//     halves A and B, give two sequences of K tokens each: "A as context, predict B" and
//     "B as context, predict A". A point is never both the context and the target of the same
//     sequence, so the model cannot copy its own label, and every support label is a target
//     exactly once (a two-fold cross-validation loss).
//   query loss (the outer loss): all K support points as context followed by query points as
//     targets, at most `chunk` targets per sequence (several sequences per task when there are
//     more query points, each with the same context): targets attend to each other as well, so
//     a model trained with 10 targets per sequence is evaluated with 10 per sequence too.
//
// With labels hidden (the joint-regression baseline) every token carries y = 0: the model then
// cannot tell tasks apart and is an ordinary regressor on x.
//
// A batch of T tasks with S sequences of N tokens each is one tensor (T, S·N, 3): tokens of one
// task stay in one row, so per-task weights (T, in, out) apply to them with one batched matmul.
#pragma once
#include <cstdint>
#include <vector>

#include "gradgrad.h"
#include "sine_tasks.h"  // from examples/maml_sine: the task family and its sampler

namespace mattn {

// Labelled points of T tasks on the host, task-major: value [t·n + i] is point i of task t.
struct HostPoints {
  int64_t tasks = 0, n = 0;
  std::vector<double> x, y;
};

inline HostPoints sample_points(maml::SineTaskSampler& sampler, const maml::SineTasks& tasks, int64_t n) {
  // maml_sine's sampler draws on the host; it packs into a CPU f64 tensor that we unpack again.
  const maml::Points p = sampler.points(tasks, n, gg::DType::f64, gg::Device::cpu());
  return {tasks.size(), n, p.x.to_vector<double>(), p.y.to_vector<double>()};
}

// The first `n` points of every task.
inline HostPoints first_points(const HostPoints& p, int64_t n) {
  HostPoints out{p.tasks, n, {}, {}};
  for (int64_t t = 0; t < p.tasks; ++t)
    for (int64_t i = 0; i < n; ++i) {
      out.x.push_back(p.x[static_cast<size_t>(t * p.n + i)]);
      out.y.push_back(p.y[static_cast<size_t>(t * p.n + i)]);
    }
  return out;
}

struct Sequences {
  gg::Tensor tokens;  // (T, S·N, 3): [x, y or 0, is_target]
  gg::Tensor y;       // (T, S·N, 1): the true label of every token
  gg::Tensor target;  // (T, S·N, 1): 1 on target tokens, 0 on context tokens
  int64_t per_task = 1;          // S sequences per task
  int64_t length = 0;            // N tokens per sequence
  int64_t targets_per_task = 0;  // target tokens per task, over its S sequences
  int64_t tasks() const { return tokens.size(0); }
};

namespace detail {
struct SequenceBuilder {
  bool labels_visible = true;
  std::vector<double> tokens, y, target;
  void add(double x, double label, bool is_target) {
    tokens.insert(tokens.end(), {x, is_target || !labels_visible ? 0.0 : label, is_target ? 1.0 : 0.0});
    y.push_back(label);
    target.push_back(is_target ? 1.0 : 0.0);
  }
  Sequences finish(int64_t T, int64_t S, int64_t N, int64_t targets, gg::DType dtype, gg::Device device) const {
    Sequences s;
    s.tokens = gg::from_vector(tokens, {T, S * N, 3}, dtype, device);
    s.y = gg::from_vector(y, {T, S * N, 1}, dtype, device);
    s.target = gg::from_vector(target, {T, S * N, 1}, dtype, device);
    s.per_task = S;
    s.length = N;
    s.targets_per_task = targets;
    return s;
  }
};
}  // namespace detail

// The support loss's two sequences per task (S = 2, N = K): sequence 0 has the first ⌊K/2⌋
// points as context and the rest as targets, sequence 1 the other way round.
inline Sequences support_sequences(const HostPoints& support, gg::DType dtype, gg::Device device,
                                   bool labels_visible = true) {
  const int64_t K = support.n, half = K / 2;
  detail::SequenceBuilder b{labels_visible, {}, {}, {}};
  for (int64_t t = 0; t < support.tasks; ++t)
    for (int64_t s = 0; s < 2; ++s)
      for (int64_t i = 0; i < K; ++i) {
        const size_t j = static_cast<size_t>(t * K + i);
        b.add(support.x[j], support.y[j], (i >= half) == (s == 0));
      }
  return b.finish(support.tasks, 2, K, K, dtype, device);
}

// The query loss's sequences per task (S = Q / chunk, N = K + chunk): the K support points as
// context, then `chunk` of the Q query points as targets.
inline Sequences query_sequences(const HostPoints& support, const HostPoints& query, int64_t chunk, gg::DType dtype,
                                 gg::Device device, bool labels_visible = true) {
  const int64_t K = support.n, Q = query.n;
  GG_CHECK(chunk > 0 && Q % chunk == 0, gg::ValueError, "mattn::query_sequences: ", Q,
           " query points do not split into sequences of ", chunk, " targets");
  detail::SequenceBuilder b{labels_visible, {}, {}, {}};
  for (int64_t t = 0; t < support.tasks; ++t)
    for (int64_t c = 0; c < Q / chunk; ++c) {
      for (int64_t i = 0; i < K; ++i)
        b.add(support.x[static_cast<size_t>(t * K + i)], support.y[static_cast<size_t>(t * K + i)], false);
      for (int64_t i = c * chunk; i < (c + 1) * chunk; ++i)
        b.add(query.x[static_cast<size_t>(t * Q + i)], query.y[static_cast<size_t>(t * Q + i)], true);
    }
  return b.finish(support.tasks, Q / chunk, K + chunk, Q, dtype, device);
}

// One meta-batch: the support loss adapts the weights, the query loss judges the result.
struct Episode {
  Sequences support;  // (T, 2·K, 3)
  Sequences query;    // (T, (Q / chunk)·(K + chunk), 3)
};

inline Episode make_episode(const HostPoints& support, const HostPoints& query, int64_t chunk, gg::DType dtype,
                            gg::Device device, bool labels_visible = true) {
  return {support_sequences(support, dtype, device, labels_visible),
          query_sequences(support, query, chunk, dtype, device, labels_visible)};
}

// T new tasks, K support and Q query points each, all Q query points in one sequence.
inline Episode sample_episode(maml::SineTaskSampler& sampler, int64_t tasks, int64_t shots, int64_t queries,
                              gg::DType dtype, gg::Device device, bool labels_visible = true) {
  const maml::SineTasks t = sampler.tasks(tasks);
  const HostPoints support = sample_points(sampler, t, shots);
  const HostPoints query = sample_points(sampler, t, queries);
  return make_episode(support, query, queries, dtype, device, labels_visible);
}

}  // namespace mattn
