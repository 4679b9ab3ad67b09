// attention_bwd: softmax attention backward on the CPU, FlashAttention-2 schedule.
//
// Math (one head), forward lines on the left, what undoes them on the right:
//   S = s·Q·Kᵀ (masked)        P = exp(S - L)          recomputed from the saved L
//   O = P·V                    dV = Pᵀ·dO,  dP = dO·Vᵀ
//   P = softmax_rows(S)        D = rowsum(dO∘O) = Σ_j P∘dP,  dS = P∘(dP - D)
//   S = s·Q·Kᵀ                 dQ = s·dS·K,  dK = s·dSᵀ·Q
//
// Shapes: Q, O, dO, dQ are (B, H, N, d); K, V, dK, dV are (B, Hkv, Nk, d); L and D are (B, H, N).
//
// Tiling, one sweep (5 tile products per tile: S, dP, dV, dK, dQ):
//   1. D: parallel over rows; D_i = <dO_i, O_i>, stored per row (B·H·N scalars).
//   2. One task per (b, kv head, chunk of key blocks): for each key block of the chunk, sweep the
//      query blocks of every query head of the kv head's group, recomputing P and dS once per
//      tile; dK and dV accumulate in the task's own kBlockN x d buffers (the group sum needs no
//      atomics and no copy of K, V), and dS·K goes into the chunk's own N x d partial sum of dQ.
//   3. dQ = s·Σ_chunks partial, the chunks added in their order.
//   The chunks are contiguous runs of key blocks cut to about equal work (the visible tiles);
//   their number depends on the shape only (kChunkTasks tasks over all kv heads), so every sum
//   runs in the same order whatever the thread count. (The GPU adds dQ atomically; a second
//   sweep over query blocks, as before, costs two more tile products per tile.)
// Masks: tiles outside every row's window are skipped, tiles across a window edge are masked
// (P = 0). Rows that see no key have O = 0, so D = 0, and every tile entry of theirs is masked.
// Scratch: per thread P, dS tiles (kBlockM x kBlockN) and two kBlockN x d accumulators; K and V
// transposed by key block (K-shaped each); one (B, H, N, d) partial sum of dQ per chunk but the
// first (which is dQ itself).
#include <algorithm>
#include <vector>

#include "kernels/cpu/attention.h"

namespace gg::kernels::cpu {

template <typename T>
void attention_bwd(const AttentionShape& p, const T* Q, const T* K, const T* V, const T* O,
                   const T* L, const T* dO, const T* dL, T* dQ, T* dK, T* dV) {
  const int64_t B = p.B, H = p.H, N = p.N, d = p.d;
  const T s = static_cast<T>(p.scale);
  const detail::Visibility vis(p);
  const detail::Heads heads(p);
  const int64_t num_k_blocks = detail::num_blocks(vis.nk, kBlockN);
  [[maybe_unused]] const bool par = detail::worth_threads(p);
  Scratch<T> D(B * H * N);  // (B, H, N)
  const detail::KeyBlocksT<T> Kt(p, K, par), Vt(p, V, par);  // key blocks, transposed

  // ---- phase 1: D = rowsum(dO∘O) ----
  GG_OMP(parallel for collapse(2) if (par))
  for (int64_t bh = 0; bh < B * H; ++bh)
    for (int64_t i = 0; i < N; ++i) {
      const int64_t row = bh * N + i;
      D[row] = detail::dot(dO + row * d, O + row * d, d);  // undoes P = softmax_rows(S)
      if (dL) D[row] -= dL[row];                            // and L = logsumexp_rows(S)
    }

  const detail::KeyChunks chunks(vis, B * heads.Hkv, num_k_blocks);
  const int64_t num_chunks = chunks.count;
  const std::vector<int64_t>& chunk_begin = chunks.begin;  // chunk c: [chunk_begin[c], chunk_begin[c + 1])
  Scratch<T> dQ_parts((num_chunks - 1) * B * H * N * d);  // chunk c > 0's partial dQ
  auto dQ_part = [&](int64_t c) { return c == 0 ? dQ : dQ_parts.data() + (c - 1) * B * H * N * d; };

  GG_OMP(parallel if (par)) {
    Scratch<T> P(kBlockM * kBlockN);   // exp(S - L), 0 where masked
    Scratch<T> dS(kBlockM * kBlockN);  // dP, then P∘(dP - D) in place
    Scratch<T> acc_a(kBlockN * d);     // dK
    Scratch<T> acc_b(kBlockN * d);     // dV

    GG_OMP(for schedule(static))
    for (int64_t c = 0; c < num_chunks; ++c) std::fill(dQ_part(c), dQ_part(c) + B * H * N * d, T(0));

    // ---- phase 2: dK, dV and the chunks' dQ, one (kv head, chunk of key blocks) per task ----
    GG_OMP(for collapse(3) schedule(dynamic, 1))
    for (int64_t b = 0; b < B; ++b)
      for (int64_t hk = 0; hk < heads.Hkv; ++hk)
        for (int64_t c = 0; c < num_chunks; ++c)
          for (int64_t kb = chunk_begin[c]; kb < chunk_begin[c + 1]; ++kb) {
            // prologue: key rows [j0, j0 + nj); the query blocks that see them
            const int64_t kh = heads.kv_row(b, hk);
            const int64_t j0 = kb * kBlockN;
            const int64_t nj = std::min(kBlockN, vis.nk - j0);
            const T* Kj = K + (kh + j0) * d;
            const T* KTj = Kt.block(kh, j0);
            const T* VTj = Vt.block(kh, j0);
            T* dKj = acc_a.data();
            T* dVj = acc_b.data();
            std::fill(dKj, dKj + nj * d, T(0));
            std::fill(dVj, dVj + nj * d, T(0));
            int64_t qb_first, qb_last;
            vis.query_blocks(j0, nj, kBlockM, &qb_first, &qb_last);

            // main loop: every query head of the group, sweep query blocks [i0, i0 + mi)
            for (int64_t h = hk * heads.group; h < (hk + 1) * heads.group; ++h) {
              const int64_t qh = heads.q_row(b, h);
              for (int64_t qb = qb_first; qb < qb_last; ++qb) {
                const int64_t i0 = qb * kBlockM;
                const int64_t mi = std::min(kBlockM, N - i0);
                const T* Qi = Q + (qh + i0) * d;
                const T* dOi = dO + (qh + i0) * d;
                const T* Di = D.data() + qh + i0;
                detail::tile_abt(mi, d, s, Qi, KTj, P.data(), false);                     // S = s·Q·Kᵀ
                detail::tile_probs(vis, mi, nj, i0, j0, P.data(), L + qh + i0, P.data());  // P = softmax_rows(S)
                detail::tile_abt(mi, d, T(1), dOi, VTj, dS.data(), false);  // undoes O = P·V: dP = dO·Vᵀ
                for (int64_t i = 0; i < mi; ++i)
                  for (int64_t j = 0; j < nj; ++j) {
                    const int64_t ij = i * kBlockN + j;
                    dS[ij] = P[ij] * (dS[ij] - Di[i]);  // undoes P = softmax_rows(S): dS = P∘(dP - D)
                  }
                detail::tile_atb_acc(mi, nj, d, P.data(), dOi, dVj);  // undoes O = P·V: dV += Pᵀ·dO
                detail::tile_atb_acc(mi, nj, d, dS.data(), Qi, dKj);  // undoes S = s·Q·Kᵀ: dK += dSᵀ·Q
                detail::tile_ab_acc(mi, nj, d, dS.data(), Kj, dQ_part(c) + (qh + i0) * d);  // dQ += dS·K
              }
            }

            // epilogue: dK = s·(Σ dSᵀ·Q), dV as accumulated
            T* dK_out = dK + (kh + j0) * d;
            T* dV_out = dV + (kh + j0) * d;
            for (int64_t x = 0; x < nj * d; ++x) {
              dK_out[x] = s * dKj[x];
              dV_out[x] = dVj[x];
            }
          }

    // ---- phase 3: dQ = s·Σ_chunks partial, in chunk order ----
    GG_OMP(for schedule(static))
    for (int64_t x = 0; x < B * H * N * d; ++x) {
      T sum = dQ[x];
      for (int64_t c = 1; c < num_chunks; ++c) sum += dQ_parts[(c - 1) * B * H * N * d + x];
      dQ[x] = s * sum;
    }
  }
}

template void attention_bwd<float>(const AttentionShape&, const float*, const float*, const float*,
                                   const float*, const float*, const float*, const float*, float*,
                                   float*, float*);
template void attention_bwd<double>(const AttentionShape&, const double*, const double*,
                                    const double*, const double*, const double*, const double*,
                                    const double*, double*, double*, double*);

}  // namespace gg::kernels::cpu
