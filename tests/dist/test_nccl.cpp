// NcclGroup on one GPU (world size 1, or the rank this process was given by scripts/launch.sh):
// the collectives' identities at world size 1, and the sequence-parallel attention against the
// single-GPU op. Skipped without a GPU unless GG_REQUIRE_GPU=1.
#include <gtest/gtest.h>

#include <cstdlib>

#include "gpu/gpu_util.h"
#include "sequence_parallel.h"
#include "gradgrad.h"

namespace gg {
namespace {

#ifdef GG_HAS_NCCL
std::shared_ptr<dist::NcclGroup> world_of_one() {
  dist::LaunchOptions o;
  o.rank = 0;
  o.world_size = 1;
  o.local_rank = 0;
  return dist::NcclGroup::create(o);
}

std::vector<double> host(const Tensor& t) { return t.to_vector<double>(); }

TEST(NcclGroup, WorldOfOneCollectivesAreIdentities) {
  GG_REQUIRE_GPU_OR_SKIP();
  auto g = world_of_one();
  EXPECT_EQ(g->rank(), 0);
  EXPECT_EQ(g->size(), 1);
  manual_seed(3);
  const Tensor x = randn({3, 5}, DType::f32).cuda();
  EXPECT_EQ(host(g->all_reduce(x)), host(x));
  EXPECT_EQ(host(g->all_gather(x, 1)), host(x));
  EXPECT_EQ(host(g->reduce_scatter(x, 0)), host(x));
  EXPECT_EQ(host(g->broadcast(x, 0)), host(x));
  const Tensor i = from_indices({1, 2, 3}, {3}, Device::cuda(0));
  EXPECT_EQ(g->all_reduce(i).to_vector<int64_t>(), (std::vector<int64_t>{1, 2, 3}));
  g->barrier();
  // Differentiable: the backward of all_gather is reduce_scatter, here the identity again.
  Tensor leaf = x.detach().requires_grad_();
  const Tensor y = dist::all_gather(*g, leaf, 0);
  EXPECT_EQ(host(grad(sum(y * y), leaf)), host(x * 2.0));
  EXPECT_THROW(g->all_reduce(x.cpu()), DeviceError);
  EXPECT_THROW(g->all_reduce(eq(x, x)), DTypeError);  // b8
}

TEST(NcclGroup, SequenceParallelAttentionOfOneRankIsTheFusedOp) {
  GG_REQUIRE_GPU_OR_SKIP();
  auto g = world_of_one();
  manual_seed(4);
  const Shape s = {1, 2, 64, 32};
  const Tensor q = randn(s).cuda().requires_grad_(), k = randn(s).cuda().requires_grad_(),
               v = randn(s).cuda().requires_grad_();
  AttentionOptions causal;
  causal.causal = true;
  const Tensor dO = randn(s).cuda();
  const TensorList want = grad({attention(q, k, v, causal)}, {q, k, v}, {dO});
  for (dist::Schedule s : {dist::Schedule::all_gather, dist::Schedule::ring}) {
    const TensorList got =
        grad({dist::attention(*g, q, k, v, causal, dist::Sharding::contiguous, s)}, {q, k, v}, {dO});
    for (size_t i = 0; i < 3; ++i) EXPECT_EQ(host(got[i]), host(want[i])) << "input " << i;
  }
}

// grad_all_reduce at world size 1: the sums start on the group's own stream while the backward
// goes on (buckets of 64 KiB over a chain of 256 x 256 layers), and equal the gradients exactly.
TEST(NcclGroup, GradAllReduceOfOneRankIsTheGradient) {
  GG_REQUIRE_GPU_OR_SKIP();
  auto g = world_of_one();
  manual_seed(8);
  TensorList w;
  for (int i = 0; i < 6; ++i) w.push_back((randn({256, 256}) * 0.06).cuda().requires_grad_());
  const Tensor x = randn({512, 256}).cuda();
  auto loss = [&] {
    Tensor h = x;
    for (const Tensor& wi : w) h = tanh(matmul(h, wi));
    return sum(h * h);
  };
  const TensorList want = grad({loss()}, w);
  for (bool average : {true, false}) {
    const TensorList got = dist::grad_all_reduce(*g, {loss()}, w, {}, {}, average, 64 << 10);
    for (size_t i = 0; i < w.size(); ++i) EXPECT_EQ(host(got[i]), host(want[i])) << "layer " << i;
  }
}

// Under scripts/launch.sh (WORLD_SIZE set), every rank checks an all_reduce of its rank number.
TEST(NcclGroup, LaunchedRanksSumTheirRanks) {
  GG_REQUIRE_GPU_OR_SKIP();
  const char* world = std::getenv("WORLD_SIZE");
  if (!world) GTEST_SKIP() << "not started by scripts/launch.sh";
  if (cuda::device_count() < std::atoi(world)) GTEST_SKIP() << "fewer GPUs than ranks";
  auto g = dist::NcclGroup::create();
  const Tensor r = full({4}, g->rank(), DType::f64, g->device());
  const double n = g->size();
  EXPECT_EQ(host(g->all_reduce(r)), std::vector<double>(4, n * (n - 1) / 2));
  EXPECT_EQ(g->all_gather(r, 0).size(0), 4 * g->size());
  // the overlapped gradient sum: rank r's gradient is r + 1 everywhere
  const Tensor x = ones({4}, DType::f32, g->device()).requires_grad_();
  const TensorList s = dist::grad_all_reduce(*g, {sum(x * (g->rank() + 1.0))}, {x}, {}, {}, false);
  EXPECT_EQ(host(s[0]), std::vector<double>(4, n * (n + 1) / 2));
  // a started ring shift, with work on the library's stream issued while it runs
  if (g->size() > 1) {
    const int next = (g->rank() + 1) % g->size(), prev = (g->rank() + g->size() - 1) % g->size();
    const auto shift = g->start_sendrecv(r * 2.0, next, prev);
    const Tensor busy = matmul(ones({256, 256}, DType::f32, g->device()), ones({256, 256}, DType::f32, g->device()));
    EXPECT_EQ(host(shift->wait()), std::vector<double>(4, 2.0 * prev));
    EXPECT_EQ(host(sum(busy)), std::vector<double>{256.0 * 256 * 256});
  }
}
#else
TEST(NcclGroup, BuiltWithoutNccl) {
  GG_REQUIRE_GPU_OR_SKIP();
  EXPECT_THROW(dist::NcclGroup::create(), DeviceError);
}
#endif

// Two and three in-process ranks on one GPU (no NCCL): the same program as on the CPU
// (tests/dist/test_attention.cpp), the fused CUDA kernels on every rank (Nq != Nk, grouped heads),
// with both schedules.
TEST(ThreadGroupOnGpu, SequenceParallelAttentionMatchesOneGpu) {
  GG_REQUIRE_GPU_OR_SKIP();
  for (dist::Schedule s : {dist::Schedule::all_gather, dist::Schedule::ring}) {
    test::expect_matches_one_rank(2, dist::Sharding::contiguous, 13, Device::cuda(0), s);
    test::expect_matches_one_rank(3, dist::Sharding::zigzag, 37, Device::cuda(0), s);
  }
}

// bf16 on one GPU, two and three in-process ranks, zig-zag, d = 64 (the sm_90a kernels where
// they apply, the BoB's stages included): the ring's output and its first- and second-order
// gradients against f64 on the CPU, within twice the error of gg::attention in bf16 on the one
// GPU, or 2^-7 of the output's scale. The ring adds its pairs' parts in f32.
TEST(ThreadGroupOnGpu, RingInBf16WithinTwiceTheOneGpuError) {
  GG_REQUIRE_GPU_OR_SKIP();
  const int64_t B = 1, Hq = 4, Hkv = 2, d = 64;
  const Device gpu = Device::cuda(0);
  for (int P : {2, 3})
    for (bool causal : {false, true}) {
      const int64_t N = 320 * P + 7;
      const AttentionOptions opt{std::nullopt, causal};
      const dist::Sharding zz = dist::Sharding::zigzag;
      manual_seed(300 + P + causal);
      auto draw = [&](const Shape& s) { return to(to(randn(s, DType::f64), DType::bf16), DType::f64); };
      const TensorList x = {draw({B, Hq, N, d}), draw({B, Hkv, N, d}), draw({B, Hkv, N, d}),  // q k v
                            draw({B, Hq, N, d}), draw({B, Hq, N, d}), draw({B, Hkv, N, d}),   // dO, q~ k~
                            draw({B, Hkv, N, d})};                                              // v~
      // o, the first-order gradients and the second-order ones (of <q~, dQ> + <k~, dK> + <v~, dV>)
      auto chain = [&](const TensorList& in, auto&& attend) {
        const TensorList leaves = {test::leaf(in[0]), test::leaf(in[1]), test::leaf(in[2])};
        const Tensor o = attend(leaves);
        const TensorList g1 = grad({o}, leaves, {in[3]}, std::nullopt, /*create_graph=*/true);
        const TensorList g2 = grad({sum(g1[0] * in[4]) + sum(g1[1] * in[5]) + sum(g1[2] * in[6])}, leaves);
        TensorList out = {o.detach()};
        for (const TensorList* g : {&g1, &g2})
          for (const Tensor& t : *g) out.push_back(to(to(t.detach(), DType::f64), Device::cpu()));
        out[0] = to(to(out[0], DType::f64), Device::cpu());
        return out;
      };
      auto one = [&](DType dt, Device dev) {
        TensorList in;
        for (const Tensor& t : x) in.push_back(to(to(t, dt), dev));
        return chain(in, [&](const TensorList& l) { return attention(l[0], l[1], l[2], opt); });
      };
      const TensorList ref = one(DType::f64, Device::cpu()), single = one(DType::bf16, gpu);
      std::vector<TensorList> parts(static_cast<size_t>(P));
      dist::run_threads(P, [&](dist::Group& g) {
        TensorList in;
        for (const Tensor& t : x) in.push_back(to(to(test::rows_of(t, g.rank(), P, zz), DType::bf16), gpu));
        parts[static_cast<size_t>(g.rank())] = chain(in, [&](const TensorList& l) {
          return dist::attention(g, l[0], l[1], l[2], opt, zz, dist::Schedule::ring);
        });
      });
      const char* names[] = {"O", "dQ", "dK", "dV", "gQ", "gK", "gV"};
      for (size_t i = 0; i < ref.size(); ++i) {
        TensorList rows;
        for (const TensorList& p : parts) rows.push_back(p[i]);
        const Tensor ring = test::unshard(rows, P, zz);
        const double ring_err = test::relative_gap(ring, ref[i]), one_err = test::relative_gap(single[i], ref[i]);
        EXPECT_LE(ring_err, std::max(2 * one_err, 1.0 / 128))
            << "P " << P << (causal ? " causal " : " full ") << names[i] << ": ring " << ring_err << ", one GPU "
            << one_err;
      }
    }
}

}  // namespace
}  // namespace gg
