// A weight gradient's product added into the buffer where the gradient is kept (a state that
// already holds a sum, as under gradient accumulation): compiled, where graph::fold_accumulations
// makes the product add into the state itself (cuBLASLt's addend on CUDA, oneDNN's beta on the
// CPU), and eager, where a product and an accumulation run apart. f32 operands, and bf16 ones as
// under autocast. Likewise a norm weight's gradient. On each backend (CUDA skipped, and said so,
// where absent), against the closed forms summed in double.
#include <gtest/gtest.h>

#include <cmath>
#include <string>

#include "graph/backend.h"
#include "graph/builder.h"
#include "graph/plan.h"
#include "support/device_operands.h"
#include "support/random_values.h"

namespace tfm {
namespace {

using testing::expect_close;
using testing::random_values;
using testing::rounded;

class WeightGradAccumulationTest : public ::testing::TestWithParam<testing::DeviceOperands> {};

TEST_P(WeightGradAccumulationTest, AddsIntoTheStateEachRun) {
  const testing::DeviceOperands& c = GetParam();
  if (!is_available(c.device)) GTEST_SKIP() << "no " << c.device << " device present";
  const Device device = testing::device_of(c);
  constexpr int64_t kRows = 10, kOut = 16, kIn = 24;
  graph::Builder b;
  const auto dy = b.input("dy", {2, kRows / 2, kOut}, DType::f32);
  const auto x = b.input("x", {2, kRows / 2, kIn}, DType::f32);
  const auto sum = b.state("grad", {kOut, kIn}, DType::f32);
  const auto operand = [&](graph::ValueId v) {
    return c.operands == DType::f32 ? v : b.cast(v, c.operands);
  };
  b.accumulate(sum, b.linear_grad_weight(operand(dy), operand(x)));
  b.output(b.reduce_rows(x));
  const graph::Graph g = b.finish();

  const std::vector<float> dy_values = random_values(kRows * kOut, 11),
                           x_values = random_values(kRows * kIn, 12),
                           start = random_values(kOut * kIn, 13);
  // The products read the operands as the backend holds them.
  const std::vector<float> dy_read = rounded(dy_values, c.operands),
                           x_read = rounded(x_values, c.operands);
  std::vector<float> want(start.size());
  for (int64_t n = 0; n < kOut; ++n) {
    for (int64_t k = 0; k < kIn; ++k) {
      double product = 0;
      for (int64_t r = 0; r < kRows; ++r) {
        product += double{dy_read[r * kOut + n]} * x_read[r * kIn + k];
      }
      want[n * kIn + k] = static_cast<float>(start[n * kIn + k] + 3 * product);
    }
  }

  graph::Backend& backend = graph::backend_for(device);
  const Tensor grad = Tensor::from_vector<float>(start, {kOut, kIn}).to(device);
  const std::vector<Tensor> inputs{Tensor::from_vector<float>(dy_values, {2, kRows / 2, kOut}),
                                   Tensor::from_vector<float>(x_values, {2, kRows / 2, kIn}), grad};
  const auto compiled = backend.compile(graph::plan_graph(g));
  compiled->run(inputs);
  compiled->run(inputs);
  backend.run_eager(g, inputs);
  expect_close(grad.to(kCpu).to_f32_vector(), want, 1e-5f, "start + 3 dy^T x");
}

// RMSNorm's weight gradient added into its state while the input gradient is taken: compiled,
// in one pass over x and dy (graph::fold_norm_weight_grads), dx in the operands' dtype; eager, as
// the two steps and a cast. Rows of 70 values, and of 1100 (more than CUDA's one-pass kernel holds
// in registers: its two kernels in turn). Against the closed forms summed in double.
TEST_P(WeightGradAccumulationTest, NormGradientsAddIntoTheStateEachRun) {
  const testing::DeviceOperands& c = GetParam();
  if (!is_available(c.device)) GTEST_SKIP() << "no " << c.device << " device present";
  const Device device = testing::device_of(c);
  constexpr int64_t kRows = 10;
  constexpr float kEps = 1e-6f;
  for (const int64_t hidden : {70, 1100}) {
    SCOPED_TRACE("hidden " + std::to_string(hidden));
    const std::vector<float> x_values = random_values(kRows * hidden, 21, -2.f, 2.f),
                             dy_values = random_values(kRows * hidden, 22),
                             w_values = random_values(hidden, 23, 0.5f, 1.5f),
                             start = random_values(hidden, 24);
    graph::Builder b;
    const auto x = b.input("x", {2, kRows / 2, hidden}, DType::f32);
    const auto dy = b.input("dy", {2, kRows / 2, hidden}, DType::f32);
    const auto sum = b.state("grad", {hidden}, DType::f32);
    const auto w = b.weight("w", Tensor::from_vector<float>(w_values, {hidden}));
    b.accumulate(sum, b.rms_norm_grad_weight(x, dy, kEps));
    const auto dx = b.rms_norm_grad_input(x, w, dy, kEps);
    b.output(c.operands == DType::f32 ? dx : b.cast(dx, c.operands));
    const graph::Graph g = b.finish();

    std::vector<float> want_dx(x_values.size()), want_sum(start.size());
    std::vector<double> dw(static_cast<size_t>(hidden), 0.0);
    for (int64_t r = 0; r < kRows; ++r) {
      const float* xr = x_values.data() + r * hidden;
      const float* dyr = dy_values.data() + r * hidden;
      double sum_sq = 0, dot = 0;
      for (int64_t i = 0; i < hidden; ++i) {
        sum_sq += double{xr[i]} * xr[i];
        dot += double{w_values[i]} * dyr[i] * xr[i];
      }
      const double inv_rms = 1.0 / std::sqrt(sum_sq / static_cast<double>(hidden) + kEps);
      const double coef = inv_rms * inv_rms * inv_rms * dot / static_cast<double>(hidden);
      for (int64_t i = 0; i < hidden; ++i) {
        want_dx[r * hidden + i] = static_cast<float>(inv_rms * w_values[i] * dyr[i] - xr[i] * coef);
        dw[i] += double{dyr[i]} * xr[i] * inv_rms;
      }
    }
    for (int64_t i = 0; i < hidden; ++i) want_sum[i] = static_cast<float>(start[i] + 3 * dw[i]);

    graph::Backend& backend = graph::backend_for(device);
    const Tensor grad = Tensor::from_vector<float>(start, {hidden}).to(device);
    const std::vector<Tensor> inputs{Tensor::from_vector<float>(x_values, {2, kRows / 2, hidden}),
                                     Tensor::from_vector<float>(dy_values, {2, kRows / 2, hidden}),
                                     grad};
    const auto compiled = backend.compile(graph::plan_graph(g));
    compiled->run(inputs);
    const std::vector<Tensor> got = compiled->run(inputs);
    backend.run_eager(g, inputs);
    expect_close(grad.to(kCpu).to_f32_vector(), want_sum, 1e-5f, "start + 3 dw");
    const std::vector<float> got_dx = got[0].to(kCpu).to_f32_vector();
    const float tol = c.operands == DType::f32 ? 1e-5f : 1.f / 128;
    expect_close(got_dx, want_dx, tol, "dx");
  }
}

INSTANTIATE_TEST_SUITE_P(Devices, WeightGradAccumulationTest, testing::every_device_and_operands(),
                         testing::device_and_operands_name);

}  // namespace
}  // namespace tfm
