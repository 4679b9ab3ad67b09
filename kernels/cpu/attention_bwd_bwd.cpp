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
// Tiling, the two-pass schedule of docs/attention.md (section 4). S̄ and dP̄ need the row
// scalars E and F, sums over all of a row's keys, so a first pass forms only them; the second
// pass rebuilds each tile once more and, with D, E, F at hand, forms S̄, dP̄ and dS and all
// seven output products:
//   0. D = rowsum(dO∘O), parallel over rows.
//   1. One task per (b, h, query block of kBlockM rows), sweeping the key blocks: E and F, stored
//      per row (B·H·N scalars each). F's Σ_j P∘H comes as rowsum(dO∘(P·Ṽ)): the output product
//      P·Ṽ replaces the score tile H here, and is kept as grad_dO's first term.
//   2. One task per (b, kv head, chunk of key blocks; detail::KeyChunks), each key block sweeping
//      the query blocks of every query head of the kv head's group: grad_K and grad_V in the
//      task's own kBlockN x d accumulators (the group sum needs no atomics), grad_Q and grad_dO
//      added into the chunk's own N x d partial sums (grad_dO's -E·O comes as dP̄·V; chunk 0's
//      grad_dO starts from pass 1's P·Ṽ).
//   3. grad_Q = s·Σ_chunks, grad_dO = Σ_chunks, the chunks added in their order.
// Products per tile: pass 1 rebuilds 4 score-like tiles (S, dP, the two halves of G) and forms
// P·Ṽ; pass 2 rebuilds 5 (those and H) and does 6 output products (S̄ᵀ·Q, dSᵀ·Q̃, dP̄ᵀ·dO, S̄·K,
// dS·K̃, dP̄·V): 16.
// Masks: tiles outside every row's window are skipped, tiles across a window edge are masked
// (P = 0). A row that sees no key has P = 0 throughout, so it contributes nothing anywhere.
// Stages (kernels/params.h, BobStage): kRowSums is pass 1 alone (P·Ṽ only for F); kFromRowSums
// is passes 2 and 3 with the caller's E and F (the whole rows'), over this call's keys, with P·Ṽ
// formed in pass 2.
// Scratch: per thread seven kBlockM x kBlockN tiles and three block x d accumulators; K, V, K̃, Ṽ
// transposed by key block (K-shaped each); per chunk but the first, partial sums of grad_Q and
// grad_dO ((B, H, N, d) each).
#include <algorithm>
#include <type_traits>
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
  const detail::KeyBlocksT<T> KT(p, K, par), VT(p, V, par), KtT(p, Kt, par), VtT(p, Vt, par);  // transposed
  Scratch<T> D(rows), E_own(stage == BobStage::kWhole ? rows : 0), F_own(E_own.size());  // (B, H, N)
  T* const E = E_own.empty() ? E_io : E_own.data();  // the stages' E and F are the caller's
  T* const F = F_own.empty() ? F_io : F_own.data();
  const detail::KeyChunks chunks(vis, B * heads.Hkv, num_k_blocks);
  const bool vt_in_pass1 = has_Vt && !from_sums;  // pass 1 forms P·Ṽ: grad_dO's first term
  const int64_t num_chunks = row_sums ? 0 : chunks.count;
  // Partial sums of grad_Q and grad_dO: chunk 0's are the outputs themselves.
  Scratch<T> gQ_parts(std::max<int64_t>(num_chunks - 1, 0) * rows * d), gdO_parts(gQ_parts.size());
  auto gQ_part = [&](int64_t c) { return c == 0 ? gQ : gQ_parts.data() + (c - 1) * rows * d; };
  auto gdO_part = [&](int64_t c) { return c == 0 ? gdO : gdO_parts.data() + (c - 1) * rows * d; };

  // ---- pass 0: D = rowsum(dO∘O) ----
  GG_OMP(parallel for if (par))
  for (int64_t r = 0; r < rows; ++r) D[r] = detail::dot(dO + r * d, O + r * d, d) - (dL ? dL[r] : T(0));

  GG_OMP(parallel if (par)) {
    const int64_t tile = kBlockM * kBlockN;
    // Recomputed tiles.
    Scratch<T> P(tile), dP(tile), G(tile), Hs(tile);  // Hs: the tile of H = dO·Vtᵀ
    // Coefficient tiles of pass 2, each multiplied into a block of rows.
    Scratch<T> C1(tile);   // S̄ = P∘(P̄ - F)
    Scratch<T> PdP(tile);  // dP̄ = P∘(G - E)
    Scratch<T> dS(tile);   // P∘(dP - D)
    // grad_K, grad_V accumulators of pass 2.
    Scratch<T> gK_acc(kBlockN * d), gV_acc(kBlockN * d);
    Scratch<T> PVt(has_Vt ? kBlockM * d : 0);  // pass 1: P·Ṽ of the query block

    // Recomputes, for query rows [i0, i0 + mi) of the query head starting at row `head` and key
    // rows [j0, j0 + nj) of the kv head starting at row `kh`, P always, dP and G when has_G, H
    // when has_H.
    auto score_tiles = [&](int64_t head, int64_t kh, int64_t i0, int64_t mi, int64_t j0, int64_t nj, bool with_H) {
      const T* Qi = Q + (head + i0) * d;
      const T* dOi = dO + (head + i0) * d;
      detail::tile_abt(mi, d, s, Qi, KT.block(kh, j0), P.data(), false);  // S = s·Q·Kᵀ
      detail::tile_probs(vis, mi, nj, i0, j0, P.data(), L + head + i0, P.data());
      if (has_G) {
        detail::tile_abt(mi, d, T(1), dOi, VT.block(kh, j0), dP.data(), false);  // dP = dO·Vᵀ
        bool first = true;
        if (has_Qt) {  // from dQ = s·dS·K
          detail::tile_abt(mi, d, s, Qt + (head + i0) * d, KT.block(kh, j0), G.data(), false);
          first = false;
        }
        if (has_Kt)  // from dK = s·dSᵀ·Q
          detail::tile_abt(mi, d, s, Qi, KtT.block(kh, j0), G.data(), !first);
      }
      if (has_H && with_H)  // from dV = Pᵀ·dO
        detail::tile_abt(mi, d, T(1), dOi, VtT.block(kh, j0), Hs.data(), false);
    };

    // With the rows' D, E and F known (pass 2, and pass 1 of kFromRowSums), the coefficient tiles
    // of score_tiles' tile: C1 <- S̄ = P∘(P̄ - F), PdP <- dP̄ = P∘(G - E) and dS = P∘(dP - D).
    // Branch-free, vectorised row loops: run(f) calls f(std::bool_constant<has_G>, ...<has_H>).
    auto with_terms = [&](auto f) {
      if (has_G && has_H) f(std::true_type{}, std::true_type{});
      else if (has_G) f(std::true_type{}, std::false_type{});
      else f(std::false_type{}, std::true_type{});
    };
    auto known_row_coefficients = [&](int64_t mi, int64_t nj, const T* Di, const T* Ei, const T* Fi) {
      with_terms([&](auto g, auto h) {
        constexpr bool kG = decltype(g)::value, kH = decltype(h)::value;
        for (int64_t i = 0; i < mi; ++i) {
          const int64_t o = i * kBlockN;
          const T* __restrict Pr = P.data() + o;
          const T* __restrict dPr = dP.data() + o;
          const T* __restrict Gr = G.data() + o;
          const T* __restrict Hr = Hs.data() + o;
          T* __restrict dSr = dS.data() + o;
          T* __restrict C1r = C1.data() + o;
          T* __restrict PdPr = PdP.data() + o;
          const T di = Di[i], ei = Ei[i], fi = Fi[i];
          GG_OMP(simd)
          for (int64_t j = 0; j < nj; ++j) {
            T Pbar = 0;
            if constexpr (kG) {  // undoes dS = P∘(dP - D), D = Σ P∘dP, in P and in dP
              dSr[j] = Pr[j] * (dPr[j] - di);
              Pbar = (dPr[j] - di) * Gr[j] - dPr[j] * ei;  // P̄ = (dP - D)∘G - dP∘E
              PdPr[j] = Pr[j] * (Gr[j] - ei);               // dP̄ = P∘(G - E)
            }
            if constexpr (kH) Pbar += Hr[j];  // undoes dV = Pᵀ·dO in P: P̄ += H
            C1r[j] = Pr[j] * (Pbar - fi);     // undoes P = softmax_rows(S): S̄ = P∘(P̄ - F)
          }
        }
      });
    };

    // ---- pass 1: E and F, one query block per task (not with E and F given) ----
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
          std::fill(Fi, Fi + mi, T(0));  // Σ_j P∘dP∘G, completed in the epilogue
          std::fill(PVt.begin(), PVt.end(), T(0));

          // main loop: sweep the key blocks [j0, j0 + nj) that some row sees
          for (int64_t kb = kb_first; kb < kb_last; ++kb) {
            const int64_t j0 = kb * kBlockN;
            const int64_t nj = std::min(kBlockN, vis.nk - j0);
            score_tiles(head, kh, i0, mi, j0, nj, /*with_H=*/false);  // Σ P∘H comes from P·Ṽ
            if (has_G)  // ℒ ∋ Σ dS∘G, from dQ = s·dS·K and dK = s·dSᵀ·Q
              for (int64_t i = 0; i < mi; ++i) {
                const int64_t o = i * kBlockN;
                const T* __restrict Pr = P.data() + o;
                const T* __restrict dPr = dP.data() + o;
                const T* __restrict Gr = G.data() + o;
                T e = 0, f = 0;
                GG_OMP(simd reduction(+ : e, f))
                for (int64_t j = 0; j < nj; ++j) {
                  const T pg = Pr[j] * Gr[j];
                  e += pg;           // E = Σ P∘G
                  f += dPr[j] * pg;  // F ∋ Σ P∘dP∘G
                }
                Ei[i] += e;
                Fi[i] += f;
              }
            if (has_Vt)  // ℒ ∋ Σ P∘H, from dV = Pᵀ·dO: P·Ṽ, for F and as grad_dO's first term
              detail::tile_ab_acc(mi, nj, d, P.data(), Vt + (kh + j0) * d, PVt.data());
          }

          // epilogue: F = Σ P∘dP∘G + Σ P∘H - (D + D')∘E: D' = D - dL from dS, D = Σ P∘dP from
          // P̄'s E·dP, and Σ_j P∘H = rowsum(dO∘(P·Ṽ)); grad_dO starts as P·Ṽ (undoes dV = Pᵀ·dO in dO)
          for (int64_t i = 0; i < mi; ++i) {
            if (has_Vt) {
              const T* pv = PVt.data() + i * d;
              Fi[i] += detail::dot(dO + (head + i0 + i) * d, pv, d);
              if (!row_sums) std::copy(pv, pv + d, gdO + (head + i0 + i) * d);
            }
            Fi[i] -= (T(2) * Di[i] + (dL ? dL[head + i0 + i] : T(0))) * Ei[i];
          }
        }
    // (implicit barrier: pass 2 reads every row's E and F; the row-sum stage has no pass 2)

    GG_OMP(for schedule(static))
    for (int64_t c = 0; c < num_chunks; ++c) {
      std::fill(gQ_part(c), gQ_part(c) + rows * d, T(0));
      if (c > 0 || !vt_in_pass1) std::fill(gdO_part(c), gdO_part(c) + rows * d, T(0));
    }

    // ---- pass 2: grad_K, grad_V and the chunks' grad_Q, grad_dO, one (kv head, chunk) per task ----
    GG_OMP(for collapse(3) schedule(dynamic, 1))
    for (int64_t b = 0; b < B; ++b)
      for (int64_t hk = 0; hk < heads.Hkv; ++hk)
        for (int64_t c = 0; c < num_chunks; ++c)
          for (int64_t kb = chunks.begin[c]; kb < chunks.begin[c + 1]; ++kb) {
            // prologue: key rows [j0, j0 + nj); the query blocks that see them
            const int64_t kh = heads.kv_row(b, hk);
            const int64_t j0 = kb * kBlockN;
            const int64_t nj = std::min(kBlockN, vis.nk - j0);
            const T* Kj = K + (kh + j0) * d;
            const T* Vj = V + (kh + j0) * d;
            T* gKj = gK_acc.data();
            T* gVj = gV_acc.data();
            std::fill(gKj, gKj + nj * d, T(0));
            std::fill(gVj, gVj + nj * d, T(0));
            int64_t qb_first, qb_last;
            vis.query_blocks(j0, nj, kBlockM, &qb_first, &qb_last);

            // main loop: for every query head of the group, sweep query blocks [i0, i0 + mi)
            const int64_t n_qb = qb_last - qb_first;
            for (int64_t t = 0; t < heads.group * n_qb; ++t) {
              const int64_t head = heads.q_row(b, hk * heads.group + t / n_qb);
              const int64_t i0 = (qb_first + t % n_qb) * kBlockM;
              const int64_t mi = std::min(kBlockM, N - i0);
              score_tiles(head, kh, i0, mi, j0, nj, /*with_H=*/true);
              known_row_coefficients(mi, nj, D.data() + head + i0, E + head + i0, F + head + i0);
              const T* Sbar = C1.data();
              const T* dPbar = PdP.data();
              const T* Qi = Q + (head + i0) * d;
              const T* dOi = dO + (head + i0) * d;
              T* gQi = gQ_part(c) + (head + i0) * d;
              T* gdOi = gdO_part(c) + (head + i0) * d;
              // undoes S = s·Q·Kᵀ (through P = softmax_rows(S)): grad_K += S̄ᵀ·Q, grad_Q += S̄·K
              detail::tile_atb_acc(mi, nj, d, Sbar, Qi, gKj);
              detail::tile_ab_acc(mi, nj, d, Sbar, Kj, gQi);
              if (has_Qt)  // undoes dQ = s·dS·K through K: grad_K += dSᵀ·Qt
                detail::tile_atb_acc(mi, nj, d, dS.data(), Qt + (head + i0) * d, gKj);
              if (has_Kt)  // undoes dK = s·dSᵀ·Q through Q: grad_Q += dS·Kt
                detail::tile_ab_acc(mi, nj, d, dS.data(), Kt + (kh + j0) * d, gQi);
              if (has_G) {  // undoes dP = dO·Vᵀ: grad_V += dP̄ᵀ·dO, grad_dO += dP̄·V
                detail::tile_atb_acc(mi, nj, d, dPbar, dOi, gVj);
                detail::tile_ab_acc(mi, nj, d, dPbar, Vj, gdOi);
              }
              if (has_Vt && !vt_in_pass1)  // undoes dV = Pᵀ·dO in dO: grad_dO += P·Vt
                detail::tile_ab_acc(mi, nj, d, P.data(), Vt + (kh + j0) * d, gdOi);
            }

            // epilogue: grad_K = s·(S̄ᵀ·Q + dSᵀ·Qt), grad_V as accumulated (0 without G)
            T* gK_out = gK + (kh + j0) * d;
            T* gV_out = gV + (kh + j0) * d;
            for (int64_t x = 0; x < nj * d; ++x) {
              gK_out[x] = s * gKj[x];
              gV_out[x] = gVj[x];
            }
          }

    // ---- pass 3: grad_Q = s·Σ_chunks, grad_dO = Σ_chunks, in chunk order ----
    GG_OMP(for schedule(static))
    for (int64_t x = 0; x < (num_chunks > 0 ? rows * d : 0); ++x) {
      T q = gQ[x], o = gdO[x];
      for (int64_t c = 1; c < num_chunks; ++c) {
        q += gQ_parts[(c - 1) * rows * d + x];
        o += gdO_parts[(c - 1) * rows * d + x];
      }
      gQ[x] = s * q;
      gdO[x] = o;
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
