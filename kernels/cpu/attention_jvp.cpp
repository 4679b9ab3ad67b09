// attention_jvp: the forward-mode derivative (JVP) of softmax attention, fused into the forward's
// sweep, on the CPU.
//
// Math (one head; b and h are independent). With tangents Q̇, K̇, V̇ of Q, K, V:
//   S = s·Q·Kᵀ (masked), P = softmax_rows(S), O = P·V, L_i = logsumexp_j S_ij   (as the forward)
//   Ṡ = s·(Q̇·Kᵀ + Q·K̇ᵀ)                       (masked entries: 0)
//   L̇_i = μ_i = Σ_j P_ij Ṡ_ij                  (∂L_i/∂S_ij = P_ij)
//   Ṗ = P∘(Ṡ − μ)                              (the softmax Jacobian applied to Ṡ)
//   Ȯ = Ṗ·V + P·V̇ = A − μ∘O + B,   A = (P∘Ṡ)·V,   B = P·V̇
// μ, A and B are sums over the keys weighted by P, like O, so they follow O through the online
// softmax: per query row the running max m and sum l of the forward, and the accumulators
//   acc = Σ_j e_ij V_j,   mu = Σ_j e_ij Ṡ_ij,   mu_c = Σ_j e_ij (Ṡ_ij − c_i),
//   acc_t = Σ_j (e_ij (Ṡ_ij − c_i) V_j + e_ij V̇_j),
// e_ij = exp(S_ij − m_i), all rescaled by exp(m_old − m_new) when the max grows. At the end
//   O = acc / l,   L = m + log(l),   L̇ = mu / l,   Ȯ = acc_t / l − (mu_c / l)∘O.
// Any constant c_i gives the same Ȯ (Σ_j P_ij (Ṡ_ij − c_i) V_j − (μ_i − c_i) O_i = A_i − μ_i O_i).
// The kernel takes the P-weighted mean of Ṡ over the first key block the row gives weight to, an
// estimate of μ_i, so that a large common part of a row's Ṡ (keys about a common mean, Q̇ along
// it) cancels entry by entry before the sums, as in the composite's P∘(Ṡ − μ), instead of in a
// final subtraction of two terms of size |μ|·|O| (measured effect: docs/attention.md §13).
// Per key block: the forward's two products (S, e·V) and four more (Q̇·Kᵀ, Q·K̇ᵀ, (e∘(Ṡ − c))·V, e·V̇),
// three times the forward's matrix work. An absent tangent (nullptr) drops its products: no Q̇
// and no K̇ give Ṡ = 0, so L̇ = 0 and Ȯ = P·V̇; no V̇ drops B.
//
// O and L are the forward's (attention_fwd.cpp) bit for bit: the same tiles, products (S from K's
// transposed key blocks, KeyBlocksT; Q·K̇ᵀ reads K̇'s, transposed the same way), online softmax
// (row_max, row_exp) and epilogue in the same order, the tangent work reading them but never
// feeding back.
// Masks, rows that see no key (O = 0, L = -inf, Ȯ = 0, L̇ = 0) and non-finite data as in the
// forward: a masked entry of Ṡ is set to 0, never multiplied in, so a key a row does not see
// never enters its Ṡ or L̇ (a NaN or inf in V or V̇ of such a key may still reach its Ȯ through
// 0·NaN in the tile products, as V does O in the forward); NaN and ±inf in the tangents reach Ṡ,
// mu and acc_t through IEEE arithmetic (a row whose l ends 0 or NaN gets Ȯ and L̇ NaN, as it gets
// O and L NaN).
// Scratch per thread: two kBlockM x kBlockN tiles, two kBlockM x d accumulators, 6·kBlockM scalars;
// per call K's and K̇'s key blocks transposed (O(Nk·d) each).
#include <algorithm>
#include <cmath>
#include <limits>
#include <vector>

#include "kernels/cpu/attention.h"

namespace gg::kernels::cpu {

template <typename T>
void attention_jvp(const AttentionShape& p, const T* Q, const T* K, const T* V, const T* Qd, const T* Kd,
                   const T* Vd, T* O, T* L, T* Od, T* Ld) {
  const int64_t B = p.B, H = p.H, N = p.N, d = p.d;
  const T s = static_cast<T>(p.scale);
  const T neg_inf = -std::numeric_limits<T>::infinity();
  const T nan = std::numeric_limits<T>::quiet_NaN();
  const int64_t num_q_blocks = detail::num_blocks(N, kBlockM);
  const detail::Visibility vis(p);
  const detail::Heads heads(p);
  const bool has_sd = Qd != nullptr || Kd != nullptr;  // Ṡ ≠ 0
  const bool has_vd = Vd != nullptr;
  [[maybe_unused]] const bool par = detail::worth_threads(p);
  // K's and K̇'s key blocks, transposed once (the B operands of S = s·Q·Kᵀ, as in the forward, and
  // of Ṡ's two products); K̇'s only when given.
  const detail::KeyBlocksT<T> Kt(p, K, par);
  const detail::KeyBlocksT<T> Kdt(p, Kd, par);

  GG_OMP(parallel if (par)) {
    Scratch<T> S(kBlockM * kBlockN);   // scores, then e = exp(S - m)
    Scratch<T> Sd(kBlockM * kBlockN);  // Ṡ, then e∘(Ṡ - c)
    Scratch<T> acc(kBlockM * d);       // Σ_j e_ij·V_j
    Scratch<T> acc_t(kBlockM * d);     // Σ_j e_ij·(Ṡ_ij·V_j + V̇_j)
    Scratch<T> m(kBlockM);             // running row max
    Scratch<T> l(kBlockM);             // running row sum of e
    Scratch<T> mu(kBlockM);            // running row sum of e∘Ṡ
    Scratch<T> mu_c(kBlockM);          // running row sum of e∘(Ṡ - c)
    Scratch<T> c(kBlockM);             // the shift of the row's Ṡ, once the row has weight
    std::vector<char> c_set(kBlockM);

    GG_OMP(for collapse(3) schedule(dynamic, 1))
    for (int64_t b = 0; b < B; ++b)
      for (int64_t h = 0; h < H; ++h)
        for (int64_t qb = 0; qb < num_q_blocks; ++qb) {
          // ---- prologue: this task's query rows [i0, i0 + mi) of head (b, h) ----
          const int64_t head = heads.q_row(b, h);
          const int64_t kv = heads.kv_row_of_q(b, h);
          const int64_t i0 = qb * kBlockM;
          const int64_t mi = std::min(kBlockM, N - i0);
          const T* Qi = Q + (head + i0) * d;
          const T* Qdi = Qd ? Qd + (head + i0) * d : nullptr;
          std::fill(m.begin(), m.end(), neg_inf);
          std::fill(l.begin(), l.end(), T(0));
          std::fill(mu.begin(), mu.end(), T(0));
          std::fill(mu_c.begin(), mu_c.end(), T(0));
          std::fill(c.begin(), c.end(), T(0));
          std::fill(c_set.begin(), c_set.end(), 0);
          std::fill(acc.begin(), acc.end(), T(0));
          std::fill(acc_t.begin(), acc_t.end(), T(0));
          int64_t kb_first, kb_last;
          vis.key_blocks(i0, mi, kBlockN, &kb_first, &kb_last);

          // ---- main loop: sweep the key blocks [j0, j0 + nj) that some row sees ----
          for (int64_t kb = kb_first; kb < kb_last; ++kb) {
            const int64_t j0 = kb * kBlockN;
            const int64_t nj = std::min(kBlockN, vis.nk - j0);
            const T* Ktj = Kt.block(kv, j0);
            const T* Vj = V + (kv + j0) * d;

            // S = s·Q_i·K_jᵀ and Ṡ = s·(Q̇_i·K_jᵀ + Q_i·K̇_jᵀ); masked entries -inf and 0.
            detail::tile_abt(mi, d, s, Qi, Ktj, S.data(), /*accumulate=*/false);
            if (has_sd) {
              if (Qdi) detail::tile_abt(mi, d, s, Qdi, Ktj, Sd.data(), /*accumulate=*/false);
              if (Kd) detail::tile_abt(mi, d, s, Qi, Kdt.block(kv, j0), Sd.data(), /*accumulate=*/Qdi != nullptr);
            }
            if (vis.partly_masked(i0, mi, j0, nj))
              for (int64_t i = 0; i < mi; ++i)
                for (int64_t j = 0; j < nj; ++j)
                  if (!vis.visible(i0 + i, j0 + j)) {
                    S[i * kBlockN + j] = neg_inf;
                    if (has_sd) Sd[i * kBlockN + j] = T(0);
                  }

            // Online softmax, row by row (the forward's), then the row sums of e∘Ṡ and e∘(Ṡ - c).
            for (int64_t i = 0; i < mi; ++i) {
              T* Srow = S.data() + i * kBlockN;
              const T m_new = detail::row_max(Srow, nj, m[i]);  // skips NaN, as std::max does
              T alpha = T(1);
              if (m_new == neg_inf) {  // every score so far -inf (masked) or NaN: nothing to add
                for (int64_t j = 0; j < nj; ++j) {
                  if (std::isnan(Srow[j])) l[i] = Srow[j];  // std::max dropped it: keep it in l
                  Srow[j] = T(0);
                }
              } else {
                const T row_sum = detail::row_exp_sum(Srow, nj, m_new);  // exp(-inf) = 0 for masked keys
                if (m_new == m[i]) {  // the old state keeps its scale: alpha = exp(0) = 1
                  l[i] += row_sum;
                } else {
                  alpha = std::exp(m[i] - m_new);  // rescales the old state; 0 when m[i] = -inf
                  l[i] = alpha * l[i] + row_sum;
                  m[i] = m_new;
                  T* acc_i = acc.data() + i * d;
                  GG_OMP(simd)
                  for (int64_t k = 0; k < d; ++k) acc_i[k] *= alpha;
                  T* acc_t_i = acc_t.data() + i * d;
                  GG_OMP(simd)
                  for (int64_t k = 0; k < d; ++k) acc_t_i[k] *= alpha;
                }
              }
              if (has_sd) {
                T* Wrow = Sd.data() + i * kBlockN;
                T raw = 0;
                GG_OMP(simd reduction(+ : raw))
                for (int64_t j = 0; j < nj; ++j) raw += Srow[j] * Wrow[j];
                mu[i] = alpha * mu[i] + raw;
                if (!c_set[i] && l[i] > T(0)) {  // the first block with weight: l[i] is its row sum
                  c[i] = raw / l[i];
                  c_set[i] = 1;
                }
                const T ci = c[i];
                T w_sum = 0;
                GG_OMP(simd reduction(+ : w_sum))
                for (int64_t j = 0; j < nj; ++j) {
                  Wrow[j] = (Wrow[j] - ci) * Srow[j];
                  w_sum += Wrow[j];
                }
                mu_c[i] = alpha * mu_c[i] + w_sum;
              }
            }
            // acc += e·V_j (the forward's), acc_t += (e∘(Ṡ - c))·V_j + e·V̇_j
            detail::tile_ab_acc(mi, nj, d, S.data(), Vj, acc.data());
            if (has_sd) detail::tile_ab_acc(mi, nj, d, Sd.data(), Vj, acc_t.data());
            if (has_vd) detail::tile_ab_acc(mi, nj, d, S.data(), Vd + (kv + j0) * d, acc_t.data());
          }

          // ---- epilogue: O = acc / l, L = m + log(l) (the forward's); L̇ = mu / l,
          //      Ȯ = acc_t / l − (mu_c / l)·O ----
          for (int64_t i = 0; i < mi; ++i) {
            const int64_t row = head + i0 + i;
            T* Oi = O + row * d;
            T* Odi = Od + row * d;
            if (vis.hi(i0 + i) < vis.lo(i0 + i)) {  // no visible key, whatever the data
              std::fill(Oi, Oi + d, T(0));
              std::fill(Odi, Odi + d, T(0));
              L[row] = neg_inf;
              Ld[row] = T(0);
              continue;
            }
            const T inv_l = l[i] == T(0) ? nan : T(1) / l[i];  // l = 0: the scores were all -inf
            const T* acc_i = acc.data() + i * d;
            GG_OMP(simd)
            for (int64_t k = 0; k < d; ++k) Oi[k] = acc_i[k] * inv_l;
            L[row] = l[i] == T(0) ? nan : m[i] + std::log(l[i]);
            Ld[row] = mu[i] * inv_l;
            const T mu_i = mu_c[i] * inv_l;  // μ - c
            const T* acc_t_i = acc_t.data() + i * d;
            GG_OMP(simd)
            for (int64_t k = 0; k < d; ++k) Odi[k] = acc_t_i[k] * inv_l - mu_i * Oi[k];
          }
        }
  }
}

template void attention_jvp<float>(const AttentionShape&, const float*, const float*, const float*, const float*,
                                   const float*, const float*, float*, float*, float*, float*);
template void attention_jvp<double>(const AttentionShape&, const double*, const double*, const double*,
                                    const double*, const double*, const double*, double*, double*, double*,
                                    double*);

}  // namespace gg::kernels::cpu
