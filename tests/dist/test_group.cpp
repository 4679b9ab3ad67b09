// gg::dist::Group on in-process ranks (run_threads): each collective against the same result
// computed on one thread from every rank's input, bitwise equality across ranks, and the typed
// errors for ranks that disagree or fail.
#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <thread>

#include <unistd.h>

#include "dist_util.h"
#include "gradgrad.h"

namespace gg {
namespace {

using dist::Group;
using test::shard_sizes;
using test::shard_start;
using test::values;

// Every rank's input, made on the main thread (the random generator is not thread safe).
TensorList rank_inputs(int P, const Shape& shape, uint64_t seed) {
  manual_seed(seed);
  TensorList xs;
  for (int r = 0; r < P; ++r) xs.push_back(randn(shape, DType::f64));
  return xs;
}

class Collectives : public ::testing::TestWithParam<int> {};

TEST_P(Collectives, AllReduceSumsInRankOrderAndAgreesBitwise) {
  const int P = GetParam();
  const TensorList xs = rank_inputs(P, {3, 5}, 1);
  Tensor want = xs[0];
  for (int r = 1; r < P; ++r) want = want + xs[static_cast<size_t>(r)];
  std::vector<std::vector<double>> got(static_cast<size_t>(P)), mean(static_cast<size_t>(P));
  dist::run_threads(P, [&](Group& g) {
    const size_t r = static_cast<size_t>(g.rank());
    got[r] = values(g.all_reduce(xs[r]));
    mean[r] = values(g.all_reduce_mean(xs[r]));
  });
  for (int r = 0; r < P; ++r) {
    EXPECT_EQ(got[static_cast<size_t>(r)], values(want)) << "rank " << r;  // bitwise
    EXPECT_EQ(mean[static_cast<size_t>(r)], values(want * (1.0 / P))) << "rank " << r;
  }
}

TEST_P(Collectives, AllGatherConcatenatesUnevenShards) {
  const int P = GetParam();
  manual_seed(2);
  const Tensor full = randn({2, 7, 3}, DType::f64);  // 7 rows along dim 1: uneven for P = 2, 3, 4
  std::vector<std::vector<double>> got(static_cast<size_t>(P));
  std::vector<std::vector<int64_t>> sizes(static_cast<size_t>(P));
  dist::run_threads(P, [&](Group& g) {
    const size_t r = static_cast<size_t>(g.rank());
    const Tensor mine = test::shard(full, 1, g.rank(), P);
    got[r] = values(g.all_gather(mine, -2, &sizes[r]));
  });
  for (int r = 0; r < P; ++r) {
    EXPECT_EQ(got[static_cast<size_t>(r)], values(full)) << "rank " << r;
    EXPECT_EQ(sizes[static_cast<size_t>(r)], shard_sizes(7, P));
  }
}

TEST_P(Collectives, ReduceScatterEqualAndUnevenPieces) {
  const int P = GetParam();
  const TensorList xs = rank_inputs(P, {4, 2 * P + 1}, 3);
  Tensor sum = xs[0];
  for (int r = 1; r < P; ++r) sum = sum + xs[static_cast<size_t>(r)];
  const std::vector<int64_t> uneven = shard_sizes(2 * P + 1, P);
  std::vector<std::vector<double>> even_got(static_cast<size_t>(P)), uneven_got(static_cast<size_t>(P));
  dist::run_threads(P, [&](Group& g) {
    const size_t r = static_cast<size_t>(g.rank());
    even_got[r] = values(g.reduce_scatter(slice(xs[r], 1, 0, 2 * P), 1));
    uneven_got[r] = values(g.reduce_scatter(xs[r], 1, uneven));
  });
  for (int r = 0; r < P; ++r) {
    EXPECT_EQ(even_got[static_cast<size_t>(r)], values(slice(sum, 1, 2 * r, 2 * r + 2))) << "rank " << r;
    const int64_t a = shard_start(uneven, r);
    EXPECT_EQ(uneven_got[static_cast<size_t>(r)], values(slice(sum, 1, a, a + uneven[static_cast<size_t>(r)])))
        << "rank " << r;
  }
}

TEST_P(Collectives, BroadcastSendRecvAndBarrier) {
  const int P = GetParam();
  const TensorList xs = rank_inputs(P, {6}, 4);
  const int root = P - 1;
  std::vector<std::vector<double>> bcast(static_cast<size_t>(P)), ring(static_cast<size_t>(P)),
      shifted(static_cast<size_t>(P)), started(static_cast<size_t>(P));
  std::atomic<int> before{0};
  std::vector<int> seen(static_cast<size_t>(P));
  dist::run_threads(P, [&](Group& g) {
    const int r = g.rank();
    bcast[static_cast<size_t>(r)] = values(g.broadcast(xs[static_cast<size_t>(r)], root));
    ++before;
    g.barrier();
    seen[static_cast<size_t>(r)] = before.load();
    if (P > 1) {
      const int next = (r + 1) % P, prev = (r + P - 1) % P;
      g.send(xs[static_cast<size_t>(r)], next);
      ring[static_cast<size_t>(r)] = values(g.recv(xs[static_cast<size_t>(r)], prev));
      shifted[static_cast<size_t>(r)] = values(g.sendrecv(xs[static_cast<size_t>(r)] * 2.0, next, prev));
      const auto pending = g.start_sendrecv(reshape(xs[static_cast<size_t>(r)] * 3.0, {2, 3}), next, prev);
      const Tensor got = pending->wait();
      EXPECT_EQ(got.shape(), (Shape{2, 3}));
      started[static_cast<size_t>(r)] = values(got);
    } else {
      EXPECT_THROW(g.start_sendrecv(xs[0], 0, 0), ValueError);  // no other rank to shift to
    }
  });
  for (int r = 0; r < P; ++r) {
    EXPECT_EQ(bcast[static_cast<size_t>(r)], values(xs[static_cast<size_t>(root)])) << "rank " << r;
    EXPECT_EQ(seen[static_cast<size_t>(r)], P) << "rank " << r << " left the barrier early";
    if (P > 1) {
      const size_t prev = static_cast<size_t>((r + P - 1) % P);
      EXPECT_EQ(ring[static_cast<size_t>(r)], values(xs[prev])) << "rank " << r;
      EXPECT_EQ(shifted[static_cast<size_t>(r)], values(xs[prev] * 2.0)) << "rank " << r;
      EXPECT_EQ(started[static_cast<size_t>(r)], values(xs[prev] * 3.0)) << "rank " << r;
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Ranks, Collectives, ::testing::Values(1, 2, 3, 4));

TEST(DistErrors, RanksWithDifferentShapesGetShapeError) {
  EXPECT_THROW(dist::run_threads(2, [](Group& g) { g.all_reduce(zeros({2 + g.rank()}, DType::f64)); }), ShapeError);
  // all_gather lets the gathered dim differ, but no other.
  EXPECT_THROW(dist::run_threads(2, [](Group& g) { g.all_gather(zeros({2, 1 + g.rank()}, DType::f64), 0); }),
               ShapeError);
  EXPECT_THROW(dist::run_threads(3, [](Group& g) { g.reduce_scatter(zeros({4}, DType::f64), 0); }), ShapeError);
  EXPECT_THROW(dist::run_threads(2, [](Group& g) {
                 g.reduce_scatter(zeros({3}, DType::f64), 0, g.rank() == 0 ? std::vector<int64_t>{1, 2}
                                                                           : std::vector<int64_t>{2, 1});
               }),
               ValueError);
}

TEST(DistErrors, RanksWithDifferentDtypesGetDTypeError) {
  EXPECT_THROW(dist::run_threads(2, [](Group& g) { g.all_reduce(zeros({2}, g.rank() ? DType::f32 : DType::f64)); }),
               DTypeError);
  EXPECT_THROW(dist::run_threads(1, [](Group& g) { g.all_reduce(zeros({2}, DType::b8)); }), DTypeError);
}

TEST(DistErrors, BadArgumentsAreValueErrors) {
  EXPECT_THROW(dist::run_threads(0, [](Group&) {}), ValueError);
  EXPECT_THROW(dist::run_threads(2, [](Group& g) { g.send(zeros({1}), g.rank()); }), ValueError);
  EXPECT_THROW(dist::run_threads(2, [](Group& g) { g.broadcast(zeros({1}), 2); }), ValueError);
  EXPECT_THROW(dist::run_threads(2, [](Group& g) { g.all_gather(zeros({1}), 1); }), IndexError);
}

TEST(DistErrors, AFailingRankReleasesTheOthersAndItsErrorIsRethrown) {
  struct Boom : std::runtime_error {
    using std::runtime_error::runtime_error;
  };
  std::vector<int> released(3, 0);
  EXPECT_THROW(dist::run_threads(3,
                                 [&](Group& g) {
                                   if (g.rank() == 1) throw Boom("rank 1 gives up");
                                   try {
                                     g.all_reduce(zeros({2}, DType::f64));
                                   } catch (const dist::DistError& e) {
                                     released[static_cast<size_t>(g.rank())] = 1;
                                     EXPECT_NE(std::string(e.what()).find("rank 1 gives up"), std::string::npos)
                                         << e.what();
                                     throw;
                                   }
                                 }),
               Boom);
  EXPECT_EQ(released, (std::vector<int>{1, 0, 1}));
  // A rank blocked in recv is released too.
  EXPECT_THROW(dist::run_threads(2,
                                 [](Group& g) {
                                   if (g.rank() == 0) throw ValueError("no message for you");
                                   g.recv(zeros({1}), 0);
                                 }),
               ValueError);
}

TEST(DistErrors, RanksCallingDifferentCollectivesAreTold) {
  EXPECT_THROW(dist::run_threads(2,
                                 [](Group& g) {
                                   const Tensor x = zeros({4}, DType::f64);
                                   if (g.rank() == 0) g.all_reduce(x);
                                   else g.broadcast(x, 0);
                                 }),
               ValueError);
}

TEST(DistErrors, DifferentiatingAfterTheGroupIsGoneIsADistError) {
  Tensor y;
  Tensor x = zeros({2}, DType::f64).requires_grad_();
  dist::run_threads(1, [&](Group& g) { y = sum(dist::all_reduce(g, x)); });
  EXPECT_THROW(grad(y, x), dist::DistError);
}

// ------------------------------------------------------------------- launch environment

TEST(Launch, InitFileIsSharedByRankZeroAndReadByTheOthers) {
  const auto dir = std::filesystem::temp_directory_path() / ("gg_dist_init_" + std::to_string(::getpid()));
  std::filesystem::create_directories(dir);
  const std::string path = (dir / "id").string();
  const std::string blob(128, 'x');
  std::vector<std::string> got(3);
  std::vector<std::thread> readers;
  for (int r = 1; r < 3; ++r)
    readers.emplace_back(
        [&, r] { got[static_cast<size_t>(r)] = dist::share_through_file(path, r, std::string(128, '\0'), 10); });
  std::this_thread::sleep_for(std::chrono::milliseconds(50));  // the readers poll first
  got[0] = dist::share_through_file(path, 0, blob, 10);
  for (auto& t : readers) t.join();
  for (const std::string& s : got) EXPECT_EQ(s, blob);
  // Nobody writes this one: the wait ends with a DistError naming the file.
  try {
    dist::share_through_file((dir / "never").string(), 1, blob, 0.05);
    ADD_FAILURE() << "no timeout";
  } catch (const dist::DistError& e) {
    EXPECT_NE(std::string(e.what()).find("never"), std::string::npos) << e.what();
  }
  // A file of the wrong size (left from something else) is refused.
  { std::ofstream(dir / "short") << "abc"; }
  EXPECT_THROW(dist::share_through_file((dir / "short").string(), 1, blob, 1), dist::DistError);
  std::filesystem::remove_all(dir);
}

TEST(Launch, OptionsComeFromTorchrunStyleVariables) {
  ::setenv("RANK", "2", 1);
  ::setenv("WORLD_SIZE", "4", 1);
  ::unsetenv("LOCAL_RANK");
  ::setenv("GG_DIST_INIT_FILE", "/tmp/x", 1);
  ::unsetenv("GG_DIST_TIMEOUT_S");
  dist::LaunchOptions o = dist::resolve_launch_options({});
  EXPECT_EQ(o.rank, 2);
  EXPECT_EQ(o.world_size, 4);
  EXPECT_EQ(o.local_rank, 2);  // defaults to the rank
  EXPECT_EQ(o.init_file, "/tmp/x");
  EXPECT_EQ(o.timeout_s, 300);
  ::setenv("LOCAL_RANK", "1", 1);
  EXPECT_EQ(dist::resolve_launch_options({}).local_rank, 1);
  dist::LaunchOptions explicit_rank;
  explicit_rank.rank = 3;
  EXPECT_EQ(dist::resolve_launch_options(explicit_rank).rank, 3);
  ::setenv("RANK", "4", 1);  // out of range
  EXPECT_THROW(dist::resolve_launch_options({}), ValueError);
  ::setenv("RANK", "one", 1);
  EXPECT_THROW(dist::resolve_launch_options({}), ValueError);
  ::setenv("RANK", "0", 1);
  ::unsetenv("GG_DIST_INIT_FILE");
  EXPECT_THROW(dist::resolve_launch_options({}), ValueError);  // 4 ranks, nowhere to meet
  for (const char* v : {"RANK", "WORLD_SIZE", "LOCAL_RANK"}) ::unsetenv(v);
  EXPECT_THROW(dist::resolve_launch_options({}), ValueError);
}

// With the shape checks off the collectives give what they give with them on, and exchange no
// shapes: of the six all-gathers of all_reduce, all_gather (two), reduce_scatter (two, its cut
// too) and broadcast, only all_gather's own is left.
TEST(DistShapeChecks, OffKeepsTheResultsAndSkipsTheExchange) {
  const int P = 3;
  const TensorList xs = rank_inputs(P, {2, 3}, 9), ys = rank_inputs(P, {2, 6}, 10);
  std::vector<std::vector<std::vector<double>>> got[2];
  std::vector<std::string> logs[2][P];
  for (int on = 0; on < 2; ++on) {
    got[on].resize(P);
    dist::run_threads(P, [&](Group& g) {
      const size_t r = static_cast<size_t>(g.rank());
      test::RecordingRank c(g, &logs[on][r]);
      EXPECT_TRUE(c.shape_checks());
      c.set_shape_checks(on == 1);
      got[on][r] = {values(c.all_reduce(xs[r])), values(c.all_gather(xs[r], 1)), values(c.reduce_scatter(ys[r], 1)),
                    values(c.broadcast(xs[r], 1))};
    });
  }
  for (size_t r = 0; r < P; ++r) {
    EXPECT_EQ(got[0][r], got[1][r]) << "rank " << r;
    EXPECT_EQ(std::count(logs[1][r].begin(), logs[1][r].end(), "all_gather"), 6) << "rank " << r;
    EXPECT_EQ(std::count(logs[0][r].begin(), logs[0][r].end(), "all_gather"), 1) << "rank " << r;
  }
}

// Under mpirun (Open MPI) or mpiexec (MPICH) the launcher's own variables stand in for RANK,
// WORLD_SIZE and LOCAL_RANK when those are unset; when set, torchrun's names win.
TEST(Launch, OptionsComeFromMpiLaunchersVariables) {
  const char* ompi[] = {"OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_SIZE", "OMPI_COMM_WORLD_LOCAL_RANK"};
  const char* mpich[] = {"PMI_RANK", "PMI_SIZE", "MPI_LOCALRANKID"};
  for (const char* v : {"RANK", "WORLD_SIZE", "LOCAL_RANK", "GG_DIST_TIMEOUT_S"}) ::unsetenv(v);
  ::setenv("GG_DIST_INIT_FILE", "/tmp/x", 1);
  for (const auto* names : {ompi, mpich}) {
    ::setenv(names[0], "5", 1);
    ::setenv(names[1], "8", 1);
    ::setenv(names[2], "1", 1);
    const dist::LaunchOptions o = dist::resolve_launch_options({});
    EXPECT_EQ(o.rank, 5) << names[0];
    EXPECT_EQ(o.world_size, 8) << names[1];
    EXPECT_EQ(o.local_rank, 1) << names[2];
    ::unsetenv(names[2]);
    EXPECT_EQ(dist::resolve_launch_options({}).local_rank, 5) << "the rank, with no local rank set";
    ::setenv("RANK", "2", 1);
    ::setenv("WORLD_SIZE", "4", 1);
    const dist::LaunchOptions t = dist::resolve_launch_options({});
    EXPECT_EQ(t.rank, 2);
    EXPECT_EQ(t.world_size, 4);
    ::unsetenv("RANK");
    ::unsetenv("WORLD_SIZE");
    ::setenv(names[0], "x5", 1);
    EXPECT_THROW(dist::resolve_launch_options({}), ValueError) << "a malformed " << names[0];
    for (int i = 0; i < 3; ++i) ::unsetenv(names[i]);
  }
  ::unsetenv("GG_DIST_INIT_FILE");
}

#ifndef GG_HAS_NCCL
TEST(Launch, NcclGroupWithoutNcclIsADeviceError) {
  dist::LaunchOptions o;
  o.rank = 0;
  o.world_size = 1;
  EXPECT_THROW(dist::NcclGroup::create(o), DeviceError);
}
#endif

}  // namespace
}  // namespace gg
