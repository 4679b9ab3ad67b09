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
