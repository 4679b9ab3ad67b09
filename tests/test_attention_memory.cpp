// Memory of the fused attention at N = 4096, d = 64: every heap allocation in this process is
// counted (operator new is replaced below, which also sees the kernels' per-thread scratch),
// and so is tensor storage (gg::cpu::memory_stats). Forward, backward and BoB each stay within
// a small multiple of N·d elements; the composite path needs N×N.
#include <atomic>
#include <cstdlib>
#include <new>

#include "test_util.h"

namespace {
std::atomic<int64_t> g_heap_current{0}, g_heap_peak{0};
constexpr size_t kHeader = 16;  // keeps 16-byte alignment, stores the size

void* counted_alloc(size_t n) {
  void* raw = std::malloc(n + kHeader);
  if (!raw) throw std::bad_alloc();
  *static_cast<size_t*>(raw) = n;
  int64_t now = g_heap_current += static_cast<int64_t>(n);
  int64_t peak = g_heap_peak.load();
  while (now > peak && !g_heap_peak.compare_exchange_weak(peak, now)) {
  }
  return static_cast<char*>(raw) + kHeader;
}
void counted_free(void* p) noexcept {
  if (!p) return;
  void* raw = static_cast<char*>(p) - kHeader;
  g_heap_current -= static_cast<int64_t>(*static_cast<size_t*>(raw));
  std::free(raw);
}
}  // namespace

void* operator new(size_t n) { return counted_alloc(n); }
void* operator new[](size_t n) { return counted_alloc(n); }
void operator delete(void* p) noexcept { counted_free(p); }
void operator delete[](void* p) noexcept { counted_free(p); }
void operator delete(void* p, size_t) noexcept { counted_free(p); }
void operator delete[](void* p, size_t) noexcept { counted_free(p); }

namespace gg::test {
namespace {

// Peak bytes (heap + tensor storage) allocated by `f` above what was live when it started.
template <typename F>
int64_t peak_bytes_of(F&& f) {
  const int64_t heap0 = g_heap_current.load(), tensor0 = cpu::memory_stats().current_bytes;
  g_heap_peak = heap0;
  cpu::reset_peak_memory_stats();
  f();
  return (g_heap_peak.load() - heap0) + (cpu::memory_stats().peak_bytes - tensor0);
}

TEST(AttentionMemory, FusedLevelsAreLinearInN) {
  const int64_t N = 4096, d = 64;
  const Shape s = {1, 1, N, d};
  const int64_t nd = N * d * 4;        // one (N, d) f32 tensor
  const int64_t nn = N * N * 4;        // one N×N f32 matrix: 64 MiB
  manual_seed(1);
  Tensor q = randn(s), k = randn(s), v = randn(s), dO = randn(s), qt = randn(s), kt = randn(s), vt = randn(s);
  NoGradGuard ng;  // the primitives alone, no tape
  AttentionForward f;
  int64_t fwd = peak_bytes_of([&] { f = attention_forward(q, k, v, {std::nullopt, true}); });
  TensorList g;
  int64_t bwd = peak_bytes_of([&] { g = attention_backward(q, k, v, f.O, f.L, dO, {std::nullopt, true}); });
  TensorList gg;
  int64_t bob = peak_bytes_of([&] { gg = attention_backward_backward(q, k, v, f.O, f.L, dO, qt, kt, vt, {std::nullopt, true}); });
  RecordProperty("forward_bytes", std::to_string(fwd));
  RecordProperty("backward_bytes", std::to_string(bwd));
  RecordProperty("bob_bytes", std::to_string(bob));
  // Outputs: forward 1 (N,d) + L; backward 3; BoB 4. Allow scratch up to a few more (N,d).
  EXPECT_LE(fwd, 4 * nd) << "forward";
  EXPECT_LE(bwd, 8 * nd) << "backward";
  EXPECT_LE(bob, 12 * nd) << "BoB";
  EXPECT_LT(bob, nn / 4) << "BoB must be far below one N×N matrix";
  std::cout << "peak bytes at N=4096, d=64 (f32): forward " << fwd << ", backward " << bwd << ", BoB " << bob
            << "; one N×N matrix is " << nn << "\n";
}

// Grouped-query heads: 8 query heads share one key/value head. The gradients of K and V are
// summed over the group inside the kernels, so no level holds an (B, Hq, N, d) copy of K or V
// (each such copy would be 8 (N, d) tensors). A causal window of 128 keys keeps the work small.
TEST(AttentionMemory, GroupedHeadsAllocateNoExpandedKeys) {
  const int64_t N = 4096, d = 64, Hq = 8;
  const Shape qs = {1, Hq, N, d}, ks = {1, 1, N, d};
  const int64_t nd = N * d * 4;  // one (N, d) f32 tensor
  manual_seed(3);
  Tensor q = randn(qs), k = randn(ks), v = randn(ks), dO = randn(qs), qt = randn(qs), kt = randn(ks), vt = randn(ks);
  const AttentionOptions o{std::nullopt, true, 128, std::nullopt};
  NoGradGuard ng;
  AttentionForward f;
  int64_t fwd = peak_bytes_of([&] { f = attention_forward(q, k, v, o); });
  TensorList g;
  int64_t bwd = peak_bytes_of([&] { g = attention_backward(q, k, v, f.O, f.L, dO, o); });
  TensorList gg;
  int64_t bob = peak_bytes_of([&] { gg = attention_backward_backward(q, k, v, f.O, f.L, dO, qt, kt, vt, o); });
  // Outputs: forward Hq (N,d) + L; backward Hq + 2; BoB 2·Hq + 2. Scratch: a few more (N,d).
  EXPECT_LE(fwd, (Hq + 2) * nd) << "forward";
  EXPECT_LE(bwd, (Hq + 2 + 3) * nd) << "backward";
  EXPECT_LE(bob, (2 * Hq + 2 + 4) * nd) << "BoB";
  std::cout << "peak bytes at Hq=8, Hkv=1, N=4096, d=64 (f32): forward " << fwd << ", backward " << bwd << ", BoB "
            << bob << "; one (N, d) tensor is " << nd << "\n";
}

// Forward mode through the op: a JVP of gg::attention (tangents of q, k and v, nothing recorded)
// runs the fused kernel, so it too stays linear in N.
TEST(AttentionMemory, ForwardModeIsLinearInN) {
  const int64_t N = 4096, d = 64;
  const Shape s = {1, 1, N, d};
  const int64_t nd = N * d * 4, nn = N * N * 4;
  manual_seed(4);
  Tensor q = randn(s), k = randn(s), v = randn(s), qt = randn(s), kt = randn(s), vt = randn(s);
  Tensor Od;
  const int64_t jvp = peak_bytes_of([&] {
    fwd::DualLevel level;
    const Tensor O = attention(fwd::make_dual(q, qt), fwd::make_dual(k, kt), fwd::make_dual(v, vt),
                               {std::nullopt, true});
    Od = fwd::unpack_dual(O).tangent;
  });
  ASSERT_TRUE(Od.defined());
  // Outputs O, L, Ȯ, L̇ plus the kernel's scratch O and L: a few (N, d) tensors.
  EXPECT_LE(jvp, 8 * nd) << "forward mode";
  EXPECT_LT(jvp, nn / 4) << "forward mode must be far below one N×N matrix";
  std::cout << "forward-mode peak bytes at N=4096, d=64 (f32): " << jvp << "\n";
}

// A Hessian-vector product through attention by forward over reverse (func::hvp: the inputs carry
// the tangents and require grad): the forward's tangent runs the fused kernel with its reverse
// rule recorded, the backward's tangent the fused BoB, so it too stays linear in N.
TEST(AttentionMemory, HessianVectorProductIsLinearInN) {
  const int64_t N = 4096, d = 64;
  const Shape s = {1, 1, N, d};
  const int64_t nd = N * d * 4, nn = N * N * 4;
  manual_seed(5);
  const TensorList xs = {randn(s), randn(s), randn(s)}, vs = {randn(s), randn(s), randn(s)};
  const func::ListScalarFn f = [](const TensorList& x) { return sum(sin(attention(x[0], x[1], x[2]))); };
  TensorList hv;
  const int64_t peak = peak_bytes_of([&] { hv = func::hvp(f, xs, vs); });
  ASSERT_EQ(hv.size(), 3u);
  EXPECT_LE(peak, 40 * nd) << "forward over reverse";
  EXPECT_LT(peak, nn / 2) << "forward over reverse must stay below one N×N matrix";
  std::cout << "func::hvp peak bytes at N=4096, d=64 (f32): " << peak << "; one (N, d) tensor is " << nd << "\n";
}

TEST(AttentionMemory, CompositeNeedsNSquared) {
  const int64_t N = 4096, d = 64;
  const Shape s = {1, 1, N, d};
  manual_seed(2);
  Tensor q = randn(s), k = randn(s), v = randn(s);
  NoGradGuard ng;
  int64_t composite = peak_bytes_of([&] { attention_composite(q, k, v, {std::nullopt, true}); });
  std::cout << "composite forward peak bytes at N=4096: " << composite << "\n";
  EXPECT_GE(composite, N * N * 4);
}

}  // namespace
}  // namespace gg::test
