// A weight gradient's product added into the buffer where the gradient is kept (a state that
// already holds a sum, as under gradient accumulation): compiled, where graph::fold_accumulations
// makes the product add into the state itself (cuBLASLt's addend on CUDA, oneDNN's beta on the
// CPU), and eager, where a product and an accumulation run apart. f32 operands, and bf16 ones as
// under autocast. Likewise a norm weight's gradient (after RoPE's too), and a tied embedding's. On
// each backend (CUDA skipped, and said so, where absent), against the closed forms summed in
// double.
#include <gtest/gtest.h>

#include <cmath>
#include <string>

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
  const auto compiled = backend.compile(g);
  compiled->run(inputs).outputs;
  compiled->run(inputs).outputs;
  backend.run_eager(g, inputs);
  expect_close(grad.to(kCpu).to_f32_vector(), want, 1e-5f, "start + 3 dy^T x");
}

// RMSNorm's weight gradient added into its state while the input gradient is taken: compiled,
// in one pass over x and dy (graph::fold_norm_weight_grads), dx in f32 and, with bf16 operands,
// its bf16 copy written in the same pass (graph::fold_narrow_copies); eager, as the two steps and
// a cast. x in the operands' dtype, as a bf16 product writes it under autocast
// (q and k before their norms). Rows of 70 values, and of 1100 (more than CUDA's one-pass kernel
// holds in registers: its two kernels in turn). Against the closed forms summed in double.
TEST_P(WeightGradAccumulationTest, NormGradientsAddIntoTheStateEachRun) {
  const testing::DeviceOperands& c = GetParam();
  if (!is_available(c.device)) GTEST_SKIP() << "no " << c.device << " device present";
  const Device device = testing::device_of(c);
  constexpr int64_t kRows = 10;
  constexpr float kEps = 1e-6f;
  for (const int64_t hidden : {70, 1100}) {
    SCOPED_TRACE("hidden " + std::to_string(hidden));
    const std::vector<float> x_values =
                                 rounded(random_values(kRows * hidden, 21, -2.f, 2.f), c.operands),
                             dy_values = random_values(kRows * hidden, 22),
                             w_values = random_values(hidden, 23, 0.5f, 1.5f),
                             start = random_values(hidden, 24);
    graph::Builder b;
    const auto x = b.input("x", {2, kRows / 2, hidden}, c.operands);
    const auto dy = b.input("dy", {2, kRows / 2, hidden}, DType::f32);
    const auto sum = b.state("grad", {hidden}, DType::f32);
    const auto w = b.weight("w", Tensor::from_vector<float>(w_values, {hidden}));
    b.accumulate(sum, b.rms_norm_grad_weight(x, dy, kEps));
    const auto dx = b.rms_norm_grad_input(x, w, dy, kEps);
    b.output(dx);
    if (c.operands != DType::f32) b.output(b.cast(dx, c.operands));
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
    const std::vector<Tensor> inputs{
        Tensor::from_vector<float>(x_values, {2, kRows / 2, hidden}).to(c.operands),
        Tensor::from_vector<float>(dy_values, {2, kRows / 2, hidden}), grad};
    const fusion::Plan plan = cpu::cpu_plan(g);
    for (graph::ValueId id : plan.schedule) {
      const graph::Op op = plan.graph.nodes[static_cast<size_t>(id)].op;
      EXPECT_TRUE(op != graph::Op::kRmsNormGradWeight && op != graph::Op::kCast)
          << "the weight gradient and the bf16 copy are the input gradient step's";
    }
    const auto compiled = backend.compile(g);
    compiled->run(inputs).outputs;
    const std::vector<Tensor> got = compiled->run(inputs).outputs;
    backend.run_eager(g, inputs);
    expect_close(grad.to(kCpu).to_f32_vector(), want_sum, 1e-5f, "start + 3 dw");
    const Tensor got_dx = got[0].to(kCpu);
    expect_close(got_dx.to_f32_vector(), want_dx, 1e-5f, "dx");
    if (c.operands != DType::f32) {
      EXPECT_EQ(got[1].to(kCpu).to_f32_vector(), got_dx.to(c.operands).to_f32_vector())
          << "the copy is dx rounded once";
      expect_close(got[1].to(kCpu).to_f32_vector(), want_dx, 1.f / 128, "dx's bf16 copy");
    }
  }
}

// Qwen3's q_norm and k_norm in the backward pass: RoPE's gradient, then the per-head norm's input
// and weight gradients. Compiled (graph::fuse_rope_grads_into_norm_grads) the norm's step rotates
// dy back as it loads it: on CUDA in registers for heads of 128, through scratch for heads of 64.
// x and dy in the operands' dtype, as q's product and attention's backward write them under
// autocast. Against the closed forms in double (the angle formed in f32, as PyTorch's).
TEST_P(WeightGradAccumulationTest, RotatedNormGradientsAddIntoTheStateEachRun) {
  const testing::DeviceOperands& c = GetParam();
  if (!is_available(c.device)) GTEST_SKIP() << "no " << c.device << " device present";
  const Device device = testing::device_of(c);
  constexpr int64_t kBatch = 2, kSeq = 3, kHeads = 2;
  constexpr float kEps = 1e-6f, kScaling = 0.9f;
  const std::vector<int32_t> positions = {0, 5, 9, 2, 3, 700};
  for (const int64_t dim : {128, 64}) {
    SCOPED_TRACE("head_dim " + std::to_string(dim));
    const int64_t half = dim / 2, rows = kBatch * kSeq * kHeads;
    const std::vector<float> x_values =
                                 rounded(random_values(rows * dim, 41, -2.f, 2.f), c.operands),
                             dy_values = rounded(random_values(rows * dim, 42), c.operands),
                             w_values = random_values(dim, 43, 0.5f, 1.5f),
                             start = random_values(dim, 44);
    std::vector<float> inv_freq(static_cast<size_t>(half));
    for (int64_t f = 0; f < half; ++f) {
      inv_freq[f] = static_cast<float>(std::pow(10000.0, -2.0 * static_cast<double>(f) / dim));
    }
    const Shape shape{kBatch, kSeq, kHeads, dim};
    graph::Builder b;
    const auto x = b.input("x", shape, c.operands);
    const auto dy = b.input("dy", shape, c.operands);
    const auto pos = b.input("positions", {kBatch, kSeq}, DType::i32);
    const auto sum = b.state("grad", {dim}, DType::f32);
    const auto w = b.weight("w", Tensor::from_vector<float>(w_values, {dim}));
    const auto freq = b.weight("inv_freq", Tensor::from_vector<float>(inv_freq, {half}));
    const auto d_rope = b.rope_grad(dy, pos, freq, kScaling);
    b.accumulate(sum, b.rms_norm_grad_weight(x, d_rope, kEps));
    const auto dx = b.rms_norm_grad_input(x, w, d_rope, kEps);
    b.output(c.operands == DType::f32 ? dx : b.cast(dx, c.operands));
    const graph::Graph g = b.finish();

    std::vector<float> want_dx(x_values.size()), want_sum(start.size());
    std::vector<double> dw(static_cast<size_t>(dim), 0.0), g_row(static_cast<size_t>(dim));
    for (int64_t r = 0; r < rows; ++r) {
      const float* xr = x_values.data() + r * dim;
      const float* dyr = dy_values.data() + r * dim;
      for (int64_t f = 0; f < half; ++f) {
        const float angle = static_cast<float>(positions[r / kHeads]) * inv_freq[f];
        const double cs = std::cos(double{angle}) * kScaling,
                     sn = std::sin(double{angle}) * kScaling;
        g_row[f] = dyr[f] * cs + dyr[f + half] * sn;
        g_row[f + half] = dyr[f + half] * cs - dyr[f] * sn;
      }
      double sum_sq = 0, dot = 0;
      for (int64_t i = 0; i < dim; ++i) {
        sum_sq += double{xr[i]} * xr[i];
        dot += w_values[i] * g_row[i] * xr[i];
      }
      const double inv_rms = 1.0 / std::sqrt(sum_sq / static_cast<double>(dim) + kEps);
      const double coef = inv_rms * inv_rms * inv_rms * dot / static_cast<double>(dim);
      for (int64_t i = 0; i < dim; ++i) {
        want_dx[r * dim + i] = static_cast<float>(inv_rms * w_values[i] * g_row[i] - xr[i] * coef);
        dw[i] += g_row[i] * xr[i] * inv_rms;
      }
    }
    for (int64_t i = 0; i < dim; ++i) want_sum[i] = static_cast<float>(start[i] + 3 * dw[i]);

    const fusion::Plan plan = cpu::cpu_plan(g);
    for (graph::ValueId id : plan.schedule) {
      const graph::Op op = plan.graph.nodes[static_cast<size_t>(id)].op;
      EXPECT_TRUE(op != graph::Op::kRopeGrad && op != graph::Op::kRmsNormGradWeight)
          << plan.graph.describe(id);
    }
    graph::Backend& backend = graph::backend_for(device);
    const Tensor grad = Tensor::from_vector<float>(start, {dim}).to(device);
    const std::vector<Tensor> inputs{Tensor::from_vector<float>(x_values, shape).to(c.operands),
                                     Tensor::from_vector<float>(dy_values, shape).to(c.operands),
                                     Tensor::from_vector<int32_t>(positions, {kBatch, kSeq}), grad};
    const auto compiled = backend.compile(g);
    compiled->run(inputs).outputs;
    const std::vector<Tensor> got = compiled->run(inputs).outputs;
    backend.run_eager(g, inputs);
    expect_close(grad.to(kCpu).to_f32_vector(), want_sum, 1e-4f, "start + 3 dw");
    expect_close(got[0].to(kCpu).to_f32_vector(), want_dx,
                 c.operands == DType::f32 ? 1e-4f : 1.f / 128, "dx");
  }
}

// A tied embedding's gradient: the output layer's products over two loss chunks (the second adding
// into the first) plus the embedding's rows, their sum added into the state. Compiled
// (graph::fold_summed_accumulations), each term adds into the state where it runs, with no
// buffer of its own, no sum and no accumulation step; eager, as built.
TEST_P(WeightGradAccumulationTest, TiedGradientsAddIntoTheStateEachRun) {
  const testing::DeviceOperands& c = GetParam();
  if (!is_available(c.device)) GTEST_SKIP() << "no " << c.device << " device present";
  const Device device = testing::device_of(c);
  constexpr int64_t kVocab = 9, kHidden = 12, kChunk = 5, kTokens = 8;
  const std::vector<float> dy1 = random_values(kChunk * kVocab, 31),
                           x1 = random_values(kChunk * kHidden, 32),
                           dy2 = random_values(kChunk * kVocab, 33),
                           x2 = random_values(kChunk * kHidden, 34),
                           rows = random_values(kTokens * kHidden, 35),
                           start = random_values(kVocab * kHidden, 36);
  const std::vector<int32_t> ids = {3, 0, 8, 3, 5, 3, 1, 8};
  graph::Builder b;
  const auto dy1_in = b.input("dy1", {kChunk, kVocab}, DType::f32);
  const auto x1_in = b.input("x1", {kChunk, kHidden}, DType::f32);
  const auto dy2_in = b.input("dy2", {kChunk, kVocab}, DType::f32);
  const auto x2_in = b.input("x2", {kChunk, kHidden}, DType::f32);
  const auto rows_in = b.input("rows", {2, kTokens / 2, kHidden}, DType::f32);
  const auto ids_in = b.input("ids", {2, kTokens / 2}, DType::i32);
  const auto sum = b.state("grad", {kVocab, kHidden}, DType::f32);
  const auto operand = [&](graph::ValueId v) {
    return c.operands == DType::f32 ? v : b.cast(v, c.operands);
  };
  const auto head = b.accumulate(b.linear_grad_weight(operand(dy1_in), operand(x1_in)),
                                 b.linear_grad_weight(operand(dy2_in), operand(x2_in)));
  b.accumulate(sum, b.add(b.embedding_grad(rows_in, ids_in, kVocab), head));
  b.output(b.reduce_rows(x1_in));
  const graph::Graph g = b.finish();

  const fusion::Plan plan = cpu::cpu_plan(g);
  for (graph::ValueId id : plan.schedule) {
    const graph::Op op = plan.graph.nodes[static_cast<size_t>(id)].op;
    EXPECT_TRUE(op != graph::Op::kAccumulate && op != graph::Op::kElementwise)
        << plan.graph.describe(id);
  }

  const std::vector<float> dy1_read = rounded(dy1, c.operands), x1_read = rounded(x1, c.operands),
                           dy2_read = rounded(dy2, c.operands), x2_read = rounded(x2, c.operands);
  std::vector<double> once(start.size(), 0.0);
  for (int64_t r = 0; r < kChunk; ++r) {
    for (int64_t v = 0; v < kVocab; ++v) {
      for (int64_t h = 0; h < kHidden; ++h) {
        once[v * kHidden + h] += double{dy1_read[r * kVocab + v]} * x1_read[r * kHidden + h] +
                                 double{dy2_read[r * kVocab + v]} * x2_read[r * kHidden + h];
      }
    }
  }
  for (int64_t t = 0; t < kTokens; ++t) {
    for (int64_t h = 0; h < kHidden; ++h) once[ids[t] * kHidden + h] += rows[t * kHidden + h];
  }
  std::vector<float> want(start.size());
  for (size_t i = 0; i < want.size(); ++i) want[i] = static_cast<float>(start[i] + 3 * once[i]);

  graph::Backend& backend = graph::backend_for(device);
  const Tensor grad = Tensor::from_vector<float>(start, {kVocab, kHidden}).to(device);
  const std::vector<Tensor> inputs{Tensor::from_vector<float>(dy1, {kChunk, kVocab}),
                                   Tensor::from_vector<float>(x1, {kChunk, kHidden}),
                                   Tensor::from_vector<float>(dy2, {kChunk, kVocab}),
                                   Tensor::from_vector<float>(x2, {kChunk, kHidden}),
                                   Tensor::from_vector<float>(rows, {2, kTokens / 2, kHidden}),
                                   Tensor::from_vector<int32_t>(ids, {2, kTokens / 2}),
                                   grad};
  const auto compiled = backend.compile(g);
  compiled->run(inputs).outputs;
  compiled->run(inputs).outputs;
  backend.run_eager(g, inputs);
  expect_close(grad.to(kCpu).to_f32_vector(), want, 1e-5f, "start + 3 (head + rows)");
}

INSTANTIATE_TEST_SUITE_P(Devices, WeightGradAccumulationTest, testing::every_device_and_operands(),
                         testing::device_and_operands_name);

}  // namespace
}  // namespace tfm
