// gg::cuda::Graph: a captured training step replayed k times against k eager steps, static
// inputs and outputs, and the calls that must raise CaptureError during a capture.
#include <cmath>
#include <cstdio>
#include <functional>
#include <memory>
#include <stdexcept>
#include <string>

#include "../test_util.h"
#include "gpu_util.h"

namespace gg::test {
namespace {

const Device kGpu = Device::cuda(0);

// ------------------------------------------------------------------------- a small training step

// A 3-16-16-1 tanh MLP in f64 with SGD (momentum 0.9): after its first step, SGD's update uses
// only in-place ops on state that already exists and scalars that never change, so the whole
// step (forward, backward, update) can live in the graph.
struct Model {
  std::shared_ptr<nn::MLP> net;
  std::unique_ptr<optim::SGD> opt;

  Model() {
    manual_seed(7);  // both models start from the same weights
    net = std::make_shared<nn::MLP>(std::vector<int64_t>{3, 16, 16, 1}, nn::Activation::tanh, true,
                                    nn::Init{DType::f64, kGpu});
    optim::SGDOptions o;
    o.lr = 0.05;
    o.momentum = 0.9;
    opt = std::make_unique<optim::SGD>(net->parameters(), o);
  }

  Tensor step(const Tensor& x, const Tensor& y) {
    Tensor loss = mse_loss((*net)(x), y);
    opt->step(grad({loss}, opt->params()));
    return loss;
  }
};

struct Batch {
  Tensor x, y;  // on the CPU: (32, 3) and (32, 1)
};

Batch batch(uint64_t i) {
  manual_seed(1000 + i);
  Tensor x = randn({32, 3}, DType::f64);
  return {x, sum(sin(x), {1}, /*keepdim=*/true)};
}

double max_param_diff(const Model& a, const Model& b, bool* bitwise) {
  double worst = 0.0;
  *bitwise = true;
  const TensorList pa = a.net->parameters(), pb = b.net->parameters();
  for (size_t i = 0; i < pa.size(); ++i) {
    const Values va = pa[i].to_vector<double>(), vb = pb[i].to_vector<double>();
    for (size_t j = 0; j < va.size(); ++j) {
      worst = std::max(worst, std::abs(va[j] - vb[j]));
      *bitwise = *bitwise && va[j] == vb[j];
    }
  }
  return worst;
}

// Replaying the captured step k times gives the parameters of k eager steps. Asserted to
// rounding (1e-13 in f64); the same kernels run in the same order on the same stream, so the
// result is expected to be bitwise equal, and the test prints whether it was.
TEST(CudaGraph, ReplayedStepMatchesEagerSteps) {
  GG_REQUIRE_GPU_OR_SKIP();
  constexpr int kReplays = 6;
  Model eager, captured;
  bool bitwise = false;
  ASSERT_EQ(max_param_diff(eager, captured, &bitwise), 0.0);

  // Warm-up: one eager step each (creates SGD's momentum buffers and cuBLAS's state).
  const Batch b0 = batch(0);
  eager.step(b0.x.to(kGpu), b0.y.to(kGpu));
  captured.step(b0.x.to(kGpu), b0.y.to(kGpu));

  Tensor x = zeros({32, 3}, DType::f64, kGpu), y = zeros({32, 1}, DType::f64, kGpu);  // static inputs
  cuda::Graph graph;
  const TensorList& out = graph.capture([&] { return TensorList{captured.step(x, y)}; });
  ASSERT_TRUE(graph.captured());
  ASSERT_EQ(out.size(), 1u);
  EXPECT_TRUE(out[0].device() == kGpu);
  EXPECT_FALSE(cuda::is_capturing());
  EXPECT_EQ(max_param_diff(eager, captured, &bitwise), 0.0) << "capture must record the step, not run it";

  for (int i = 1; i <= kReplays; ++i) {
    const Batch b = batch(static_cast<uint64_t>(i));
    const double eager_loss = eager.step(b.x.to(kGpu), b.y.to(kGpu)).item();
    copy_(x, b.x.to(kGpu));
    copy_(y, b.y.to(kGpu));
    graph.replay();
    const double graph_loss = out[0].item();
    EXPECT_NEAR(graph_loss, eager_loss, 1e-13 * (1 + std::abs(eager_loss))) << "replay " << i;
  }
  const double diff = max_param_diff(eager, captured, &bitwise);
  EXPECT_LE(diff, 1e-13) << "parameters after " << kReplays << " replays vs " << kReplays << " eager steps";
  std::printf("[ graph    ] %d replays vs eager steps: max |diff| of the parameters = %.3g (%s)\n", kReplays, diff,
              bitwise ? "bitwise equal" : "equal to rounding");
  RecordProperty("bitwise", bitwise ? "yes" : "no");
}

// A static input changed in place is read by the next replay; the static output is rewritten
// in place at the same address; a second capture of the same Graph replaces the first.
TEST(CudaGraph, StaticInputsAndOutputs) {
  GG_REQUIRE_GPU_OR_SKIP();
  Tensor x = from_vector({1, 2, 3, 4}, {4}, DType::f64, kGpu);
  cuda::Graph graph;
  const TensorList& out = graph.capture([&] { return TensorList{exp(x) * 3.0 + sum(x * x)}; });
  const void* address = out[0].raw_data();
  for (double shift : {0.0, -1.5, 2.25}) {
    const Values xs = {1 + shift, 2 + shift, 3 + shift, 4 + shift};
    copy_(x, from_vector(xs, {4}, DType::f64, kGpu));
    graph.replay();
    double ss = 0;
    for (double v : xs) ss += v * v;
    Values want;
    for (double v : xs) want.push_back(3 * std::exp(v) + ss);
    expect_close(out[0].to_vector<double>(), want, 1e-14, 0, "replayed output");
    EXPECT_EQ(out[0].raw_data(), address);
  }
  graph.capture([&] { return TensorList{x - 1.0}; });
  graph.replay();
  expect_close(graph.outputs()[0].to_vector<double>(), {2.25, 3.25, 4.25, 5.25}, 0, 0, "second capture");
}

// A tensor created before the capture and dropped inside it stays readable by every replay.
TEST(CudaGraph, TensorDroppedDuringCaptureOutlivesIt) {
  GG_REQUIRE_GPU_OR_SKIP();
  auto held = std::make_shared<Tensor>(full({1000}, 2.0, DType::f64, kGpu));
  Tensor x = ones({1000}, DType::f64, kGpu);
  cuda::Graph graph;
  graph.capture([&] {
    Tensor y = x * *held;
    held.reset();  // the last handle: its memory must not be reused while the graph exists
    return TensorList{y};
  });
  Tensor other = full({1000}, -7.0, DType::f64, kGpu);  // would land on the freed block if it were freed
  for (int i = 0; i < 3; ++i) {
    graph.replay();
    EXPECT_DOUBLE_EQ(sum(graph.outputs()[0]).item(), 2000.0) << "replay " << i;
  }
  EXPECT_DOUBLE_EQ(sum(other).item(), -7000.0);
}

// A Graph destroyed while another one is being captured: its memory is not freed into the
// running capture (that would record a free of a block the new graph never allocated).
TEST(CudaGraph, GraphDestroyedDuringAnotherCapture) {
  GG_REQUIRE_GPU_OR_SKIP();
  Tensor x = from_vector({1, 2, 3}, {3}, DType::f64, kGpu);
  auto first = std::make_unique<cuda::Graph>();
  first->capture([&] { return TensorList{x * 2.0}; });
  first->replay();
  cuda::Graph second;
  second.capture([&] {
    first.reset();
    return TensorList{x + 1.0};
  });
  for (int i = 0; i < 2; ++i) {
    second.replay();
    expect_close(second.outputs()[0].to_vector<double>(), {2, 3, 4}, 0, 0, "second graph");
  }
}

// ------------------------------------------------------------------------- forbidden calls

// Runs `step` under capture, expects CaptureError with `needle` in its message, and checks that
// the capture was abandoned cleanly: no capture running, nothing captured, eager work still fine.
void expect_capture_error(const std::function<TensorList()>& step, const std::string& needle) {
  cuda::Graph graph;
  try {
    graph.capture(step);
    ADD_FAILURE() << "expected CaptureError containing '" << needle << "'";
  } catch (const CaptureError& e) {
    EXPECT_NE(std::string(e.what()).find(needle), std::string::npos) << e.what();
  }
  EXPECT_FALSE(cuda::is_capturing());
  EXPECT_FALSE(graph.captured());
  Tensor z = from_vector({1, 2, 3}, {3}, DType::f64, kGpu);
  EXPECT_DOUBLE_EQ(sum(z * z).item(), 14.0) << "eager work after the failed capture (" << needle << ")";
}

TEST(CudaGraph, ForbiddenCallsRaiseCaptureError) {
  GG_REQUIRE_GPU_OR_SKIP();
  Tensor x = from_vector({1, 2, 3}, {3}, DType::f64, kGpu);
  expect_capture_error([&] { return TensorList{x * 2.0, full({}, sum(x).item(), DType::f64, kGpu)}; },
                       "from the GPU to the host");
  expect_capture_error([&] { return TensorList{from_vector(exp(x).to_vector<double>(), {3}, DType::f64, kGpu)}; },
                       "from the GPU to the host");
  expect_capture_error([&] { return TensorList{to(exp(x), Device::cpu()).to(kGpu)}; }, "from the GPU to the host");
  expect_capture_error([&] { return TensorList{x + from_vector({1, 1, 1}, {3}, DType::f64, kGpu)}; },
                       "from the host to the GPU");
  expect_capture_error(
      [&] {
        Tensor y = exp(x);
        cuda::synchronize();
        return TensorList{y};
      },
      "synchronize");
  expect_capture_error([&] { return TensorList{x + randn({3}, DType::f64, kGpu)}; }, "random numbers");
  expect_capture_error(
      [&] {
        cuda::Graph inner;
        inner.capture([&] { return TensorList{x * 3.0}; });
        return TensorList{};
      },
      "nested");
  // A replay inside a capture is refused too (it would launch a graph that is being recorded).
  cuda::Graph ready;
  ready.capture([&] { return TensorList{x * 5.0}; });
  expect_capture_error(
      [&] {
        ready.replay();
        return TensorList{};
      },
      "replay");
  ready.replay();
  expect_close(ready.outputs()[0].to_vector<double>(), {5, 10, 15}, 0, 0, "graph still usable");
}

TEST(CudaGraph, StepExceptionsPassThroughAndOutputsMustBeOnTheGpu) {
  GG_REQUIRE_GPU_OR_SKIP();
  Tensor x = ones({3}, DType::f64, kGpu);
  cuda::Graph graph;
  EXPECT_THROW(graph.capture([&]() -> TensorList {
    Tensor y = exp(x);
    throw std::runtime_error("step failed");
  }),
               std::runtime_error);
  EXPECT_FALSE(cuda::is_capturing());
  try {
    graph.capture([&] { return TensorList{exp(x), zeros({2})}; });
    ADD_FAILURE() << "expected ValueError for a CPU output";
  } catch (const ValueError& e) {
    EXPECT_NE(std::string(e.what()).find("output 1 is on cpu"), std::string::npos) << e.what();
  }
  EXPECT_FALSE(cuda::is_capturing());
  EXPECT_THROW(graph.replay(), ValueError);  // nothing captured
  graph.capture([&] { return TensorList{x * 2.0}; });  // and the Graph is still usable
  graph.replay();
  EXPECT_DOUBLE_EQ(sum(graph.outputs()[0]).item(), 6.0);
}

// Without a usable GPU, capture is the same typed error as any other use of a CUDA device.
TEST(CudaGraph, WithoutAGpuCaptureIsADeviceError) {
  if (cuda::is_available()) GTEST_SKIP() << "a GPU is present: covered by the tests above";
  cuda::Graph graph;
  EXPECT_THROW(graph.capture([] { return TensorList{}; }), DeviceError);
  EXPECT_FALSE(graph.captured());
  EXPECT_THROW(graph.replay(), ValueError);
}

}  // namespace
}  // namespace gg::test
