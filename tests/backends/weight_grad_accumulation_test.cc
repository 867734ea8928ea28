// A weight gradient's product added into the buffer where the gradient is kept (a state that
// already holds a sum, as under gradient accumulation): compiled, where graph::fold_accumulations
// makes the product add into the state itself (cuBLASLt's addend on CUDA, oneDNN's beta on the
// CPU), and eager, where a product and an accumulation run apart. f32 operands, and bf16 ones as
// under autocast. On each backend (CUDA skipped, and said so, where absent), against the closed
// form summed in double.
#include <gtest/gtest.h>

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

INSTANTIATE_TEST_SUITE_P(Devices, WeightGradAccumulationTest, testing::every_device_and_operands(),
                         testing::device_and_operands_name);

}  // namespace
}  // namespace tfm
