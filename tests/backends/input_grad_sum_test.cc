// The gradient of a value three products read (q, k and v's of one normed row): the sum of their
// input-gradient products, compiled, where graph::fold_gradient_sums makes the second and third
// product add into the first's buffer (cuBLASLt's addend on CUDA, oneDNN's beta on the CPU), and
// eager, where the products and the sum run apart. f32 operands, and bf16 ones as under autocast.
// On each backend (CUDA skipped, and said so, where absent), against the closed form summed in
// double.
#include <gtest/gtest.h>

#include <array>

#include "backends/cpu/cpu_backend.h"
#include "graph/backend.h"
#include "graph/builder.h"
#include "support/device_operands.h"
#include "support/random_values.h"

namespace tfm {
namespace {

using testing::expect_close;
using testing::random_values;
using testing::rounded;

class InputGradSumTest : public ::testing::TestWithParam<testing::DeviceOperands> {};

TEST_P(InputGradSumTest, ProductsAddIntoOneBuffer) {
  const testing::DeviceOperands& c = GetParam();
  if (!is_available(c.device)) GTEST_SKIP() << "no " << c.device << " device present";
  const Device device = testing::device_of(c);
  constexpr int64_t kRows = 10, kIn = 24;
  constexpr std::array<int64_t, 3> kOut = {32, 16, 8};
  graph::Builder b;
  const auto operand = [&](graph::ValueId v) {
    return c.operands == DType::f32 ? v : b.cast(v, c.operands);
  };
  std::vector<graph::ValueId> products;
  std::vector<Tensor> inputs;
  std::vector<std::vector<float>> dy_read, w_read;
  for (size_t i = 0; i < kOut.size(); ++i) {
    const std::vector<float> dy_values = random_values(kRows * kOut[i], 20 + i),
                             w_values = random_values(kOut[i] * kIn, 30 + i);
    const auto dy = b.input("dy" + std::to_string(i), {2, kRows / 2, kOut[i]}, DType::f32);
    const auto w =
        b.weight("w" + std::to_string(i), Tensor::from_vector<float>(w_values, {kOut[i], kIn}));
    products.push_back(b.linear_grad_input(operand(dy), operand(w)));
    inputs.push_back(Tensor::from_vector<float>(dy_values, {2, kRows / 2, kOut[i]}));
    // The products read the operands as the backend holds them.
    dy_read.push_back(rounded(dy_values, c.operands));
    w_read.push_back(rounded(w_values, c.operands));
  }
  b.output(b.add(b.add(products[0], products[1]), products[2]));
  const graph::Graph g = b.finish();

  const fusion::Plan plan = cpu::cpu_plan(g);
  int in_place = 0, elementwise = 0;
  for (graph::ValueId id : plan.schedule) {
    const graph::Node& n = plan.graph.nodes[static_cast<size_t>(id)];
    in_place += n.op == graph::Op::kLinearGradInput && n.in_place;
    elementwise += n.op == graph::Op::kElementwise;
  }
  EXPECT_EQ(in_place, 2);
  EXPECT_EQ(elementwise, 0);

  std::vector<float> want(kRows * kIn);
  for (int64_t r = 0; r < kRows; ++r) {
    for (int64_t k = 0; k < kIn; ++k) {
      double sum = 0;
      for (size_t i = 0; i < kOut.size(); ++i) {
        for (int64_t n = 0; n < kOut[i]; ++n) {
          sum += double{dy_read[i][r * kOut[i] + n]} * w_read[i][n * kIn + k];
        }
      }
      want[r * kIn + k] = static_cast<float>(sum);
    }
  }
  graph::Backend& backend = graph::backend_for(device);
  const std::vector<Tensor> compiled = backend.compile(g)->run(inputs).outputs;
  const std::vector<Tensor> eager = backend.run_eager(g, inputs);
  expect_close(compiled[0].to(kCpu).to_f32_vector(), want, 1e-5f, "compiled");
  expect_close(eager[0].to(kCpu).to_f32_vector(), want, 1e-5f, "eager");
}

INSTANTIATE_TEST_SUITE_P(Devices, InputGradSumTest, testing::every_device_and_operands(),
                         testing::device_and_operands_name);

}  // namespace
}  // namespace tfm
