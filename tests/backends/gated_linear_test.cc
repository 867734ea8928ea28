// A gated MLP's first half, silu(h w_gate^T + b_gate) * (h w_up^T + b_up) with h = x or the
// RMS-normed x, as the models build it in basic ops, on each backend (CUDA skipped, and said so,
// where absent): compiled, where the backend's passes make it one gated_linear, and eager, op by
// op; against the scalar references in src/ops and the closed form of SiLU.
#include <gtest/gtest.h>

#include <cmath>

#include "backends/cpu/cpu_backend.h"
#include "backends/cpu/kernels.h"
#include "graph/backend.h"
#include "graph/builder.h"
#include "ops/reference.h"
#include "support/random_values.h"
#include "tfm/device.h"

namespace tfm {
namespace {

using graph::ValueId;
using testing::expect_close;
using testing::random_values;
using testing::rounded;

struct Case {
  std::string device;
  // Up to 8 rows take the GEMV on CUDA; up to 16 with bf16 weights and columns a multiple of 16
  // the tensor-core tiles; more, cuBLASLt.
  int64_t rows, hidden, out;
  DType weights;
  bool norm, biases;
};

std::string describe(const Case& c) {
  return c.device + "_rows" + std::to_string(c.rows) + "_k" + std::to_string(c.hidden) + "_" +
         std::string(dtype_name(c.weights)) + (c.norm ? "_norm" : "") + (c.biases ? "_biases" : "");
}

void PrintTo(const Case& c, std::ostream* os) { *os << describe(c); }

class GatedLinearTest : public ::testing::TestWithParam<Case> {};

TEST_P(GatedLinearTest, MatchesReference) {
  const Case& c = GetParam();
  if (!is_available(c.device)) GTEST_SKIP() << "no " << c.device << " device present: skipped";
  const Device device = c.device == "cuda" ? Device{"cuda", 0} : kCpu;
  const int64_t m = c.rows, k = c.hidden, n = c.out;
  const float eps = 1e-5f;
  const std::vector<float> x = random_values(static_cast<size_t>(m * k), 21, -2.f, 2.f);
  const std::vector<float> w_gate =
      rounded(random_values(static_cast<size_t>(n * k), 22), c.weights);
  const std::vector<float> w_up = rounded(random_values(static_cast<size_t>(n * k), 23), c.weights);
  const std::vector<float> b_gate = random_values(static_cast<size_t>(n), 24);
  const std::vector<float> b_up = random_values(static_cast<size_t>(n), 25);
  const std::vector<float> norm = random_values(static_cast<size_t>(k), 26, 0.5f, 1.5f);

  graph::Builder g;
  const auto matrix = [&](const std::vector<float>& v) {
    return Tensor::from_vector<float>(v, {n, k}).to(c.weights);
  };
  const auto vector = [&](const std::vector<float>& v) {
    return Tensor::from_vector<float>(v, {static_cast<int64_t>(v.size())});
  };
  const ValueId xv = g.input("x", {m, k}, DType::f32);
  const ValueId hv = c.norm ? g.rms_norm(xv, g.weight("norm", vector(norm)), eps) : xv;
  const ValueId gate_rows = g.linear(hv, g.weight("w_gate", matrix(w_gate)),
                                     c.biases ? g.weight("b_gate", vector(b_gate)) : -1);
  const ValueId up_rows =
      g.linear(hv, g.weight("w_up", matrix(w_up)), c.biases ? g.weight("b_up", vector(b_up)) : -1);
  g.output(g.mul(g.silu(gate_rows), up_rows));
  const graph::Graph graph = g.finish();
  if (c.device == "cpu") {
    const fusion::Plan plan = cpu::cpu_plan(graph);
    ASSERT_EQ(plan.schedule.size(), 1u) << "one step: the fused product, normed or not";
    EXPECT_EQ(plan.graph.nodes[static_cast<size_t>(plan.schedule[0])].op, graph::Op::kGatedLinear);
  }

  std::vector<float> h = x;
  if (c.norm) ops::reference::rms_norm(x.data(), norm.data(), m, k, eps, h.data());
  // Bf16 products of more than 8 rows read the activations rounded to bf16 too: CUDA's
  // (tensor-core tiles, cuBLASLt), and the CPU's where it has native bf16 dot products (from 5 rows
  // where it has AVX512_BF16).
  const bool rounds =
      c.device == "cuda" ? m > 8 : cpu::reads_rounded_activations(m, cpu::big_products_path());
  if (rounds && c.weights == DType::bf16) h = rounded(h, DType::bf16);
  std::vector<float> gate(static_cast<size_t>(m * n)), up(gate.size()), want(gate.size());
  ops::reference::linear(h.data(), w_gate.data(), c.biases ? b_gate.data() : nullptr, m, n, k,
                         gate.data());
  ops::reference::linear(h.data(), w_up.data(), c.biases ? b_up.data() : nullptr, m, n, k,
                         up.data());
  for (size_t i = 0; i < want.size(); ++i) want[i] = gate[i] / (1.f + std::exp(-gate[i])) * up[i];

  graph::Backend& backend = graph::backend_for(device);
  const auto executable = backend.compile(graph);
  const std::vector<Tensor> inputs{Tensor::from_vector<float>(x, {m, k})};
  expect_close(executable->run(inputs).outputs.at(0).to_f32_vector(), want, 3e-5f, "compiled");
  expect_close(backend.run_eager(graph, inputs).at(0).to_f32_vector(), want, 3e-5f, "eager");
}

std::vector<Case> cases() {
  std::vector<Case> all;
  for (const std::string device : {"cpu", "cuda"}) {
    all.push_back({device, 3, 64, 40, DType::bf16, true, false});
    all.push_back({device, 1, 24, 9, DType::f32, true, true});   // k % 8 == 0, odd columns
    all.push_back({device, 2, 20, 7, DType::bf16, true, true});  // k % 8 != 0
    all.push_back({device, 11, 64, 40, DType::bf16, true, false});
    all.push_back({device, 11, 64, 40, DType::f32, false, true});
    all.push_back({device, 11, 64, 48, DType::bf16, true, true});
    all.push_back({device, 16, 128, 32, DType::bf16, false, false});
  }
  return all;
}

INSTANTIATE_TEST_SUITE_P(Devices, GatedLinearTest, ::testing::ValuesIn(cases()),
                         [](const ::testing::TestParamInfo<Case>& info) {
                           return describe(info.param);
                         });

}  // namespace
}  // namespace tfm
