// The products training builds with graph::Builder::autocast_linear (attention's q, k and v, the
// MLP's gate and up, the output layer): under bf16 autocast they come out in bf16, as
// torch.autocast's do, and the norms, RoPE, the SiLU gating and the loss widen them as they load
// them; without autocast they stay f32. Likewise the gating's input gradient
// (ops::linear_backward) and the two gradients the gating passes on. On each backend (CUDA skipped,
// and said so, where absent), compiled and eager, against the closed forms summed in double (from
// the products rounded to bf16 where their output is).
#include <gtest/gtest.h>

#include <cmath>

#include "backends/cpu/cpu_backend.h"
#include "graph/backend.h"
#include "graph/builder.h"
#include "graph/effects.h"
#include "ops/reference.h"
#include "support/device_operands.h"
#include "support/random_values.h"

namespace tfm {
namespace {

using testing::expect_close;
using testing::random_values;
using testing::rounded;

constexpr int64_t kRows = 10, kIn = 24, kOut = 16;

// x [rows, in] · w [out, in]^T, summed in double.
std::vector<float> product(const std::vector<float>& x, const std::vector<float>& w,
                           int64_t rows = kRows, int64_t in = kIn, int64_t out = kOut) {
  std::vector<float> y(static_cast<size_t>(rows * out));
  for (int64_t r = 0; r < rows; ++r) {
    for (int64_t n = 0; n < out; ++n) {
      double sum = 0;
      for (int64_t k = 0; k < in; ++k) sum += double{x[r * in + k]} * w[n * in + k];
      y[r * out + n] = static_cast<float>(sum);
    }
  }
  return y;
}

// Runs g compiled, then eagerly, on the case's device: check(outputs, "compiled" or "eager").
template <typename Check>
void compiled_and_eager(const testing::DeviceOperands& c, const graph::Graph& g,
                        const std::vector<Tensor>& inputs, Check check) {
  graph::Backend& backend = graph::backend_for(testing::device_of(c));
  for (const bool eager : {false, true}) {
    check(eager ? backend.run_eager(g, inputs) : backend.compile(g)->run(inputs).outputs,
          std::string(eager ? "eager" : "compiled"));
  }
}

class AutocastProductsTest : public ::testing::TestWithParam<testing::DeviceOperands> {};

TEST_P(AutocastProductsTest, GateAndUpComeOutInTheAutocastDtype) {
  const testing::DeviceOperands& c = GetParam();
  if (!is_available(c.device)) GTEST_SKIP() << "no " << c.device << " device present";
  const std::vector<float> x_values = random_values(kRows * kIn, 40),
                           gate_w = random_values(kOut * kIn, 41),
                           up_w = random_values(kOut * kIn, 42);
  graph::Builder b;
  b.autocast(c.operands);
  const auto x = b.input("x", {2, kRows / 2, kIn}, DType::f32);
  const auto gate =
      b.autocast_linear(x, b.weight("gate", Tensor::from_vector<float>(gate_w, {kOut, kIn})));
  const auto up =
      b.autocast_linear(x, b.weight("up", Tensor::from_vector<float>(up_w, {kOut, kIn})));
  b.output(gate);
  b.output(b.mul(b.silu(gate), up));
  const graph::Graph g = b.finish();
  EXPECT_EQ(g.nodes[static_cast<size_t>(gate)].dtype, c.operands);

  // The products read x and the weights as the backend holds them, and write their dtype.
  const std::vector<float> x_read = rounded(x_values, c.operands);
  const std::vector<float> gate_want =
                               rounded(product(x_read, rounded(gate_w, c.operands)), c.operands),
                           up_want =
                               rounded(product(x_read, rounded(up_w, c.operands)), c.operands);
  std::vector<float> gated_want(gate_want.size());
  for (size_t i = 0; i < gated_want.size(); ++i) {
    const double v = gate_want[i];
    gated_want[i] = static_cast<float>(v / (1 + std::exp(-v)) * up_want[i]);
  }
  // bf16: the product accumulates in f32 before it rounds, so it may land one bf16 step away from
  // the double sum's rounding; f32: the order of the sum.
  const float tol = c.operands == DType::f32 ? 1e-5f : 1e-2f;
  compiled_and_eager(c, g, {Tensor::from_vector<float>(x_values, {2, kRows / 2, kIn})},
                     [&](const std::vector<Tensor>& out, const std::string& how) {
                       EXPECT_EQ(out[0].dtype(), c.operands) << how;
                       expect_close(out[0].to(kCpu).to_f32_vector(), gate_want, tol, how + " gate");
                       expect_close(out[1].to(kCpu).to_f32_vector(), gated_want, tol,
                                    how + " silu(gate) * up");
                     });
}

// A product wider than the CPU's block of columns (4M floats over its rows: two blocks here), with
// rows of an odd number of bf16 values (cuBLASLt's D rows 2-byte aligned).
TEST_P(AutocastProductsTest, AWideProductComesOutWhole) {
  const testing::DeviceOperands& c = GetParam();
  if (!is_available(c.device)) GTEST_SKIP() << "no " << c.device << " device present";
  constexpr int64_t kWideRows = 600, kWideIn = 8, kWideOut = 7001;
  const std::vector<float> x_values = random_values(kWideRows * kWideIn, 45),
                           w_values = random_values(kWideOut * kWideIn, 46);
  graph::Builder b;
  b.autocast(c.operands);
  const auto x = b.input("x", {kWideRows, kWideIn}, DType::f32);
  b.output(b.autocast_linear(
      x, b.weight("w", Tensor::from_vector<float>(w_values, {kWideOut, kWideIn}))));
  const graph::Graph g = b.finish();
  const std::vector<float> want =
      rounded(product(rounded(x_values, c.operands), rounded(w_values, c.operands), kWideRows,
                      kWideIn, kWideOut),
              c.operands);
  const float tol = c.operands == DType::f32 ? 1e-5f : 1e-2f;
  const std::vector<Tensor> out =
      graph::backend_for(testing::device_of(c))
          .compile(g)
          ->run({Tensor::from_vector<float>(x_values, {kWideRows, kWideIn})}).outputs;
  expect_close(out[0].to(kCpu).to_f32_vector(), want, tol, "wide product");
}

// An input gradient written in bf16 (ops::linear_backward: the MLP gating's), from bf16 dy and
// weights, rounded once from the f32 product.
TEST_P(AutocastProductsTest, AnInputGradientComesOutInTheOperandsDtype) {
  const testing::DeviceOperands& c = GetParam();
  if (!is_available(c.device)) GTEST_SKIP() << "no " << c.device << " device present";
  const std::vector<float> dy_values = random_values(kRows * kOut, 47),
                           w_values = random_values(kOut * kIn, 48);
  graph::Builder b;
  const auto dy = b.input("dy", {2, kRows / 2, kOut}, DType::f32);
  const auto w = b.weight("w", Tensor::from_vector<float>(w_values, {kOut, kIn}));
  const auto operand = [&](graph::ValueId v) {
    return c.operands == DType::f32 ? v : b.cast(v, c.operands);
  };
  b.output(b.linear_grad_input(operand(dy), operand(w), c.operands));
  const graph::Graph g = b.finish();
  // dy [rows, out] · w [out, in] is x · w^T with w^T's rows.
  std::vector<float> w_t(w_values.size());
  for (int64_t n = 0; n < kOut; ++n) {
    for (int64_t k = 0; k < kIn; ++k) w_t[k * kOut + n] = w_values[n * kIn + k];
  }
  const std::vector<float> want =
      rounded(product(rounded(dy_values, c.operands), rounded(w_t, c.operands), kRows, kOut, kIn),
              c.operands);
  const float tol = c.operands == DType::f32 ? 1e-5f : 1e-2f;
  compiled_and_eager(c, g, {Tensor::from_vector<float>(dy_values, {2, kRows / 2, kOut})},
                     [&](const std::vector<Tensor>& out, const std::string& how) {
                       EXPECT_EQ(out[0].dtype(), c.operands) << how;
                       expect_close(out[0].to(kCpu).to_f32_vector(), want, tol, how + " dy w");
                     });
}

// The MLP gating's two input gradients, dy silu(gate) and silu'(gate) (dy up), from dy, gate and
// up in the operands' dtype (under autocast: products' outputs), each written in that dtype for
// the products that read it: compiled, one step computes both (graph::pair_elementwise_siblings)
// and each widening or narrowing cast folds into it.
TEST_P(AutocastProductsTest, TheGatingsTwoGradientsComeOutOfOneStep) {
  const testing::DeviceOperands& c = GetParam();
  if (!is_available(c.device)) GTEST_SKIP() << "no " << c.device << " device present";
  const Shape shape{2, kRows / 2, kOut};
  const std::vector<float> gate_v = rounded(random_values(kRows * kOut, 52, -4.f, 4.f), c.operands),
                           up_v = rounded(random_values(kRows * kOut, 53), c.operands),
                           dy_v = rounded(random_values(kRows * kOut, 54), c.operands);
  graph::Builder b;
  const auto read = [&](const char* name) {
    const auto v = b.input(name, shape, c.operands);
    return c.operands == DType::f32 ? v : b.cast(v, DType::f32);
  };
  const auto written = [&](graph::ValueId v) {
    return c.operands == DType::f32 ? v : b.cast(v, c.operands);
  };
  const auto gate = read("gate"), up = read("up"), dy = read("dy");
  b.output(written(b.mul(dy, b.silu(gate))));
  b.output(written(b.silu_grad(gate, b.mul(dy, up))));
  const graph::Graph g = b.finish();
  const fusion::Plan plan = cpu::cpu_plan(g);
  // The other steps are views and reshapes (the folded casts) of its buffer.
  std::vector<const graph::Node*> steps;
  for (graph::ValueId id : plan.schedule) {
    const graph::Node& n = plan.graph.nodes[static_cast<size_t>(id)];
    if (!graph::aliases_input(n)) steps.push_back(&n);
  }
  ASSERT_EQ(steps.size(), 1u);
  EXPECT_EQ(steps[0]->program.results, 2);

  std::vector<float> d_up(gate_v.size()), d_gate(gate_v.size());
  for (size_t i = 0; i < gate_v.size(); ++i) {
    const double x = gate_v[i], sigmoid = 1 / (1 + std::exp(-x));
    d_up[i] = static_cast<float>(dy_v[i] * x * sigmoid);
    d_gate[i] = static_cast<float>(double{dy_v[i]} * up_v[i] * sigmoid * (1 + x * (1 - sigmoid)));
  }
  const float tol = c.operands == DType::f32 ? 1e-5f : 1e-2f;
  const auto as_input = [&](const std::vector<float>& v) {
    return Tensor::from_vector<float>(v, shape).to(c.operands);
  };
  compiled_and_eager(c, g, {as_input(gate_v), as_input(up_v), as_input(dy_v)},
                     [&](const std::vector<Tensor>& out, const std::string& how) {
                       EXPECT_EQ(out[0].dtype(), c.operands) << how;
                       expect_close(out[0].to(kCpu).to_f32_vector(), rounded(d_up, c.operands), tol,
                                    how + " dy silu(gate)");
                       expect_close(out[1].to(kCpu).to_f32_vector(), rounded(d_gate, c.operands),
                                    tol, how + " silu'(gate) dy up");
                     });
}

// Attention's q (or k) under autocast: its product written in bf16, as torch.autocast's, then
// each head normed and rotated (Qwen3's q_norm; compiled, graph::fuse_norms_into_rope runs both
// in one step) or only rotated (Llama), each step reading the bf16 values as they are.
TEST_P(AutocastProductsTest, HeadsAreNormedAndRotatedFromTheirProductsDtype) {
  const testing::DeviceOperands& c = GetParam();
  if (!is_available(c.device)) GTEST_SKIP() << "no " << c.device << " device present";
  constexpr int64_t kBatch = 2, kSeq = kRows / 2, kHeads = 2, kDim = kOut / kHeads;
  constexpr float kEps = 1e-6f, kScaling = 0.9f;
  const std::vector<float> x_values = random_values(kRows * kIn, 49),
                           w_values = random_values(kOut * kIn, 50),
                           norm_w = random_values(kDim, 51, 0.5f, 1.5f);
  const std::vector<int32_t> positions = {0, 1, 2, 3, 4, 7, 8, 9, 10, 300};
  std::vector<float> inv_freq(kDim / 2);
  for (size_t f = 0; f < inv_freq.size(); ++f) {
    inv_freq[f] = static_cast<float>(std::pow(10000.0, -2.0 * static_cast<double>(f) / kDim));
  }
  graph::Builder b;
  b.autocast(c.operands);
  const auto x = b.input("x", {kBatch, kSeq, kIn}, DType::f32);
  const auto pos = b.input("positions", {kBatch, kSeq}, DType::i32);
  const auto freq = b.weight("inv_freq", Tensor::from_vector<float>(inv_freq, {kDim / 2}));
  const auto q = b.reshape(
      b.autocast_linear(x, b.weight("q", Tensor::from_vector<float>(w_values, {kOut, kIn}))),
      {kBatch, kSeq, kHeads, kDim});
  const auto norm = b.weight("q_norm", Tensor::from_vector<float>(norm_w, {kDim}));
  b.output(b.rope(b.rms_norm(q, norm, kEps), pos, freq, kScaling));
  b.output(b.rope(q, pos, freq, kScaling));
  const graph::Graph g = b.finish();
  EXPECT_EQ(g.nodes[static_cast<size_t>(q)].dtype, c.operands);

  const std::vector<float> held =
      rounded(product(rounded(x_values, c.operands), rounded(w_values, c.operands)), c.operands);
  std::vector<float> normed(held.size()), normed_want(held.size()), rotated_want(held.size());
  ops::reference::rms_norm(held.data(), norm_w.data(), kRows * kHeads, kDim, kEps, normed.data());
  ops::reference::rope(normed.data(), positions.data(), inv_freq.data(), kBatch, kSeq, kHeads, kDim,
                       kScaling, normed_want.data());
  ops::reference::rope(held.data(), positions.data(), inv_freq.data(), kBatch, kSeq, kHeads, kDim,
                       kScaling, rotated_want.data());
  // bf16: the product may land one bf16 step away from the double sum's rounding.
  const float tol = c.operands == DType::f32 ? 1e-5f : 1e-2f;
  const std::vector<Tensor> inputs{Tensor::from_vector<float>(x_values, {kBatch, kSeq, kIn}),
                                   Tensor::from_vector<int32_t>(positions, {kBatch, kSeq})};
  compiled_and_eager(c, g, inputs, [&](const std::vector<Tensor>& out, const std::string& how) {
    expect_close(out[0].to(kCpu).to_f32_vector(), normed_want, tol, how + " normed and rotated");
    expect_close(out[1].to(kCpu).to_f32_vector(), rotated_want, tol, how + " rotated");
  });
}

// The loss and its gradient over a bf16 output layer's logits, the gradient written over them in
// their dtype.
TEST_P(AutocastProductsTest, TheLossReadsLogitsInTheAutocastDtype) {
  const testing::DeviceOperands& c = GetParam();
  if (!is_available(c.device)) GTEST_SKIP() << "no " << c.device << " device present";
  const std::vector<float> x_values = random_values(kRows * kIn, 43),
                           head = random_values(kOut * kIn, 44, -3.f, 3.f);
  const std::vector<int32_t> targets = {3, 15, graph::kIgnoreIndex, 0, 7, 7, 9, 1, 12, 4};
  const float d_loss = 0.125f;
  graph::Builder b;
  b.autocast(c.operands);
  const auto x = b.input("x", {kRows, kIn}, DType::f32);
  const auto ids = b.input("targets", {kRows}, DType::i32);
  const auto scale = b.input("d_loss", {1}, DType::f32);
  const auto logits =
      b.autocast_linear(x, b.weight("head", Tensor::from_vector<float>(head, {kOut, kIn})));
  b.output(b.cross_entropy(logits, ids));
  b.output(b.cross_entropy_grad(logits, ids, scale, true));
  const graph::Graph g = b.finish();
  EXPECT_TRUE(g.nodes.back().in_place);
  EXPECT_EQ(g.nodes.back().dtype, c.operands);

  const std::vector<float> held =
      rounded(product(rounded(x_values, c.operands), rounded(head, c.operands)), c.operands);
  const double loss_want = ops::reference::cross_entropy(held.data(), targets.data(), kRows, kOut);
  std::vector<float> grad_want(held.size(), 0.f);
  for (int64_t r = 0; r < kRows; ++r) {
    if (targets[r] == graph::kIgnoreIndex) continue;
    double sum = 0;
    for (int64_t v = 0; v < kOut; ++v) sum += std::exp(double{held[r * kOut + v]});
    for (int64_t v = 0; v < kOut; ++v) {
      const double p = std::exp(double{held[r * kOut + v]}) / sum;
      grad_want[r * kOut + v] = static_cast<float>((p - (v == targets[r])) * d_loss);
    }
  }
  const float tol = c.operands == DType::f32 ? 1e-5f : 1e-2f;
  const std::vector<Tensor> inputs{Tensor::from_vector<float>(x_values, {kRows, kIn}),
                                   Tensor::from_vector<int32_t>(targets, {kRows}),
                                   Tensor::from_vector<float>({d_loss}, {1})};
  compiled_and_eager(c, g, inputs, [&](const std::vector<Tensor>& out, const std::string& how) {
    expect_close(out[0].to(kCpu).to_f32_vector(), {static_cast<float>(loss_want)}, tol,
                 how + " loss");
    expect_close(out[1].to(kCpu).to_f32_vector(), grad_want, tol, how + " d logits");
  });
}

INSTANTIATE_TEST_SUITE_P(Devices, AutocastProductsTest, testing::every_device_and_operands(),
                         testing::device_and_operands_name);

}  // namespace
}  // namespace tfm
