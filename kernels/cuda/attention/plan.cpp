// The CUDA attention kernels' launch plans (plan.h): plain arithmetic on the problem's shape and
// the SM count, no CUDA call.
#include "kernels/cuda/attention/plan.h"

#include <algorithm>

namespace gg::kernels::cuda {

TailSplitPlan plan_group_split(int64_t units, int group, int sms, double longest_share) {
  const TailSplitPlan none{static_cast<int>(units), 1, 0};
  if (group <= 1 || sms <= 0 || units < 1) return none;
  int fill = 1, tail = 1;
  if (units < 2 * int64_t{sms}) {
    const int64_t want = (4 * int64_t{sms} + units - 1) / units;
    for (int p = 2; p <= group && p <= want; ++p)
      if (group % p == 0) fill = p;
  }
  for (int p = 2; p <= group / 4 && longest_share > tail / 6.0; ++p)
    if (group % p == 0) tail = p;
  const int pieces = std::max(fill, tail);
  return pieces <= 1 ? none : TailSplitPlan{0, pieces, static_cast<int>(units)};
}

double longest_key_unit_share(int64_t nq, int64_t nk, bool causal, int64_t window_left, int64_t window_right,
                              int64_t bh_kv, int tile_rows, int sms) {
  if (window_left >= 0 || nq < 1 || nk < 1 || bh_kv < 1 || tile_rows < 1 || sms < 1) return 0;
  // the mask without its left bound, as the kernels' Params form it (right: 0 when causal)
  const MaskBand mask{static_cast<int>(nq), static_cast<int>(nk), -1, causal ? 0 : static_cast<int>(window_right)};
  int64_t total = 0;
  int longest = 0;
  for (int j0 = 0; j0 < mask.nk; j0 += kKeyBlockRows) {
    const int nb = key_block_band(mask, j0, tile_rows).count;
    total += nb;
    longest = std::max(longest, nb);
  }
  return static_cast<double>(longest) * sms / (static_cast<double>(total) * bh_kv);
}

int ordered_add_segments(int64_t nq, int64_t nk, int group, bool left_bounded, int sms) {
  if (left_bounded || nq < 1 || nk < 1 || group < 1 || sms < 1) return 1;
  const int64_t blocks = kKeyBlockRows;
  const int64_t steps = group * ((nq + blocks - 1) / blocks), chain = std::min<int64_t>(sms, (nk + blocks - 1) / blocks);
  int s = 1;
  while (s < 8 && 2 * s * steps <= chain && 2 * s * nq * group <= nk) s *= 2;
  return s;
}

TailSplitPlan plan_tail_split(int64_t units, int tiles, bool causal, int sms, int min_tiles) {
  const TailSplitPlan none{static_cast<int>(units), 1, 0};
  if (sms <= 0 || causal || units <= sms || units % sms == 0) return none;
  const int r = static_cast<int>(units % sms);
  // the length of the last round, in units, counting about two tiles' work for a piece's start
  auto cost = [&](int s) { return static_cast<double>((int64_t{r} * s + sms - 1) / sms) * (1.0 / s + 2.0 / tiles); };
  // a split must save a tenth of the last wave: it also costs a memset and a conversion kernel
  // (docs/kernels.md §6: small problems measured no faster)
  int best = 1;
  double best_cost = 0.9 * cost(1);
  for (int s = 2; s <= 16 && min_tiles * s <= tiles; ++s) {
    const double c = cost(s);
    if (c < best_cost) {
      best_cost = c;
      best = s;
    }
  }
  return best == 1 ? none : TailSplitPlan{static_cast<int>(units - r), best, r};
}

}  // namespace gg::kernels::cuda
