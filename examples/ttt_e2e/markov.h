// The data: every sequence comes from its own random sparse Markov chain, so what the model
// needs to know about a sequence (its transition table) can only be learned from that sequence.
//
//   A chain over V tokens: each row i picks 2 or 3 distinct successors uniformly at random and
//   gives them Dirichlet(1, ..., 1) probabilities (all other entries are 0). The first token
//   is uniform. A sequence is x_0 .. x_T, drawn on the host with std::mt19937_64, so a seed
//   gives the same sequences on every device.
//
// The floor: an oracle that knows the chain predicts x_{t+1} with P[x_t], so its expected
// cross-entropy at position t is the row entropy H(P[x_t]). Averaged over the positions that
// are scored, that is the chain's entropy rate along this sequence: no model can beat it in
// expectation.
#pragma once
#include <cmath>
#include <cstdint>
#include <random>
#include <vector>

namespace ttt {

// B sequences of T + 1 tokens each, row-major (sequence b, position t) -> tokens[b·(T+1) + t].
struct SequenceBatch {
  int64_t batch = 0, length = 0;  // length = T: the number of predictions per sequence
  std::vector<int64_t> tokens;    // (B, T + 1)
  std::vector<double> entropy;    // (B, T): H(P_b[x_t]), the oracle's expected loss for target t + 1
  int64_t token(int64_t b, int64_t t) const { return tokens[static_cast<size_t>(b * (length + 1) + t)]; }
  double oracle(int64_t b, int64_t t) const { return entropy[static_cast<size_t>(b * length + t)]; }
};

class MarkovSampler {
 public:
  MarkovSampler(uint64_t seed, int64_t vocab) : rng_(seed), vocab_(vocab) {}

  SequenceBatch sample(int64_t batch, int64_t length) {
    SequenceBatch s;
    s.batch = batch;
    s.length = length;
    s.tokens.resize(static_cast<size_t>(batch * (length + 1)));
    s.entropy.resize(static_cast<size_t>(batch * length));
    std::uniform_int_distribution<int64_t> uniform(0, vocab_ - 1);
    for (int64_t b = 0; b < batch; ++b) {
      const std::vector<double> P = chain();  // (V, V), row-stochastic
      std::vector<double> row_entropy(static_cast<size_t>(vocab_), 0.0);
      for (int64_t i = 0; i < vocab_; ++i)
        for (int64_t j = 0; j < vocab_; ++j) {
          const double p = P[static_cast<size_t>(i * vocab_ + j)];
          if (p > 0) row_entropy[static_cast<size_t>(i)] -= p * std::log(p);
        }
      int64_t x = uniform(rng_);
      s.tokens[static_cast<size_t>(b * (length + 1))] = x;
      for (int64_t t = 0; t < length; ++t) {
        s.entropy[static_cast<size_t>(b * length + t)] = row_entropy[static_cast<size_t>(x)];
        std::discrete_distribution<int64_t> next(P.begin() + x * vocab_, P.begin() + (x + 1) * vocab_);
        x = next(rng_);
        s.tokens[static_cast<size_t>(b * (length + 1) + t + 1)] = x;
      }
    }
    return s;
  }

 private:
  // One random sparse transition matrix, (V, V) row-major.
  std::vector<double> chain() {
    std::vector<double> P(static_cast<size_t>(vocab_ * vocab_), 0.0);
    std::uniform_int_distribution<int> fanout(2, 3);
    std::gamma_distribution<double> gamma(1.0, 1.0);  // Dirichlet(1) = normalised Gamma(1) draws
    std::vector<int64_t> ids(static_cast<size_t>(vocab_));
    for (int64_t i = 0; i < vocab_; ++i) {
      for (int64_t j = 0; j < vocab_; ++j) ids[static_cast<size_t>(j)] = j;
      const int k = fanout(rng_);
      double total = 0.0;
      for (int n = 0; n < k; ++n) {  // partial Fisher-Yates: k distinct successors
        std::uniform_int_distribution<int64_t> pick(n, vocab_ - 1);
        std::swap(ids[static_cast<size_t>(n)], ids[static_cast<size_t>(pick(rng_))]);
        const double w = gamma(rng_);
        P[static_cast<size_t>(i * vocab_ + ids[static_cast<size_t>(n)])] = w;
        total += w;
      }
      for (int n = 0; n < k; ++n) P[static_cast<size_t>(i * vocab_ + ids[static_cast<size_t>(n)])] /= total;
    }
    return P;
  }

  std::mt19937_64 rng_;
  int64_t vocab_;
};

}  // namespace ttt
