// Tensors: factories, views, printing, dtype/device bookkeeping and error messages.
#include <cmath>
#include <iomanip>
#include <limits>
#include <sstream>
#include <string>

#include "test_util.h"

namespace gg::test {
namespace {

TEST(Tensor, FactoriesAndItem) {
  Tensor z = zeros({2, 3});
  EXPECT_EQ(z.shape(), (Shape{2, 3}));
  EXPECT_EQ(z.dtype(), DType::f32);
  EXPECT_TRUE(z.device().is_cpu());
  for (double v : z.to_vector<double>()) EXPECT_EQ(v, 0.0);
  EXPECT_EQ(full({}, 2.5, DType::f64).item(), 2.5);
  EXPECT_EQ(ones({4}).to_vector<float>(), (std::vector<float>{1, 1, 1, 1}));
  EXPECT_EQ(arange(0, 5).to_vector<double>(), (Values{0, 1, 2, 3, 4}));
  EXPECT_EQ(arange(1, 2, 0.25, DType::f64).to_vector<double>(), (Values{1, 1.25, 1.5, 1.75}));
  Tensor f = from_vector({1, 2, 3, 4, 5, 6}, {2, 3}, DType::f64);
  EXPECT_EQ(f.to_vector<double>(), (Values{1, 2, 3, 4, 5, 6}));
  EXPECT_THROW(from_vector({1, 2, 3}, {2, 2}), ShapeError);
  EXPECT_THROW(f.item(), ValueError);
}

TEST(Tensor, RandomIsSeededAndPlausible) {
  manual_seed(7);
  Values a = randn({1000}, DType::f64).to_vector<double>();
  manual_seed(7);
  Values b = randn({1000}, DType::f64).to_vector<double>();
  EXPECT_EQ(a, b);
  Values c = randn({1000}, DType::f64).to_vector<double>();
  EXPECT_NE(a, c);  // the stream advances
  double mean = 0, var = 0;
  for (double v : a) mean += v / 1000;
  for (double v : a) var += (v - mean) * (v - mean) / 1000;
  EXPECT_NEAR(mean, 0.0, 0.15);
  EXPECT_NEAR(var, 1.0, 0.15);
  for (double u : rand({1000}, DType::f64).to_vector<double>()) {
    EXPECT_GE(u, 0.0);
    EXPECT_LT(u, 1.0);
  }
}

TEST(Tensor, ViewsShareStorage) {
  Tensor x = from_vector({0, 1, 2, 3, 4, 5}, {2, 3}, DType::f64);
  Tensor t = transpose(x, 0, 1);
  EXPECT_EQ(t.shape(), (Shape{3, 2}));
  EXPECT_FALSE(t.is_contiguous());
  EXPECT_EQ(t.to_vector<double>(), (Values{0, 3, 1, 4, 2, 5}));
  Tensor s = slice(x, 1, 1, 3);
  EXPECT_EQ(s.to_vector<double>(), (Values{1, 2, 4, 5}));
  Tensor r = reshape(x, {3, 2});
  EXPECT_EQ(r.impl().storage, x.impl().storage);  // contiguous reshape is a view
  fill_(s, 9.0);
  EXPECT_EQ(x.to_vector<double>(), (Values{0, 9, 9, 3, 9, 9}));
  EXPECT_EQ(x.version(), 1u);
  Tensor rt = reshape(t, {6});  // non-contiguous: copies
  EXPECT_NE(rt.impl().storage, x.impl().storage);
  EXPECT_EQ(rt.to_vector<double>(), (Values{0, 3, 9, 9, 9, 9}));
}

TEST(Tensor, CastsBetweenDtypes) {
  Tensor x = from_vector({1.5, -2.25, 3.0}, {3}, DType::f64);
  EXPECT_EQ(to(x, DType::f32).to_vector<float>(), (std::vector<float>{1.5f, -2.25f, 3.0f}));
  EXPECT_EQ(to(x, DType::i64).to_vector<int64_t>(), (std::vector<int64_t>{1, -2, 3}));
  EXPECT_EQ(to(x, DType::bf16).to_vector<double>(), (Values{1.5, -2.25, 3.0}));  // exact in bf16
  EXPECT_EQ(to(x, DType::f16).to_vector<double>(), (Values{1.5, -2.25, 3.0}));
  EXPECT_EQ(to(from_vector({1.0 / 3}, {1}, DType::f64), DType::bf16).item(), 0.333984375);  // nearest bf16
  EXPECT_EQ(gt(x, zeros({}, DType::f64)).to_vector<uint8_t>(), (std::vector<uint8_t>{1, 0, 1}));
  EXPECT_EQ(x.to(DType::f32).dtype(), DType::f32);
  EXPECT_TRUE(x.cpu().is_same(x));  // already there: the same tensor
}

// Binary kernels walk merged runs with separate loops for contiguous, scalar-broadcast and
// strided operands: check each against a plain loop, for arithmetic and comparisons.
TEST(Tensor, BinaryOpsOnBroadcastAndStridedOperands) {
  const Values av = {1, -2, 3, 4, -5, 6}, bv = {3, 2, -1};
  Tensor a = from_vector(av, {2, 3}, DType::f64), b = from_vector(bv, {3}, DType::f64);
  Tensor at = transpose(from_vector(av, {3, 2}, DType::f64), 0, 1);  // (2, 3), strided
  Tensor s = from_vector({2.0}, {1, 1}, DType::f64);                  // broadcast scalar
  for (int i = 0; i < 6; ++i) {
    const size_t k = static_cast<size_t>(i), j = k % 3, t = (k % 3) * 2 + k / 3;
    EXPECT_EQ((a - b).to_vector<double>()[k], av[k] - bv[j]);
    EXPECT_EQ((b / a).to_vector<double>()[k], bv[j] / av[k]);
    EXPECT_EQ((s - a).to_vector<double>()[k], 2.0 - av[k]);
    EXPECT_EQ((at * a).to_vector<double>()[k], av[t] * av[k]);
    EXPECT_EQ(maximum(at, s).to_vector<double>()[k], std::max(av[t], 2.0));
    EXPECT_EQ(lt(s, a).to_vector<uint8_t>()[k], 2.0 < av[k]);
    EXPECT_EQ(ge(at, b).to_vector<uint8_t>()[k], av[t] >= bv[j]);
  }
  Tensor nan = from_vector({std::nan(""), 1.0}, {2}, DType::f64);
  EXPECT_TRUE(std::isnan(maximum(nan, from_vector({0.0, 0.0}, {2}, DType::f64)).to_vector<double>()[0]));
  Tensor i = from_vector({1, 2, 3}, {3}, DType::i64);
  EXPECT_EQ((i + i).to_vector<int64_t>(), (std::vector<int64_t>{2, 4, 6}));
}

TEST(Tensor, PrintsShapeDtypeDeviceAndValues) {
  std::ostringstream os;
  os << from_vector({1, 2, 3, 4}, {2, 2}, DType::f64).requires_grad_(true);
  const std::string s = os.str();
  EXPECT_NE(s.find("shape=[2, 2]"), std::string::npos) << s;
  EXPECT_NE(s.find("dtype=f64"), std::string::npos) << s;
  EXPECT_NE(s.find("device=cpu"), std::string::npos) << s;
  EXPECT_NE(s.find("requires_grad"), std::string::npos) << s;
  EXPECT_NE(s.find("[[1, 2],\n [3, 4]]"), std::string::npos) << s;
}

// The printed text less its final newline, which every print ends with.
std::string printed(const Tensor& t) {
  std::ostringstream os;
  os << t;
  std::string s = os.str();
  EXPECT_FALSE(s.empty() || s.back() != '\n') << "the print does not end in a newline: " << s;
  if (!s.empty() && s.back() == '\n') s.pop_back();
  return s;
}

// "[a, b, c, ..., x, y, z]" of the six shown entries of one summarised row.
std::string summary_row(const std::vector<std::string>& six) {
  return "[" + six[0] + ", " + six[1] + ", " + six[2] + ", ..., " + six[3] + ", " + six[4] + ", " + six[5] + "]";
}

// As PyTorch: up to 1000 elements everything is printed; beyond, each dimension longer than 6
// shows its first and last 3 entries around "...". No newline at the end.
TEST(Tensor, PrintSummarisesAboveAThousandElements) {
  std::string all = "[0";
  for (int i = 1; i < 1000; ++i) all += ", " + std::to_string(i);
  EXPECT_EQ(printed(arange(0, 1000, 1, DType::f64)), "tensor(shape=[1000], dtype=f64, device=cpu)\n" + all + "]");
  EXPECT_EQ(printed(arange(0, 1001, 1, DType::f64)),
            "tensor(shape=[1001], dtype=f64, device=cpu)\n" + summary_row({"0", "1", "2", "998", "999", "1000"}));

  std::string want = "tensor(shape=[40, 50], dtype=f64, device=cpu)\n[";
  for (int r : {0, 1, 2, -1, 37, 38, 39}) {
    if (r != 0) want += ",\n ";
    if (r < 0) {
      want += "...";
      continue;
    }
    std::vector<std::string> six;
    for (int c : {0, 1, 2, 47, 48, 49}) six.push_back(std::to_string(50 * r + c));
    want += summary_row(six);
  }
  want += "]";
  EXPECT_EQ(printed(reshape(arange(0, 2000, 1, DType::f64), {40, 50})), want);
  // Dimensions of 6 or fewer are kept whole.
  const std::string head =
      "tensor(shape=[200, 6], dtype=f64, device=cpu)\n[[0, 1, 2, 3, 4, 5],\n [6, 7, 8, 9, 10, 11],\n";
  EXPECT_EQ(printed(reshape(arange(0, 1200, 1, DType::f64), {200, 6})).substr(0, head.size()), head);
}

TEST(Tensor, PrintSummaryReadsStridedViewsAtTheirOffset) {
  // v[i, j, k] = x[k, j + 1, i] = 132 k + 12 (j + 1) + i: permuted, with an offset, not contiguous.
  const Tensor x = reshape(arange(0, 1320, 1, DType::f64), {10, 11, 12});
  const Tensor v = transpose(slice(x, 1, 1, 11), 0, 2);  // (12, 10, 10)
  const std::string s = printed(v);
  const std::string head = "tensor(shape=[12, 10, 10], dtype=f64, device=cpu)\n[[" +
                           summary_row({"12", "144", "276", "936", "1068", "1200"}) + ",\n  [";
  EXPECT_EQ(s.substr(0, head.size()), head) << s;
  EXPECT_EQ(s.substr(s.size() - 7), "1319]]]") << s;
  EXPECT_EQ(s, printed(contiguous(v)));
}

// A 2^20 x 2^20 broadcast view (2^40 elements, 8 bytes of storage) prints at once: only the
// shown corners are read, never the whole tensor.
TEST(Tensor, PrintOfAHugeBroadcastViewReadsOnlyTheCorners) {
  const int64_t n = int64_t(1) << 20;
  const Tensor big = expand(full({1, 1}, 7.0), {n, n});
  std::string want = "tensor(shape=[1048576, 1048576], dtype=f32, device=cpu)\n[";
  for (int r = 0; r < 7; ++r) {
    if (r) want += ",\n ";
    want += r == 3 ? "..." : summary_row({"7", "7", "7", "7", "7", "7"});
  }
  EXPECT_EQ(printed(big), want + "]");
}

TEST(Tensor, PrintsNanInfAndExactIntegers) {
  const double nan = std::nan(""), inf = std::numeric_limits<double>::infinity();
  for (const DType dt : {DType::f64, DType::f32, DType::bf16, DType::f16}) {
    const std::string s = printed(from_vector({std::copysign(nan, -1.0), nan, inf, -inf, 1.5}, {5}, dt));
    EXPECT_EQ(s.substr(s.find('\n') + 1), "[nan, nan, inf, -inf, 1.5]") << dtype_name(dt);
  }
  const std::string s = printed(from_indices({7, -3, (int64_t(1) << 60) + 1}, {3}));
  EXPECT_EQ(s.substr(s.find('\n') + 1), "[7, -3, 1152921504606846977]");
  std::ostringstream os;
  os << std::fixed << std::setprecision(2) << scalar_tensor(0.126, DType::f64) << " " << 0.126;
  EXPECT_EQ(os.str(), "tensor(shape=[], dtype=f64, device=cpu)\n0.126\n 0.13");  // the stream's own format kept
}

// Bad input: typed exceptions whose message names the op and both offending shapes/dtypes.
template <typename E, typename F>
std::string message_of(F&& f) {
  try {
    f();
  } catch (const E& e) {
    return e.what();
  } catch (const std::exception& e) {
    return std::string("wrong exception type: ") + e.what();
  }
  return "no exception";
}

TEST(Tensor, ErrorsNameOpAndValues) {
  Tensor a = zeros({2, 3}), b = zeros({4, 5}), c = zeros({2, 3}, DType::f64);
  std::string m = message_of<ShapeError>([&] { matmul(a, b); });
  EXPECT_NE(m.find("gg::matmul"), std::string::npos) << m;
  EXPECT_NE(m.find("[2, 3]"), std::string::npos) << m;
  EXPECT_NE(m.find("[4, 5]"), std::string::npos) << m;
  m = message_of<ShapeError>([&] { add(a, b); });
  EXPECT_NE(m.find("gg::add"), std::string::npos) << m;
  EXPECT_NE(m.find("[2, 3]"), std::string::npos) << m;
  EXPECT_NE(m.find("[4, 5]"), std::string::npos) << m;
  m = message_of<DTypeError>([&] { matmul(a, transpose(c, 0, 1)); });  // matmul does not promote (as PyTorch)
  EXPECT_NE(m.find("gg::matmul"), std::string::npos) << m;
  EXPECT_NE(m.find("f32"), std::string::npos) << m;
  EXPECT_NE(m.find("f64"), std::string::npos) << m;
  m = message_of<ShapeError>([&] { reshape(a, {4, 2}); });
  EXPECT_NE(m.find("[4, 2]"), std::string::npos) << m;
  m = message_of<IndexError>([&] { sum(a, {3}); });
  EXPECT_NE(m.find("dim 3"), std::string::npos) << m;
  m = message_of<IndexError>([&] { index_select(a, 1, from_indices({0, 7}, {2})); });
  EXPECT_NE(m.find("index 7"), std::string::npos) << m;
  m = message_of<IndexError>([&] { cross_entropy(a, from_indices({0, 3}, {2})); });
  EXPECT_NE(m.find("target 3"), std::string::npos) << m;
  m = message_of<ShapeError>([&] { cat({a, b}, 0); });
  EXPECT_NE(m.find("[4, 5]"), std::string::npos) << m;
  m = message_of<DTypeError>([&] { exp(from_indices({1}, {1})); });
  EXPECT_NE(m.find("i64"), std::string::npos) << m;
  m = message_of<DeviceError>([&] { to(a, Device::cuda(0)); });
  EXPECT_NE(m.find("cuda:0"), std::string::npos) << m;
  m = message_of<ValueError>([&] { Tensor u; u.shape(); });
  EXPECT_NE(m.find("undefined"), std::string::npos) << m;
  m = message_of<ShapeError>([&] { attention_composite(zeros({1, 2, 3, 4}), zeros({1, 2, 3, 5}), zeros({1, 2, 3, 4})); });
  EXPECT_NE(m.find("[1, 2, 3, 5]"), std::string::npos) << m;
}

// from_blob wraps memory the library does not own: no copy, no allocation, views and strides as
// given, writes visible to the owner, release run once when the last view goes, autograd as usual.
TEST(Tensor, FromBlobWrapsExternalMemory) {
  std::vector<double> buf = {0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11};
  int released = 0;
  const MemoryStats before = cpu::memory_stats();
  {
    Tensor x = from_blob(buf.data(), {3, 4}, {}, DType::f64, Device::cpu(), [&](void* p) {
      EXPECT_EQ(p, buf.data());
      ++released;
    });
    EXPECT_EQ(x.raw_data(), buf.data());
    EXPECT_EQ(x.strides(), (Shape{4, 1}));
    EXPECT_EQ(cpu::memory_stats().allocations, before.allocations);
    EXPECT_EQ(cpu::memory_stats().current_bytes, before.current_bytes);
    // A strided block: rows 0-1, columns 1-3 of the 3x4 buffer, then its transpose.
    Tensor block = from_blob(buf.data() + 1, {2, 3}, {4, 1}, DType::f64);
    EXPECT_FALSE(block.is_contiguous());
    EXPECT_EQ(block.to_vector<double>(), (Values{1, 2, 3, 5, 6, 7}));
    EXPECT_EQ(transpose(block, 0, 1).to_vector<double>(), (Values{1, 5, 2, 6, 3, 7}));
    EXPECT_EQ(contiguous(block).to_vector<double>(), (Values{1, 2, 3, 5, 6, 7}));
    Tensor row = slice(x, 0, 2, 3);
    x = Tensor();  // the view keeps the storage
    EXPECT_EQ(released, 0);
    {
      NoGradGuard ng;
      fill_(block, -1.0);
    }
    EXPECT_EQ(buf[1], -1.0);
    EXPECT_EQ(buf[7], -1.0);
    EXPECT_EQ(block.version(), 1u);
    EXPECT_EQ(row.to_vector<double>(), (Values{8, 9, 10, 11}));
  }
  EXPECT_EQ(released, 1);

  // Autograd and the version counter on an external leaf.
  Tensor w = from_blob(buf.data(), {2, 2}, {}, DType::f64).requires_grad_();
  Tensor y = sum(w * w);
  EXPECT_EQ(grad(y, w).to_vector<double>(), (Values{2 * buf[0], 2 * buf[1], 2 * buf[2], 2 * buf[3]}));
  Tensor z = sum(w * w);
  {
    NoGradGuard ng;
    fill_(w, 1.0);  // the saved w is stale
  }
  EXPECT_THROW(grad(z, w), AutogradError);

  EXPECT_THROW(from_blob(buf.data(), {2, 3}, {3}, DType::f64), ShapeError);
  EXPECT_THROW(from_blob(buf.data(), {2, 3}, {-3, 1}, DType::f64), ValueError);
  EXPECT_THROW(from_blob(nullptr, {2}, {}, DType::f64), ValueError);
  EXPECT_EQ(from_blob(nullptr, {0, 3}, {}, DType::f64).numel(), 0);
}

#ifndef GG_HAS_CUDA
// Without the CUDA backend there is no stream to switch to (tests/gpu covers the guard itself).
TEST(Tensor, CudaStreamGuardNeedsTheCudaBackend) {
  EXPECT_THROW(cuda::StreamGuard(Device::cuda(0), nullptr), DeviceError);
}
#endif

TEST(Tensor, CpuMemoryStatsCountAllocations) {
  MemoryStats before = cpu::memory_stats();
  {
    Tensor big = zeros({1024, 1024}, DType::f64);
    EXPECT_EQ(cpu::memory_stats().current_bytes - before.current_bytes, 8 * 1024 * 1024);
    EXPECT_GE(cpu::memory_stats().peak_bytes, before.current_bytes + 8 * 1024 * 1024);
  }
  EXPECT_EQ(cpu::memory_stats().current_bytes, before.current_bytes);
}

// Freed blocks go to a cache and come back for the next tensor of a similar size; the stats
// still count live tensor bytes only, and reused blocks hold whatever the new tensor writes.
TEST(Tensor, CpuBlockCacheReusesBlocksAndKeepsStatsExact) {
  cpu::empty_cache();
  const MemoryStats before = cpu::memory_stats();
  const void* first;
  {
    Tensor a = full({25, 40, 40}, 1.5);  // 160000 bytes: a size glibc would trim and fault back in
    first = a.raw_data();
    EXPECT_EQ(cpu::memory_stats().current_bytes - before.current_bytes, 160000);
  }
  EXPECT_EQ(cpu::memory_stats().current_bytes, before.current_bytes);
  {
    Tensor b = full({25, 40, 39}, 2.0);  // same size class: the cached block
    EXPECT_EQ(b.raw_data(), first);
    EXPECT_EQ(cpu::memory_stats().current_bytes - before.current_bytes, 156000);
    for (float v : b.to_vector<float>()) ASSERT_EQ(v, 2.0f);
    Tensor c = zeros({7});  // a small one while b is alive: another block
    EXPECT_NE(c.raw_data(), b.raw_data());
    EXPECT_EQ(reinterpret_cast<uintptr_t>(c.raw_data()) % 64, 0u);
  }
  EXPECT_EQ(cpu::memory_stats().current_bytes, before.current_bytes);
  EXPECT_EQ(cpu::memory_stats().allocations - before.allocations, 3);
  cpu::empty_cache();
  EXPECT_EQ(cpu::memory_stats().current_bytes, before.current_bytes);
}

}  // namespace
}  // namespace gg::test
