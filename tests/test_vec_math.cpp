// The attention tiles' exp (kernels/cpu attention_row_exp: detail::row_exp as the library is
// built, exp_tile_ps for f32 on AVX-512, Eigen's packet exp otherwise) against std::exp in a
// wider type: within 1 ulp (exp_tile_ps) or 2 ulp (Eigen's f32 and f64, about 1.25 and 1.55 at
// worst) of the correctly rounded result over the whole range, subnormal results included; exactly 0 for -inf and below the underflow, inf past the
// overflow, NaN for NaN; and an entry's value independent of its column and of the row length
// (the tails go through padded packets).
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <limits>
#include <vector>

#include "kernels/cpu/attention.h"

namespace {

namespace kc = gg::kernels::cpu;

// |got - want| in units of the last place of want rounded to T (the smallest subnormal below
// the normal range).
template <typename T>
double ulps(T got, long double want) {
  const T w = static_cast<T>(want);
  const T up = std::nextafter(std::fabs(w), std::numeric_limits<T>::infinity());
  const long double ulp = std::max<long double>(up - std::fabs(w), std::numeric_limits<T>::denorm_min());
  return static_cast<double>(std::fabs(static_cast<long double>(got) - want) / ulp);
}

template <typename T>
void check_range(T lo, T hi, T step, double max_ulps) {
  std::vector<T> x;
  for (T v = lo; v < hi; v += step) x.push_back(v);
  std::vector<T> y = x;
  kc::attention_row_exp(y.data(), static_cast<int64_t>(y.size()), T(0));
  double worst = 0;
  T worst_at = 0;
  for (size_t i = 0; i < x.size(); ++i) {
    const double e = ulps(y[i], std::exp(static_cast<long double>(x[i])));
    if (e > worst) {
      worst = e;
      worst_at = x[i];
    }
  }
  EXPECT_LE(worst, max_ulps) << "at x = " << worst_at << " (" << x.size() << " points in [" << lo << ", " << hi << "))";
}

TEST(AttentionRowExp, F32WithinItsBound) {
  const double bound = kc::attention_exp_tile_ps() ? 1.0 : 2.0;
  check_range<float>(-110.0f, 90.0f, 0.00071f, bound);  // subnormal results from about -87.3
  check_range<float>(-1.0f, 0.0f, 1.0f / 65536, bound);  // near 0, where attention's P lives
}

TEST(AttentionRowExp, F64WithinTwoUlps) {
  check_range<double>(-750.0, 710.0, 0.00731, 2.0);
  check_range<double>(-1.0, 0.0, 1.0 / 65536, 2.0);
}

template <typename T>
void check_edges() {
  const T inf = std::numeric_limits<T>::infinity();
  std::vector<T> x = {-inf, inf, std::numeric_limits<T>::quiet_NaN(), T(-1e4), T(1e4), T(0), T(-0.0)};
  std::vector<T> y = x;
  kc::attention_row_exp(y.data(), static_cast<int64_t>(y.size()), T(0));
  EXPECT_EQ(y[0], T(0));
  EXPECT_FALSE(std::signbit(y[0]));
  EXPECT_EQ(y[1], inf);
  EXPECT_TRUE(std::isnan(y[2]));
  EXPECT_EQ(y[3], T(0));
  EXPECT_EQ(y[4], inf);
  EXPECT_EQ(y[5], T(1));
  EXPECT_EQ(y[6], T(1));
  // the shift is subtracted first: a masked -inf score under any finite shift gives 0
  std::vector<T> masked = {-inf, T(2)};
  kc::attention_row_exp(masked.data(), 2, T(2));
  EXPECT_EQ(masked[0], T(0));
  EXPECT_EQ(masked[1], T(1));
}

TEST(AttentionRowExp, EdgesF32) { check_edges<float>(); }
TEST(AttentionRowExp, EdgesF64) { check_edges<double>(); }

// Every prefix length and offset gives each entry the value it has in a long row.
template <typename T>
void check_tails() {
  std::vector<T> base(67);
  for (size_t i = 0; i < base.size(); ++i) base[i] = T(-0.37) * static_cast<T>(i) + T(0.11);
  std::vector<T> whole = base;
  kc::attention_row_exp(whole.data(), static_cast<int64_t>(whole.size()), T(0.25));
  for (int64_t start = 0; start < 20; ++start)
    for (int64_t n = 1; start + n <= static_cast<int64_t>(base.size()); n += 3) {
      std::vector<T> part(base.begin() + start, base.begin() + start + n);
      kc::attention_row_exp(part.data(), n, T(0.25));
      for (int64_t j = 0; j < n; ++j)
        ASSERT_EQ(part[j], whole[start + j]) << "start " << start << " length " << n << " entry " << j;
    }
}

TEST(AttentionRowExp, TailsMatchWholeRowsF32) { check_tails<float>(); }
TEST(AttentionRowExp, TailsMatchWholeRowsF64) { check_tails<double>(); }

}  // namespace
