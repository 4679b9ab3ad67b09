// attention_fwd: softmax attention forward, FlashAttention-style, on the CPU.
//
// Math (one head; b and h are independent):
//   S = s·Q·Kᵀ, with S_ij = -inf where causal and j > i
//   L_i = logsumexp_j S_ij                      (natural log; saved for the backward)
//   P = exp(S - L) = softmax_rows(S),   O = P·V
//
// Shapes: Q, O are (B, H, N, d); K, V are (B, Hkv, Nk, d); L is (B, H, N).
//
// Tiling: one task per (b, h, query block of kBlockM rows). A task sweeps the key blocks
// (kBlockN rows each) with an online softmax: per query row a running max m, a running sum
// l = Σ exp(S - m), and an accumulator acc = Σ exp(S - m)·V_j that is rescaled by
// exp(m_old - m_new) whenever the max grows. At the end O = acc / l and L = m + log(l).
// Masks (causal, windows): only the key blocks that meet some row's window are visited; tiles
// that cross a window edge are masked entry by entry. A row that sees no key gets O = 0 and
// L = -inf. Non-finite data follows the softmax's IEEE arithmetic, as in the composite: a NaN
// score reaches l (through exp(S - m), or, while m is still -inf, because the max skips NaN, by
// being copied into l), a +inf score makes l NaN (exp(inf - inf)), and a row that sees keys but
// ends with l = 0 (every score -inf) gets NaN, softmax's 0/0: the whole row of O, and L.
// Scratch per thread: one kBlockM x kBlockN score tile, kBlockM x d accumulator, 2·kBlockM scalars;
// per call K transposed by key block (K-shaped).
#include <algorithm>
#include <cmath>
#include <limits>
#include <vector>

#include "kernels/cpu/attention.h"

namespace gg::kernels::cpu {

template <typename T>
void attention_fwd(const AttentionShape& p, const T* Q, const T* K, const T* V, T* O, T* L) {
  const int64_t B = p.B, H = p.H, N = p.N, d = p.d;
  const T s = static_cast<T>(p.scale);
  const T neg_inf = -std::numeric_limits<T>::infinity();
  const T nan = std::numeric_limits<T>::quiet_NaN();
  const int64_t num_q_blocks = detail::num_blocks(N, kBlockM);
  const detail::Visibility vis(p);
  const detail::Heads heads(p);
  [[maybe_unused]] const bool par = detail::worth_threads(p);
  const detail::KeyBlocksT<T> Kt(p, K, par);  // K's key blocks, transposed

  GG_OMP(parallel if (par)) {
    Scratch<T> S(kBlockM * kBlockN);  // scores, then probabilities exp(S - m)
    Scratch<T> acc(kBlockM * d);      // Σ_j exp(S_ij - m_i)·V_j
    Scratch<T> m(kBlockM);            // running row max
    Scratch<T> l(kBlockM);            // running row sum of exp(S - m)

    GG_OMP(for collapse(3) schedule(dynamic, 1))
    for (int64_t b = 0; b < B; ++b)
      for (int64_t h = 0; h < H; ++h)
        for (int64_t qb = 0; qb < num_q_blocks; ++qb) {
          // ---- prologue: this task's query rows [i0, i0 + mi) of head (b, h) ----
          const int64_t head = heads.q_row(b, h);  // first row of the query head
          const int64_t i0 = qb * kBlockM;
          const int64_t mi = std::min(kBlockM, N - i0);
          const T* Qi = Q + (head + i0) * d;
          const int64_t kh = heads.kv_row_of_q(b, h);
          const T* Vh = V + kh * d;
          std::fill(m.begin(), m.end(), neg_inf);
          std::fill(l.begin(), l.end(), T(0));
          std::fill(acc.begin(), acc.end(), T(0));
          int64_t kb_first, kb_last;
          vis.key_blocks(i0, mi, kBlockN, &kb_first, &kb_last);

          // ---- main loop: sweep the key blocks [j0, j0 + nj) that some row sees ----
          for (int64_t kb = kb_first; kb < kb_last; ++kb) {
            const int64_t j0 = kb * kBlockN;
            const int64_t nj = std::min(kBlockN, vis.nk - j0);
            const T* Vj = Vh + j0 * d;

            // S = s·Q_i·K_jᵀ, masked entries -inf.
            detail::tile_abt(mi, d, s, Qi, Kt.block(kh, j0), S.data(), /*accumulate=*/false);
            if (vis.partly_masked(i0, mi, j0, nj))
              for (int64_t i = 0; i < mi; ++i)
                for (int64_t j = 0; j < nj; ++j)
                  if (!vis.visible(i0 + i, j0 + j)) S[i * kBlockN + j] = neg_inf;

            // Online softmax, row by row.
            for (int64_t i = 0; i < mi; ++i) {
              T* Srow = S.data() + i * kBlockN;
              const T m_new = detail::row_max(Srow, nj, m[i]);  // skips NaN, as std::max does
              if (m_new == neg_inf) {  // every score so far -inf (masked) or NaN: nothing to add
                for (int64_t j = 0; j < nj; ++j) {
                  if (std::isnan(Srow[j])) l[i] = Srow[j];  // std::max dropped it: keep it in l
                  Srow[j] = T(0);
                }
                continue;
              }
              const T row_sum = detail::row_exp_sum(Srow, nj, m_new);  // exp(-inf) = 0 for masked keys
              if (m_new == m[i]) {  // the old state keeps its scale: alpha = exp(0) = 1
                l[i] += row_sum;
                continue;
              }
              const T alpha = std::exp(m[i] - m_new);  // rescales the old state; 0 when m[i] = -inf
              l[i] = alpha * l[i] + row_sum;
              m[i] = m_new;
              T* acc_i = acc.data() + i * d;
              GG_OMP(simd)
              for (int64_t k = 0; k < d; ++k) acc_i[k] *= alpha;
            }
            // acc += exp(S - m)·V_j
            detail::tile_ab_acc(mi, nj, d, S.data(), Vj, acc.data());
          }

          // ---- epilogue: O = acc / l, L = m + log(l) (non-finite rows: see the header) ----
          for (int64_t i = 0; i < mi; ++i) {
            T* Oi = O + (head + i0 + i) * d;
            if (vis.hi(i0 + i) < vis.lo(i0 + i)) {  // no visible key, whatever the data
              std::fill(Oi, Oi + d, T(0));
              L[head + i0 + i] = neg_inf;
              continue;
            }
            const T inv_l = l[i] == T(0) ? nan : T(1) / l[i];  // l = 0: the scores were all -inf
            const T* acc_i = acc.data() + i * d;
            GG_OMP(simd)
            for (int64_t k = 0; k < d; ++k) Oi[k] = acc_i[k] * inv_l;
            L[head + i0 + i] = l[i] == T(0) ? nan : m[i] + std::log(l[i]);
          }
        }
  }
}

template <typename T>
void attention_row_exp(T* x, int64_t n, T shift) {
  detail::row_exp(x, n, shift);
}
template void attention_row_exp<float>(float*, int64_t, float);
template void attention_row_exp<double>(double*, int64_t, double);

bool attention_exp_tile_ps() {
#if defined(__AVX512F__)
  return true;
#else
  return false;
#endif
}

template void attention_fwd<float>(const AttentionShape&, const float*, const float*,
                                   const float*, float*, float*);
template void attention_fwd<double>(const AttentionShape&, const double*, const double*,
                                    const double*, double*, double*);

}  // namespace gg::kernels::cpu
