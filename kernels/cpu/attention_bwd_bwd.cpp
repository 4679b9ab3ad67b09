// attention_bwd_bwd: backward-over-backward (BoB) of softmax attention on the CPU.
//
// BoB differentiates  ℒ = <Qt, dQ> + <Kt, dK> + <Vt, dV>  with respect to Q, K, V and dO, where
// (dQ, dK, dV) is the first backward (attention_bwd.cpp) and Qt, Kt, Vt are their cotangents.
// O and L are saved values: no gradient flows into them. Math (one head):
//   P = exp(s·Q·Kᵀ - L) (masked: 0),  dP = dO·Vᵀ,  D = rowsum(dO∘O),  dS = P∘(dP - D)
// (with a cotangent dL of L, D stands for D - dL below, except in F, which takes 2·D + dL in
// place of 2·D; grad_dL = E)
//   G = s·(Qt·Kᵀ + Q·Ktᵀ)          ℒ's weight on dS      (<Qt, s·dS·K> + <Kt, s·dSᵀ·Q> = Σ dS∘G)
//   H = dO·Vtᵀ                     ℒ's weight on P       (<Vt, Pᵀ·dO> = Σ P∘H)
//   E = Σ_j P∘G,   F = Σ_j P∘(dP∘G + H) - 2·D∘E     (row scalars; Σ_j P∘H = rowsum(dO∘(P·Vt)))
//   P̄ = (dP - D)∘G - dP∘E + H,   S̄ = P∘(P̄ - F),   dP̄ = P∘(G - E)
//   grad_Q  = s·(S̄·K + dS·Kt)        grad_K  = s·(S̄ᵀ·Q + dSᵀ·Qt)
//   grad_V  = dP̄ᵀ·dO                 grad_dO = dP̄·V + P·Vt
// An absent cotangent (nullptr) drops its terms: no Qt and no Kt means G = 0 (so E = 0, dP̄ = 0,
// grad_V = 0, and dP is never formed); no Vt means H = 0. All absent: every output is 0.
//
// Shapes: Q, O, dO, Qt, grad_Q, grad_dO are (B, H, N, d); K, V, Kt, Vt, grad_K, grad_V are
// (B, Hkv, Nk, d); L, D, E, F are (B, H, N).
//
// Tiling: E and F first, then one fused sweep over the key blocks (docs/attention.md, section 4):
//   0. D = rowsum(dO∘O), parallel over rows.
//   1. One task per (b, h, query block of kBlockM rows), sweeping the key blocks: the row sums
//      E and F, stored per row (B·H·N scalars each), and the products that need neither, dS·Kt
//      and P·Vt, as the starts of grad_Q and grad_dO (F's Σ_j P∘H is rowsum(dO∘(P·Vt)), so H
//      is not formed here).
//   2. One task per (b, kv head, segment of key blocks; detail::key_segments), each key block
//      sweeping the query blocks of every query head of the kv head's group, with the rows' D, E,
//      F at hand: S̄, dS and dP̄ tile by tile, grad_K and grad_V in the task's accumulators (the
//      group sum stays there), grad_Q and grad_dO added into the segment's copies of them
//      (grad_dO's -E·O comes as dP̄·V).
//   3. The segments of grad_Q and grad_dO summed in order, parallel over rows.
// Masks: tiles outside every row's window are skipped, tiles across a window edge are masked
// (P = 0). A row that sees no key has P = 0 throughout, so it contributes nothing anywhere.
// Stages (kernels/params.h, BobStage): kRowSums is pass 1 alone (grad_Q and grad_dO as scratch);
// kFromRowSums is passes 2 and 3 with the caller's E and F, pass 2 then forming dS·Kt and P·Vt too.
// Scratch per thread: seven kBlockM x kBlockN tiles and two kBlockN x d accumulators; per call,
// the segments of grad_Q and grad_dO after the first (the outputs themselves).
#include <algorithm>
#include <vector>

#include "kernels/cpu/attention.h"

namespace gg::kernels::cpu {

template <typename T>
void attention_bwd_bwd(const AttentionShape& p, const T* Q, const T* K, const T* V, const T* O,
                       const T* L, const T* dO, const T* dL, const T* Qt, const T* Kt, const T* Vt,
                       T* gQ, T* gK, T* gV, T* gdO, T* gdL, BobStage stage, T* E_io, T* F_io) {
  const int64_t B = p.B, num_heads = p.H, N = p.N, d = p.d;
  const detail::Visibility vis(p);
  const detail::Heads heads(p);
  const int64_t rows = B * num_heads * N;          // query rows
  const int64_t kv_rows = B * heads.Hkv * vis.nk;  // key rows
  const T s = static_cast<T>(p.scale);
  const bool has_Qt = Qt != nullptr, has_Kt = Kt != nullptr, has_Vt = Vt != nullptr;
  const bool has_G = has_Qt || has_Kt;  // G = s·(Qt·Kᵀ + Q·Ktᵀ) is nonzero
  const bool has_H = has_Vt;            // H = dO·Vtᵀ is nonzero

  const bool row_sums = stage == BobStage::kRowSums, from_sums = stage == BobStage::kFromRowSums;
  if (!has_G && !has_H) {  // ℒ = 0: every gradient is zero
    if (row_sums) {
      std::fill(E_io, E_io + rows, T(0));
      std::fill(F_io, F_io + rows, T(0));
      return;
    }
    std::fill(gQ, gQ + rows * d, T(0));
    std::fill(gK, gK + kv_rows * d, T(0));
    std::fill(gV, gV + kv_rows * d, T(0));
    std::fill(gdO, gdO + rows * d, T(0));
    if (gdL) std::fill(gdL, gdL + rows, T(0));
    return;
  }

  const int64_t num_q_blocks = detail::num_blocks(N, kBlockM);
  const int64_t num_k_blocks = detail::num_blocks(vis.nk, kBlockN);
  [[maybe_unused]] const bool par = detail::worth_threads(p);
  std::vector<T> D(rows), E_own(stage == BobStage::kWhole ? rows : 0), F_own(E_own.size());  // (B, H, N)
  T* const E = E_own.empty() ? E_io : E_own.data();  // the stages' E and F are the caller's
  T* const F = F_own.empty() ? F_io : F_own.data();
  const int64_t segments = row_sums ? 1 : detail::key_segments(p, num_k_blocks, par);
  std::vector<T> gQ_extra((segments - 1) * rows * d), gdO_extra(gQ_extra.size());  // segments after the first

  // ---- pass 0: D = rowsum(dO∘O) ----
  GG_OMP(parallel for if (par))
  for (int64_t r = 0; r < rows; ++r) D[r] = detail::dot(dO + r * d, O + r * d, d) - (dL ? dL[r] : T(0));

  GG_OMP(parallel if (par)) {
    const int64_t tile = kBlockM * kBlockN;
    // Recomputed tiles.
    std::vector<T> P(tile), dP(tile), G(tile), Hs(tile);  // Hs: the tile of H = dO·Vtᵀ
    // Coefficient tiles, each multiplied into a block of rows.
    std::vector<T> Sbar(tile);   // S̄ = P∘(P̄ - F)
    std::vector<T> dPbar(tile);  // dP̄ = P∘(G - E)
    std::vector<T> dS(tile);     // P∘(dP - D)
    // Key-block accumulators.
    std::vector<T> gKj(kBlockN * d), gVj(kBlockN * d);

    // Recomputes, for query rows [i0, i0 + mi) of the query head starting at row `head` and key
    // rows [j0, j0 + nj) of the kv head starting at row `kh`, P always, dP and G when has_G, H
    // when with_H.
    auto score_tiles = [&](int64_t head, int64_t kh, int64_t i0, int64_t mi, int64_t j0, int64_t nj, bool with_H) {
      const T* Qi = Q + (head + i0) * d;
      const T* dOi = dO + (head + i0) * d;
      const T* Kj = K + (kh + j0) * d;
      const T* Vj = V + (kh + j0) * d;
      detail::tile_abt(mi, nj, d, s, Qi, Kj, P.data(), false);  // S = s·Q·Kᵀ
      detail::tile_probs(vis, mi, nj, i0, j0, P.data(), L + head + i0, P.data());
      if (has_G) {
        detail::tile_abt(mi, nj, d, T(1), dOi, Vj, dP.data(), false);  // dP = dO·Vᵀ
        bool first = true;
        if (has_Qt) {  // from dQ = s·dS·K
          detail::tile_abt(mi, nj, d, s, Qt + (head + i0) * d, Kj, G.data(), false);
          first = false;
        }
        if (has_Kt)  // from dK = s·dSᵀ·Q
          detail::tile_abt(mi, nj, d, s, Qi, Kt + (kh + j0) * d, G.data(), !first);
      }
      if (with_H)  // from dV = Pᵀ·dO
        detail::tile_abt(mi, nj, d, T(1), dOi, Vt + (kh + j0) * d, Hs.data(), false);
    };

    // ---- pass 1: E, F and the starts of grad_Q and grad_dO, one query block per task ----
    GG_OMP(for collapse(3) schedule(dynamic, 1))
    for (int64_t b = 0; b < (from_sums ? 0 : B); ++b)
      for (int64_t h = 0; h < num_heads; ++h)
        for (int64_t qb = 0; qb < num_q_blocks; ++qb) {
          // prologue: query rows [i0, i0 + mi)
          const int64_t head = heads.q_row(b, h), kh = heads.kv_row_of_q(b, h);
          const int64_t i0 = qb * kBlockM;
          const int64_t mi = std::min(kBlockM, N - i0);
          int64_t kb_first, kb_last;
          vis.key_blocks(i0, mi, kBlockN, &kb_first, &kb_last);
          const T* Di = D.data() + head + i0;
          T* Ei = E + head + i0;
          T* Fi = F + head + i0;
          std::fill(Ei, Ei + mi, T(0));  // Σ_j P∘G
          std::fill(Fi, Fi + mi, T(0));  // Σ_j P∘(dP∘G + H), completed in the epilogue
          T* gQi = gQ + (head + i0) * d;    // pass 2 adds the rest (kRowSums: scratch)
          T* gdOi = gdO + (head + i0) * d;
          std::fill(gQi, gQi + mi * d, T(0));
          std::fill(gdOi, gdOi + mi * d, T(0));

          // main loop: sweep the key blocks [j0, j0 + nj) that some row sees
          for (int64_t kb = kb_first; kb < kb_last; ++kb) {
            const int64_t j0 = kb * kBlockN;
            const int64_t nj = std::min(kBlockN, vis.nk - j0);
            score_tiles(head, kh, i0, mi, j0, nj, /*with_H=*/false);
            if (has_G)  // ℒ ∋ Σ dS∘G, from dQ = s·dS·K and dK = s·dSᵀ·Q
              for (int64_t i = 0; i < mi; ++i) {
                const T *Pi = P.data() + i * kBlockN, *dPi = dP.data() + i * kBlockN, *Gi = G.data() + i * kBlockN;
                T* dSi = dS.data() + i * kBlockN;
                T e = 0, f = 0;
                GG_OMP(simd reduction(+ : e, f))
                for (int64_t j = 0; j < nj; ++j) {
                  e += Pi[j] * Gi[j];            // E = Σ P∘G
                  f += Pi[j] * Gi[j] * dPi[j];   // F ∋ Σ P∘dP∘G
                  dSi[j] = Pi[j] * (dPi[j] - Di[i]);  // dS = P∘(dP - D), as in the backward
                }
                Ei[i] += e;
                Fi[i] += f;
              }
            // ℒ ∋ Σ P∘H, from dV = Pᵀ·dO: F's part rowsum(dO∘(P·Vt)) from grad_dO's P·Vt (epilogue)
            if (has_Vt)  // undoes dV = Pᵀ·dO in dO: grad_dO += P·Vt
              detail::tile_ab_acc(mi, nj, d, P.data(), Vt + (kh + j0) * d, gdOi);
            if (has_Kt && !row_sums)  // undoes dK = s·dSᵀ·Q in Q: grad_Q += dS·Kt
              detail::tile_ab_acc(mi, nj, d, dS.data(), Kt + (kh + j0) * d, gQi);
          }

          // epilogue: F = Σ P∘(dP∘G + H) - (D + D')∘E: D' = D - dL from dS, D = Σ P∘dP from P̄'s E·dP
          for (int64_t i = 0; i < mi; ++i) {
            if (has_Vt) Fi[i] += detail::dot(dO + (head + i0 + i) * d, gdOi + i * d, d);  // Σ P∘H
            Fi[i] -= (T(2) * Di[i] + (dL ? dL[head + i0 + i] : T(0))) * Ei[i];
          }
        }
    // (implicit barrier: pass 2 reads every row's E and F)

    // ---- pass 2: the four gradients, one (b, kv head, segment of key blocks) per task ----
    GG_OMP(for collapse(3) schedule(dynamic, 1))
    for (int64_t b = 0; b < (row_sums ? 0 : B); ++b)
      for (int64_t hk = 0; hk < heads.Hkv; ++hk)
        for (int64_t seg = 0; seg < segments; ++seg) {
          // prologue: this segment's copies of grad_Q and grad_dO, zero over the group's query
          // heads (the first holds pass 1's dS·Kt and P·Vt unless E and F were given)
          const int64_t kh = heads.kv_row(b, hk);
          T* gQ_seg = seg == 0 ? gQ : gQ_extra.data() + (seg - 1) * rows * d;
          T* gdO_seg = seg == 0 ? gdO : gdO_extra.data() + (seg - 1) * rows * d;
          for (int64_t h = hk * heads.group; h < (hk + 1) * heads.group && (seg > 0 || from_sums); ++h) {
            const int64_t first = heads.q_row(b, h) * d, last = (heads.q_row(b, h) + N) * d;
            std::fill(gQ_seg + first, gQ_seg + last, T(0));
            std::fill(gdO_seg + first, gdO_seg + last, T(0));
          }

          // main loop: the segment's key blocks [j0, j0 + nj), each sweeping the query blocks that see it
          for (int64_t kb = seg; kb < num_k_blocks; kb += segments) {
            const int64_t j0 = kb * kBlockN;
            const int64_t nj = std::min(kBlockN, vis.nk - j0);
            const T* Kj = K + (kh + j0) * d;
            std::fill(gKj.begin(), gKj.begin() + nj * d, T(0));
            std::fill(gVj.begin(), gVj.begin() + nj * d, T(0));
            int64_t qb_first, qb_last;
            vis.query_blocks(j0, nj, kBlockM, &qb_first, &qb_last);

            // for every query head of the group, query blocks [i0, i0 + mi)
            const int64_t n_qb = qb_last - qb_first;
            for (int64_t t = 0; t < heads.group * n_qb; ++t) {
              const int64_t head = heads.q_row(b, hk * heads.group + t / n_qb);
              const int64_t i0 = (qb_first + t % n_qb) * kBlockM;
              const int64_t mi = std::min(kBlockM, N - i0);
              score_tiles(head, kh, i0, mi, j0, nj, has_H);
              const T* Di = D.data() + head + i0;
              const T* Ei = E + head + i0;
              const T* Fi = F + head + i0;

              // Coefficient tiles: S̄ = P∘(P̄ - F), dP̄ = P∘(G - E) and dS = P∘(dP - D).
              for (int64_t i = 0; i < mi; ++i)
                for (int64_t j = 0; j < nj; ++j) {
                  const int64_t ij = i * kBlockN + j;
                  T Pbar = 0;
                  if (has_G) {  // undoes dS = P∘(dP - D), D = Σ P∘dP, in P and in dP
                    dS[ij] = P[ij] * (dP[ij] - Di[i]);
                    Pbar = (dP[ij] - Di[i]) * G[ij] - dP[ij] * Ei[i];  // P̄ = (dP - D)∘G - dP∘E
                    dPbar[ij] = P[ij] * (G[ij] - Ei[i]);               // dP̄ = P∘(G - E)
                  }
                  if (has_H) Pbar += Hs[ij];            // undoes dV = Pᵀ·dO in P: P̄ += H
                  Sbar[ij] = P[ij] * (Pbar - Fi[i]);    // undoes P = softmax_rows(S): S̄ = P∘(P̄ - F)
                }

              const T* Qi = Q + (head + i0) * d;
              const T* dOi = dO + (head + i0) * d;
              T* gQi = gQ_seg + (head + i0) * d;
              T* gdOi = gdO_seg + (head + i0) * d;
              // undoes S = s·Q·Kᵀ: grad_K += S̄ᵀ·Q, grad_Q += S̄·K
              detail::tile_atb_acc(mi, nj, d, Sbar.data(), Qi, gKj.data());
              detail::tile_ab_acc(mi, nj, d, Sbar.data(), Kj, gQi);
              if (has_Qt)  // undoes dQ = s·dS·K through K: grad_K += dSᵀ·Qt
                detail::tile_atb_acc(mi, nj, d, dS.data(), Qt + (head + i0) * d, gKj.data());
              if (has_Kt && from_sums)  // undoes dK = s·dSᵀ·Q through Q: grad_Q += dS·Kt (else pass 1)
                detail::tile_ab_acc(mi, nj, d, dS.data(), Kt + (kh + j0) * d, gQi);
              if (has_G) {  // undoes dP = dO·Vᵀ: grad_V += dP̄ᵀ·dO, grad_dO += dP̄·V
                detail::tile_atb_acc(mi, nj, d, dPbar.data(), dOi, gVj.data());
                detail::tile_ab_acc(mi, nj, d, dPbar.data(), V + (kh + j0) * d, gdOi);
              }
              if (has_Vt && from_sums)  // undoes dV = Pᵀ·dO in dO: grad_dO += P·Vt (else pass 1)
                detail::tile_ab_acc(mi, nj, d, P.data(), Vt + (kh + j0) * d, gdOi);
            }

            // key block epilogue: grad_K = s·(S̄ᵀ·Q + dSᵀ·Qt), grad_V as accumulated (0 without G)
            T* gK_out = gK + (kh + j0) * d;
            T* gV_out = gV + (kh + j0) * d;
            for (int64_t x = 0; x < nj * d; ++x) {
              gK_out[x] = s * gKj[x];
              gV_out[x] = gVj[x];
            }
          }
        }
    // (implicit barrier: pass 3 reads every segment)

    // ---- pass 3: grad_Q = s·(S̄·K + dS·Kt), grad_dO = dP̄·V + P·Vt, the segments summed in order ----
    GG_OMP(for)
    for (int64_t r = 0; r < (row_sums ? 0 : rows); ++r) {
      T* gQ_r = gQ + r * d;
      T* gdO_r = gdO + r * d;
      for (int64_t seg = 1; seg < segments; ++seg) {
        detail::axpy(T(1), gQ_extra.data() + ((seg - 1) * rows + r) * d, gQ_r, d);
        detail::axpy(T(1), gdO_extra.data() + ((seg - 1) * rows + r) * d, gdO_r, d);
      }
      GG_OMP(simd)
      for (int64_t k = 0; k < d; ++k) gQ_r[k] *= s;
    }
  }
  if (gdL) std::copy(E, E + rows, gdL);  // ∂ℒ/∂dL = Σ_j P∘G = E: dL enters as D - dL
}

template void attention_bwd_bwd<float>(const AttentionShape&, const float*, const float*,
                                       const float*, const float*, const float*, const float*,
                                       const float*, const float*, const float*, const float*,
                                       float*, float*, float*, float*, float*, BobStage, float*, float*);
template void attention_bwd_bwd<double>(const AttentionShape&, const double*, const double*,
                                        const double*, const double*, const double*, const double*,
                                        const double*, const double*, const double*, const double*,
                                        double*, double*, double*, double*, double*, BobStage, double*,
                                        double*);

}  // namespace gg::kernels::cpu
