// The compiler: elementwise fusion (unary values copied into the chains that read them), norms
// fused into RoPE, residuals added by norm gradients, casts shared and folded (widening casts
// that only elementwise chains read dropped), accumulations
// folded into their products, norm weight gradients into the input gradients, loss gradients
// written by the loss steps, arena planning, and compiled == eager.
#include <gtest/gtest.h>

#include <cmath>
#include <utility>
#include <vector>

#include "backends/cpu/cpu_backend.h"
#include "graph/backend.h"
#include "graph/builder.h"
#include "graph/cache.h"
#include "ops/autodiff.h"
#include "support/fixtures.h"
#include "support/random_values.h"
#include "tfm/log.h"
#include "tfm/model.h"

namespace tfm {
namespace {

using graph::Op;

graph::Graph mlp_like_graph() {
  graph::Builder b;
  const auto x = b.input("x", {4, 8}, DType::f32);
  const auto w = b.weight("w", Tensor::zeros({8, 8}, DType::f32));
  const auto gate = b.linear(x, w);
  const auto up = b.linear(x, w);
  const auto h = b.mul(b.silu(gate), up);
  b.output(b.add(h, x));
  return b.finish();
}

// How many of the plan's steps `holds` is true of.
template <typename Predicate>
int steps_where(const fusion::Plan& plan, Predicate holds) {
  int count = 0;
  for (graph::ValueId id : plan.schedule) count += holds(plan.graph.nodes[static_cast<size_t>(id)]);
  return count;
}

bool is(const graph::Node& n, Op op) { return n.op == op; }
bool bf16(const graph::Node& n) { return n.dtype == DType::bf16; }

// Runs the plan, and the graph eagerly, on the CPU: every output the same bits.
void expect_same_as_eager(const graph::Graph& g, const fusion::Plan& plan,
                          const std::vector<Tensor>& in) {
  graph::Backend& cpu = graph::backend_for(kCpu);
  const std::vector<Tensor> compiled = cpu::cpu_executable(plan)->run(in).outputs;
  const std::vector<Tensor> eager = cpu.run_eager(g, in);
  ASSERT_EQ(compiled.size(), eager.size());
  for (size_t i = 0; i < eager.size(); ++i) {
    EXPECT_EQ(compiled[i].to_f32_vector(), eager[i].to_f32_vector()) << "output " << i;
  }
}

// A reshape is its input's buffer: bf16 values stay bf16 (read as f32 they would be garbage).
TEST(Compile, AReshapeHasItsInputsDtype) {
  graph::Builder b;
  const auto x = b.input("x", {2, 6}, DType::bf16);
  const auto reshaped = b.reshape(x, {3, 4});
  EXPECT_EQ(b.node(reshaped).dtype, DType::bf16);
  b.output(b.cast(reshaped, DType::f32));
  const graph::Graph g = b.finish();
  const std::vector<float> values = testing::random_values(12, 22);
  const Tensor in = Tensor::from_vector<float>(values, {2, 6}).to(DType::bf16);
  const std::vector<float> want = testing::rounded(values, DType::bf16);
  graph::Backend& cpu = graph::backend_for(kCpu);
  EXPECT_EQ(cpu.compile(g)->run({in}).outputs[0].to_f32_vector(), want);
  EXPECT_EQ(cpu.run_eager(g, {in})[0].to_f32_vector(), want);
}

// A bf16 value widened only for elementwise chains is read by them as it is; one that something
// else reads too (here an output) keeps its cast. The same bits as eager, which runs the casts.
TEST(Compile, ElementwiseChainsReadBf16ValuesWithoutAWideningCast) {
  graph::Builder b;
  const auto narrow = b.input("narrow", {3, 4}, DType::bf16);
  const auto shared = b.input("shared", {3, 4}, DType::bf16);
  const auto y = b.input("y", {3, 4}, DType::f32);
  b.output(b.mul(b.silu(b.cast(narrow, DType::f32)), y));
  const auto widened = b.cast(shared, DType::f32);
  b.output(b.add(widened, y));
  b.output(widened);
  const graph::Graph g = b.finish();

  const fusion::Plan plan = cpu::cpu_plan(g);
  EXPECT_EQ(steps_where(plan, [](const graph::Node& n) { return is(n, Op::kCast); }), 1);
  const std::vector<float> narrow_values = testing::random_values(12, 23),
                           y_values = testing::random_values(12, 24);
  const std::vector<Tensor> in{
      Tensor::from_vector<float>(narrow_values, {3, 4}).to(DType::bf16),
      Tensor::from_vector<float>(testing::random_values(12, 25), {3, 4}).to(DType::bf16),
      Tensor::from_vector<float>(y_values, {3, 4})};
  expect_same_as_eager(g, plan, in);
  const std::vector<float> read = testing::rounded(narrow_values, DType::bf16);
  std::vector<float> want(12);
  for (size_t i = 0; i < want.size(); ++i) {
    want[i] = static_cast<float>(read[i] / (1 + std::exp(-double{read[i]})) * y_values[i]);
  }
  testing::expect_close(cpu::cpu_executable(plan)->run(in).outputs[0].to_f32_vector(), want, 1e-6f,
                        "silu(narrow) * y");
}

TEST(Compile, FusesElementwiseChainIntoOneNode) {
  const fusion::Plan plan = cpu::cpu_plan(mlp_like_graph());
  EXPECT_EQ(steps_where(plan, [](const graph::Node& n) { return is(n, Op::kElementwise); }), 1)
      << "silu, mul and add should run as one fused node";
}

// SiLU of a value read by two elementwise chains runs inside each (as in the MLP's backward pass);
// one that a product also reads is written once, and each chain reads it.
TEST(Compile, AUnaryValueOnlyElementwiseChainsReadRunsInsideEach) {
  graph::Builder b;
  const auto x = b.input("x", {4, 8}, DType::f32);
  const auto y = b.input("y", {4, 8}, DType::f32);
  const auto w = b.weight("w", Tensor::from_vector<float>(testing::random_values(64, 2), {8, 8}));
  const auto copied = b.silu(x);
  b.output(b.mul(copied, y));
  b.output(b.add(copied, b.mul(y, y)));
  const auto shared = b.silu(y);
  b.output(b.mul(shared, x));
  b.output(b.linear(shared, w));
  const graph::Graph g = b.finish();

  const fusion::Plan plan = cpu::cpu_plan(g);
  EXPECT_EQ(steps_where(plan, [](const graph::Node& n) { return is(n, Op::kElementwise); }), 3)
      << "two chains with silu(x) inside (one step of two results: pair_elementwise_siblings), "
         "silu(y), and the chain reading it";

  const Tensor x_in = Tensor::from_vector<float>(testing::random_values(32, 5), {4, 8});
  const Tensor y_in = Tensor::from_vector<float>(testing::random_values(32, 6), {4, 8});
  expect_same_as_eager(g, plan, {x_in, y_in});
}

// The MLP gating's two gradients, dy silu(gate) and silu'(gate) (dy up), run as one step of two
// results that reads dy and gate once. A chain sharing no input with them, and one whose input is
// computed after them (a product's), keep steps of their own.
TEST(Compile, SiblingChainsRunAsOneStepOfTwoResults) {
  constexpr int64_t kRows = 3, kCols = 10;
  graph::Builder b;
  const auto gate = b.input("gate", {kRows, kCols}, DType::f32);
  const auto up = b.input("up", {kRows, kCols}, DType::f32);
  const auto dy = b.input("dy", {kRows, kCols}, DType::f32);
  const auto other = b.input("other", {kRows, kCols}, DType::f32);
  const auto w =
      b.weight("w", Tensor::from_vector<float>(testing::random_values(100, 7), {kCols, kCols}));
  b.output(b.mul(dy, b.silu(gate)));
  b.output(b.silu_grad(gate, b.mul(dy, up)));
  b.output(b.silu(other));
  b.output(b.mul(b.linear(dy, w), gate));
  const graph::Graph g = b.finish();

  const fusion::Plan plan = cpu::cpu_plan(g);
  EXPECT_EQ(steps_where(plan,
                        [](const graph::Node& n) {
                          return is(n, Op::kElementwise) && n.program.results == 2;
                        }),
            1);
  EXPECT_EQ(steps_where(plan, [](const graph::Node& n) { return is(n, Op::kElementwise); }), 3);

  const std::vector<float> gate_v = testing::random_values(kRows * kCols, 8, -4.f, 4.f),
                           up_v = testing::random_values(kRows * kCols, 9),
                           dy_v = testing::random_values(kRows * kCols, 10),
                           other_v = testing::random_values(kRows * kCols, 11);
  std::vector<float> d_up(gate_v.size()), d_gate(gate_v.size());
  for (size_t i = 0; i < gate_v.size(); ++i) {
    const double x = gate_v[i], sigmoid = 1 / (1 + std::exp(-x));
    d_up[i] = static_cast<float>(dy_v[i] * x * sigmoid);
    d_gate[i] = static_cast<float>(double{dy_v[i]} * up_v[i] * sigmoid * (1 + x * (1 - sigmoid)));
  }
  const std::vector<Tensor> in{Tensor::from_vector<float>(gate_v, {kRows, kCols}),
                               Tensor::from_vector<float>(up_v, {kRows, kCols}),
                               Tensor::from_vector<float>(dy_v, {kRows, kCols}),
                               Tensor::from_vector<float>(other_v, {kRows, kCols})};
  const std::vector<Tensor> out = cpu::cpu_executable(plan)->run(in).outputs;
  testing::expect_close(out[0].to_f32_vector(), d_up, 1e-5f, "dy silu(gate)");
  testing::expect_close(out[1].to_f32_vector(), d_gate, 1e-5f, "silu'(gate) dy up");
  expect_same_as_eager(g, plan, in);
}

TEST(Compile, UnfusedPlanKeepsEveryNode) {
  const fusion::Plan plan = cpu::cpu_plan(mlp_like_graph(), false);
  EXPECT_EQ(plan.schedule.size(), 5u);
}

TEST(Compile, ArenaReusesDeadBuffers) {
  graph::Builder b;
  auto x = b.input("x", {16, 256}, DType::f32);
  for (int i = 0; i < 10; ++i) x = b.silu(b.reshape(x, {16, 256}));
  b.output(x);
  const fusion::Plan plan = cpu::cpu_plan(b.finish(), false);
  const size_t one = 16 * 256 * sizeof(float);
  EXPECT_LE(plan.arena_bytes, 2 * one) << "a chain needs only two live buffers at a time";
}

// Gradients added into where they are kept (effects nothing reads) run as soon as each is made,
// so only one of the ten is alive at a time, not all ten until the end.
TEST(Compile, EffectsRunAsSoonAsTheirInputsExist) {
  graph::Builder b;
  auto x = b.input("x", {16, 256}, DType::f32);
  for (int i = 0; i < 10; ++i) {
    x = b.silu(x);
    b.accumulate(b.state("acc" + std::to_string(i), {16, 256}, DType::f32), b.scale(x, 2.f));
  }
  b.output(b.reduce_rows(x));
  const fusion::Plan plan = cpu::cpu_plan(b.finish(), false);
  const size_t one = 16 * 256 * sizeof(float);
  EXPECT_LE(plan.arena_bytes, 4 * one);
}

// An accumulation runs for its effect on a state buffer: compiled and eager, each run adds
// x * 1 and x * 2 into it, and only the declared output comes back.
TEST(Compile, AccumulateAddsIntoTheStateBufferEachRun) {
  graph::Builder b;
  const auto x = b.input("x", {2, 3}, DType::f32);
  const auto acc = b.state("acc", {2, 3}, DType::f32);
  // Two additions into it, the second through the first: both run, though nothing reads them.
  b.accumulate(b.accumulate(acc, b.scale(x, 1.f)), b.scale(x, 2.f));
  b.output(b.reduce_rows(x));
  const graph::Graph g = b.finish();
  const Tensor in = Tensor::from_vector<float>({1, 2, 3, 4, 5, 6}, {2, 3});
  const Tensor sums = Tensor::zeros({2, 3}, DType::f32);
  graph::Backend& cpu = graph::backend_for(kCpu);
  const auto compiled = cpu.compile(g);
  compiled->run({in, sums}).outputs;
  const std::vector<Tensor> out = compiled->run({in, sums}).outputs;
  cpu.run_eager(g, {in, sums});
  EXPECT_EQ(sums.to_f32_vector(), (std::vector<float>{9, 18, 27, 36, 45, 54}));
  ASSERT_EQ(out.size(), 1u);
  EXPECT_EQ(out[0].to_f32_vector(), (std::vector<float>{5, 7, 9}));
}

// Under autocast, products that read one value (q, k and v of one normed row) read one bf16 copy.
TEST(Compile, ProductsSharingAnInputReadOneCast) {
  graph::Builder b;
  b.autocast(DType::bf16);
  const auto x = b.input("x", {4, 8}, DType::f32);
  const auto normed = b.rms_norm(x, b.weight("norm", Tensor::zeros({8}, DType::f32)), 1e-6f);
  for (const char* name : {"q", "k", "v"}) {
    b.output(b.linear(normed, b.weight(name, Tensor::zeros({8, 8}, DType::f32))));
  }
  const graph::Graph g = b.finish();
  int casts_of_normed = 0;
  for (const graph::Node& n : g.nodes)
    casts_of_normed += n.op == Op::kCast && n.inputs[0] == normed;
  EXPECT_EQ(casts_of_normed, 1);
}

// A bf16 cast of a norm or elementwise result that nothing else reads is folded into that op,
// which then writes bf16 itself; one with another reader stays. Compiled (folded) and eager (each
// op as built) agree bit for bit: the op rounds its f32 result once, as the cast did.
TEST(Compile, CastsFoldIntoTheOpsTheyRead) {
  graph::Builder b;
  b.autocast(DType::bf16);
  const auto x = b.input("x", {4, 8}, DType::f32);
  const auto w = b.weight("w", Tensor::from_vector<float>(testing::random_values(64, 3), {8, 8}));
  const auto norm = b.weight("norm", Tensor::from_vector<float>(testing::random_values(8, 4), {8}));
  const auto normed_once = b.rms_norm(x, norm, 1e-6f);
  const auto gated = b.mul(b.silu(x), x);
  const auto normed_twice = b.rms_norm(b.add(x, x), norm, 1e-6f);
  b.output(b.linear(normed_once, w));
  b.output(b.linear(gated, w));
  b.output(b.linear(normed_twice, w));
  b.output(normed_twice);  // read as f32 too: its cast stays
  const graph::Graph g = b.finish();

  const fusion::Plan plan = cpu::cpu_plan(g);
  EXPECT_EQ(steps_where(plan,
                        [](const graph::Node& n) {
                          return is(n, Op::kCast) && n.shape.size() == 2 && n.shape[0] == 4;
                        }),
            1)
      << "only the twice-read norm's activation cast remains";
  EXPECT_EQ(steps_where(plan, [](const graph::Node& n) { return is(n, Op::kRmsNorm) && bf16(n); }),
            1);
  EXPECT_EQ(
      steps_where(plan, [](const graph::Node& n) { return is(n, Op::kElementwise) && bf16(n); }),
      1);

  const Tensor in = Tensor::from_vector<float>(testing::random_values(32, 5), {4, 8});
  expect_same_as_eager(g, cpu::cpu_plan(g), {in});
}

// Values of several blocks (the CPU steps narrow and widen 65536 floats at a time, the threads
// sharing the blocks out, each with buffers of its own), in bf16: a norm and a gating written in
// bf16, and a chain reading bf16 values and writing f32. The same bits as eager, which runs each
// op and cast whole; and the chain as its closed form.
TEST(Compile, Bf16StepsOverManyBlocksMatchEager) {
  constexpr int64_t rows = 1031, cols = 200;  // three blocks and part of a fourth
  constexpr int64_t count = rows * cols;
  graph::Builder b;
  const auto narrow = b.input("narrow", {rows, cols}, DType::bf16);
  const auto y = b.input("y", {rows, cols}, DType::f32);
  b.output(b.mul(b.silu(b.cast(narrow, DType::f32)), y));
  b.autocast(DType::bf16);
  const auto x = b.input("x", {rows, cols}, DType::f32);
  const auto w =
      b.weight("w", Tensor::from_vector<float>(testing::random_values(cols * 8, 3), {8, cols}));
  const auto norm =
      b.weight("norm", Tensor::from_vector<float>(testing::random_values(cols, 4), {cols}));
  b.output(b.linear(b.rms_norm(x, norm, 1e-6f), w));
  b.output(b.linear(b.mul(b.silu(x), x), w));
  const graph::Graph g = b.finish();

  const fusion::Plan plan = cpu::cpu_plan(g);
  EXPECT_EQ(steps_where(plan, [](const graph::Node& n) { return is(n, Op::kRmsNorm) && bf16(n); }),
            1);
  EXPECT_EQ(
      steps_where(plan, [](const graph::Node& n) { return is(n, Op::kElementwise) && bf16(n); }),
      1);
  const std::vector<float> narrow_values = testing::random_values(count, 23),
                           y_values = testing::random_values(count, 24);
  const std::vector<Tensor> in{
      Tensor::from_vector<float>(narrow_values, {rows, cols}).to(DType::bf16),
      Tensor::from_vector<float>(y_values, {rows, cols}),
      Tensor::from_vector<float>(testing::random_values(count, 25), {rows, cols})};
  expect_same_as_eager(g, plan, in);
  const std::vector<float> read = testing::rounded(narrow_values, DType::bf16);
  std::vector<float> want(static_cast<size_t>(count));
  for (size_t i = 0; i < want.size(); ++i) {
    want[i] = static_cast<float>(read[i] / (1 + std::exp(-double{read[i]})) * y_values[i]);
  }
  testing::expect_close(cpu::cpu_executable(plan)->run(in).outputs[0].to_f32_vector(), want, 1e-6f,
                        "silu(narrow) * y");
}

// The loss gradient the backward products read in bf16 is written in bf16 (to a buffer of its own,
// no longer over the f32 logits), and casts that read a norm, a norm's input gradient or RoPE's
// gradient (Llama's dq) through a reshape (heads merged) fold too; a reshape something else reads
// keeps its cast.
TEST(Compile, LossGradientsAndReshapedValuesFoldTheirCasts) {
  graph::Builder b;
  b.autocast(DType::bf16);
  const auto x = b.input("x", {2, 3, 2, 4}, DType::f32);
  const auto targets = b.input("targets", {6}, DType::i32);
  const auto d_loss = b.input("d_loss", {1}, DType::f32);
  const auto positions = b.input("positions", {2, 3}, DType::i32);
  const auto w = b.weight("w", Tensor::from_vector<float>(testing::random_values(80, 3), {10, 8}));
  const auto inv_freq = b.weight("inv_freq", Tensor::from_vector<float>({1.f, 0.01f}, {2}));
  const auto norm = b.weight("norm", Tensor::from_vector<float>(testing::random_values(4, 4), {4}));
  const auto rows = b.reshape(b.rms_norm(x, norm, 1e-6f), {6, 8});
  const auto logits = b.linear(rows, w);
  b.output(b.cross_entropy(logits, targets));
  const auto d_logits = b.cross_entropy_grad(logits, targets, d_loss, true);
  b.output(b.linear_grad_input(b.cast(d_logits, DType::bf16), w));
  b.output(b.linear(b.reshape(b.rms_norm_grad_input(x, norm, b.mul(x, x), 1e-6f), {6, 8}), w));
  b.output(b.linear(b.reshape(b.rope_grad(b.mul(x, x), positions, inv_freq, 1.f), {6, 8}), w));
  const auto shared = b.reshape(b.rms_norm(b.add(x, x), norm, 1e-6f), {6, 8});
  b.output(b.linear(shared, w));
  b.output(shared);  // read as f32 too: its cast stays
  const graph::Graph g = b.finish();

  const fusion::Plan plan = cpu::cpu_plan(g);
  EXPECT_EQ(
      steps_where(plan, [](const graph::Node& n) { return is(n, Op::kCast) && n.shape[0] == 6; }),
      1)
      << "only the shared reshape's cast remains";
  for (Op op : {Op::kRmsNorm, Op::kRmsNormGradInput, Op::kRopeGrad, Op::kCrossEntropyGrad}) {
    EXPECT_EQ(steps_where(plan, [op](const graph::Node& n) { return is(n, op) && bf16(n); }), 1)
        << graph::op_name(op) << " writing bf16";
  }
  EXPECT_EQ(
      steps_where(plan,
                  [](const graph::Node& n) { return is(n, Op::kCrossEntropyGrad) && n.in_place; }),
      0);

  const Tensor in = Tensor::from_vector<float>(testing::random_values(48, 5), {2, 3, 2, 4});
  const Tensor ids = Tensor::from_vector<int32_t>({3, 0, graph::kIgnoreIndex, 9, 4, 4}, {6});
  const Tensor scale = Tensor::from_vector<float>({0.2f}, {1});
  const Tensor pos = Tensor::from_vector<int32_t>({0, 1, 2, 7, 8, 9}, {2, 3});
  expect_same_as_eager(g, plan, {in, ids, scale, pos});
}

// A loss gradient written over its logits is written by the loss step itself (each row read once
// for both): no gradient step is left, and the loss and the gradient flowing back are the same
// bits as eager, in f32 and under autocast (bf16 logits and gradient). A loss whose d_loss is a
// value made after it (a mean's: the scale's gradient) keeps its gradient step, which runs once
// that value exists.
TEST(Compile, LossStepsWriteTheirGradients) {
  for (const bool autocast : {false, true}) {
    for (const bool mean : {false, true}) {
      graph::Builder b;
      if (autocast) b.autocast(DType::bf16);
      const auto x = b.input("x", {6, 8}, DType::f32);
      const auto targets = b.input("targets", {6}, DType::i32);
      const auto d_loss = b.input("d_loss", {1}, DType::f32);
      const auto w =
          b.weight("w", Tensor::from_vector<float>(testing::random_values(80, 3), {10, 8}));
      const auto sum = b.cross_entropy(b.autocast_linear(x, w), targets);
      const auto loss = mean ? b.scale(sum, 1.f / 5) : sum;
      b.output(loss);
      graph::Graph g = b.finish();
      g.outputs.push_back(ops::append_backward(g, loss, d_loss, {x})[0]);

      const fusion::Plan plan = cpu::cpu_plan(g);
      EXPECT_EQ(
          steps_where(plan, [](const graph::Node& n) { return is(n, Op::kCrossEntropyGrad); }),
          mean ? 1 : 0)
          << (autocast ? "bf16" : "f32") << (mean ? " mean" : " sum");
      EXPECT_EQ(
          steps_where(plan,
                      [](const graph::Node& n) { return is(n, Op::kCrossEntropy) && n.in_place; }),
          mean ? 0 : 1);
      const Tensor in = Tensor::from_vector<float>(testing::random_values(48, 5), {6, 8});
      const Tensor ids = Tensor::from_vector<int32_t>({3, 0, graph::kIgnoreIndex, 9, 4, 4}, {6});
      const Tensor scale = Tensor::from_vector<float>({0.2f}, {1});
      expect_same_as_eager(g, plan, {in, ids, scale});
    }
  }
}

// An attention gradient reads the forward attention over the same q, k, v, mask and slots (q, k
// and v reached through reshapes that the backward pass makes again), which keeps room for its
// rows' log-sum-exp after its output; the output, which besides only the output product's cast
// reads, is still written in bf16. Compiled == eager on the CPU, whose steps take neither.
TEST(Compile, AttentionGradientsReadTheirForwardAttention) {
  graph::Builder b;
  b.autocast(DType::bf16);
  const auto xq = b.input("xq", {2, 3, 16}, DType::bf16);
  const auto xk = b.input("xk", {2, 3, 8}, DType::bf16);
  const auto xv = b.input("xv", {2, 3, 8}, DType::bf16);
  const auto mask = b.input("mask", {2, 3}, DType::i32);
  const auto slots = b.input("slots", {3}, DType::i32);
  const auto dy = b.input("dy", {2, 3, 16}, DType::f32);
  const auto wo =
      b.weight("wo", Tensor::from_vector<float>(testing::random_values(256, 3), {16, 16}));
  const auto y = b.attention(b.reshape(xq, {2, 3, 2, 8}), b.reshape(xk, {2, 3, 1, 8}),
                             b.reshape(xv, {2, 3, 1, 8}), mask, slots, 0.35f);
  const auto out = b.autocast_linear(b.reshape(y, {2, 3, 16}), wo);
  b.output(out);
  graph::Graph g = b.finish();
  for (const auto grad : ops::append_backward(g, out, dy, {xq, xk, xv})) g.outputs.push_back(grad);

  const fusion::Plan plan = cpu::cpu_plan(g);
  int gradients = 0;
  for (const graph::Node& n : plan.graph.nodes) {
    if (n.op != Op::kAttentionGrad) continue;
    ++gradients;
    ASSERT_EQ(n.inputs.size(), 7u);
    const graph::Node& forward = plan.graph.nodes[static_cast<size_t>(n.inputs[6])];
    EXPECT_EQ(forward.op, Op::kAttention);
    EXPECT_TRUE(forward.saves_row_stats);
    EXPECT_EQ(forward.dtype, DType::bf16) << "the output's cast still folds into attention";
    EXPECT_EQ(
        fusion::output_bytes(forward, plan.alignment),
        static_cast<size_t>(fusion::second_result_bytes(forward, plan.alignment)) + 2 * 3 * 2 * 4)
        << "an f32 log-sum-exp per query row after the output";
  }
  EXPECT_EQ(gradients, 1);

  std::mt19937 rng(7);
  const auto bf16_input = [&](Shape shape) {
    return testing::random_tensor(shape, rng).to(DType::bf16);
  };
  expect_same_as_eager(
      g, plan,
      {bf16_input({2, 3, 16}), bf16_input({2, 3, 8}), bf16_input({2, 3, 8}),
       Tensor::from_vector<int32_t>({1, 1, 1, 0, 1, 1}, {2, 3}),
       Tensor::from_vector<int32_t>({0, 1, 2}, {3}), testing::random_tensor({2, 3, 16}, rng)});
}

// Under autocast a lookup reads the f32 table, as torch.autocast leaves embeddings alone, while
// the tied output layer's product reads its bf16 copy.
TEST(Compile, AutocastLooksUpRowsInTheF32Table) {
  const std::vector<float> rows = testing::random_values(24, 8);
  graph::Builder b;
  b.autocast(DType::bf16);
  const auto ids = b.input("ids", {1, 2}, DType::i32);
  const auto table = b.weight("table", Tensor::from_vector<float>(rows, {6, 4}));
  const auto x = b.embedding(table, ids);
  b.output(x);
  b.output(b.linear(x, table));
  const graph::Graph g = b.finish();

  const std::vector<Tensor> out = graph::backend_for(kCpu)
                                      .compile(g)
                                      ->run({Tensor::from_vector<int32_t>({5, 2}, {1, 2})})
                                      .outputs;
  std::vector<float> want(rows.begin() + 20, rows.end());        // row 5
  want.insert(want.end(), rows.begin() + 8, rows.begin() + 12);  // row 2
  EXPECT_EQ(out[0].to_f32_vector(), want) << "the f32 rows, exactly";
}

// A per-head norm that only RoPE reads (q_norm, k_norm) runs inside the rotation; one something
// else reads too stays a norm of its own.
TEST(Compile, NormsOnlyRopeReadsRunInsideIt) {
  graph::Builder b;
  const auto q = b.input("q", {2, 3, 4, 8}, DType::f32);
  const auto positions = b.input("positions", {2, 3}, DType::i32);
  const auto norm = b.weight("norm", Tensor::from_vector<float>(testing::random_values(8, 4), {8}));
  std::vector<float> inv_freq_values(4);
  for (size_t i = 0; i < inv_freq_values.size(); ++i) {
    inv_freq_values[i] = std::pow(10000.f, -2.f * static_cast<float>(i) / 8);
  }
  const auto inv_freq = b.weight("inv_freq", Tensor::from_vector<float>(inv_freq_values, {4}));
  b.output(b.rope(b.rms_norm(q, norm, 1e-6f), positions, inv_freq, 1.f));
  const auto shared = b.rms_norm(b.add(q, q), norm, 1e-6f);
  b.output(b.rope(shared, positions, inv_freq, 1.f));
  b.output(shared);
  const graph::Graph g = b.finish();

  const fusion::Plan plan = cpu::cpu_plan(g);
  EXPECT_EQ(steps_where(plan, [](const graph::Node& n) { return is(n, Op::kRmsNorm); }), 1)
      << "the shared norm";
  EXPECT_EQ(steps_where(plan, [](const graph::Node& n) { return is(n, Op::kRope) && n.normed; }),
            1);

  const Tensor q_in = Tensor::from_vector<float>(testing::random_values(192, 5), {2, 3, 4, 8});
  const Tensor positions_in = Tensor::from_vector<int32_t>({0, 1, 2, 5, 9, 40}, {2, 3});
  expect_same_as_eager(g, plan, {q_in, positions_in});
}

// The residual stream's gradient added to a norm's input gradient is added by the norm's backward
// step as it writes; a gradient something else reads too keeps its add.
TEST(Compile, ResidualsAddIntoNormGradients) {
  graph::Builder b;
  const auto x = b.input("x", {3, 8}, DType::f32);
  const auto dy = b.input("dy", {3, 8}, DType::f32);
  const auto residual = b.input("residual", {3, 8}, DType::f32);
  const auto norm = b.weight("norm", Tensor::from_vector<float>(testing::random_values(8, 4), {8}));
  b.output(b.add(residual, b.rms_norm_grad_input(x, norm, dy, 1e-6f)));
  const auto shared = b.rms_norm_grad_input(x, norm, b.mul(dy, dy), 1e-6f);
  b.output(b.add(shared, residual));
  b.output(shared);
  const graph::Graph g = b.finish();

  const fusion::Plan plan = cpu::cpu_plan(g);
  EXPECT_EQ(
      steps_where(plan,
                  [](const graph::Node& n) { return is(n, Op::kRmsNormGradInput) && n.residual; }),
      1);
  EXPECT_EQ(steps_where(plan, [](const graph::Node& n) { return is(n, Op::kElementwise); }), 2)
      << "dy * dy, and the add of the gradient read twice";

  std::vector<Tensor> in;
  for (uint32_t seed : {5u, 6u, 7u}) {
    in.push_back(Tensor::from_vector<float>(testing::random_values(24, seed), {3, 8}));
  }
  expect_same_as_eager(g, plan, in);
}

// A norm whose input is written in place before RoPE runs (an accumulation into the state it
// normed) stays where it was: run inside RoPE, it would read the sum.
TEST(Compile, NormsStayBeforeAnInPlaceWriteIntoWhatTheyRead) {
  graph::Builder b;
  const auto state = b.state("state", {1, 2, 2, 4}, DType::f32);
  const auto x = b.input("x", {1, 2, 2, 4}, DType::f32);
  const auto positions = b.input("positions", {1, 2}, DType::i32);
  const auto norm = b.weight("norm", Tensor::from_vector<float>(testing::random_values(4, 4), {4}));
  const auto inv_freq = b.weight("inv_freq", Tensor::from_vector<float>({1.f, 0.01f}, {2}));
  const auto normed = b.rms_norm(state, norm, 1e-6f);
  b.accumulate(state, x);
  b.output(b.rope(normed, positions, inv_freq, 1.f));
  const graph::Graph g = b.finish();

  const fusion::Plan plan = cpu::cpu_plan(g);
  EXPECT_EQ(steps_where(plan, [](const graph::Node& n) { return n.normed; }), 0)
      << "the norm was moved";
  const std::vector<float> start = testing::random_values(16, 5);
  std::vector<Tensor> in{Tensor::from_vector<float>(start, {1, 2, 2, 4}),
                         Tensor::from_vector<float>(testing::random_values(16, 6), {1, 2, 2, 4}),
                         Tensor::from_vector<int32_t>({3, 7}, {1, 2})};
  const std::vector<Tensor> compiled = cpu::cpu_executable(plan)->run(in).outputs;
  in[0].copy_from(Tensor::from_vector<float>(start, {1, 2, 2, 4}));
  const std::vector<Tensor> eager = graph::backend_for(kCpu).run_eager(g, in);
  EXPECT_EQ(compiled[0].to_f32_vector(), eager[0].to_f32_vector());
}

// The accumulations a plan runs, and the gradient steps of `op` that add into their accumulators
// themselves.
std::pair<int, int> accumulation_steps(const fusion::Plan& plan, Op op) {
  return {steps_where(plan, [](const graph::Node& n) { return is(n, Op::kAccumulate); }),
          steps_where(plan, [op](const graph::Node& n) { return is(n, op) && n.in_place; })};
}

// dy^T x over `rows` rows ([rows, n] and [rows, k], row-major), summed in double.
std::vector<double> weight_grad(const std::vector<float>& dy, const std::vector<float>& x, int rows,
                                int n, int k) {
  std::vector<double> dw(static_cast<size_t>(n * k), 0.0);
  for (int r = 0; r < rows; ++r) {
    for (int i = 0; i < n; ++i) {
      for (int j = 0; j < k; ++j) dw[i * k + j] += double{dy[r * n + i]} * x[r * k + j];
    }
  }
  return dw;
}

// A weight gradient's product added into its accumulator becomes the product adding into it
// (beta 1): compiled twice and eager once, the state holds its start plus three times dy^T x,
// the closed form summed in double here.
TEST(Compile, AccumulationsFoldIntoTheirProducts) {
  graph::Builder b;
  const auto dy = b.input("dy", {2, 5, 4}, DType::f32);
  const auto x = b.input("x", {2, 5, 3}, DType::f32);
  const auto acc = b.state("acc", {4, 3}, DType::f32);
  b.accumulate(acc, b.linear_grad_weight(dy, x));
  b.output(b.reduce_rows(x));
  const graph::Graph g = b.finish();

  const auto [accumulations, products_in_place] =
      accumulation_steps(cpu::cpu_plan(g), Op::kLinearGradWeight);
  EXPECT_EQ(accumulations, 0);
  EXPECT_EQ(products_in_place, 1);

  const std::vector<float> dy_values = testing::random_values(40, 6),
                           x_values = testing::random_values(30, 7),
                           start = testing::random_values(12, 8);
  const Tensor dy_in = Tensor::from_vector<float>(dy_values, {2, 5, 4});
  const Tensor x_in = Tensor::from_vector<float>(x_values, {2, 5, 3});
  const Tensor sums = Tensor::from_vector<float>(start, {4, 3});
  graph::Backend& cpu = graph::backend_for(kCpu);
  const auto compiled = cpu.compile(g);
  compiled->run({dy_in, x_in, sums}).outputs;
  compiled->run({dy_in, x_in, sums}).outputs;
  cpu.run_eager(g, {dy_in, x_in, sums});
  const std::vector<double> product = weight_grad(dy_values, x_values, 10, 4, 3);
  std::vector<float> want(12);
  for (size_t i = 0; i < want.size(); ++i) want[i] = static_cast<float>(start[i] + 3 * product[i]);
  testing::expect_close(sums.to_f32_vector(), want, 1e-5f, "accumulated");
}

// RMSNorm's weight gradient over `rows` rows of x and dy ([rows, hidden]): the column sums of
// dy * x / rms(x), in double.
std::vector<double> norm_weight_grad(const std::vector<float>& x, const std::vector<float>& dy,
                                     int rows, int hidden, double eps) {
  std::vector<double> dw(static_cast<size_t>(hidden), 0.0);
  for (int r = 0; r < rows; ++r) {
    double sum_sq = 0;
    for (int i = 0; i < hidden; ++i) sum_sq += double{x[r * hidden + i]} * x[r * hidden + i];
    const double inv_rms = 1.0 / std::sqrt(sum_sq / hidden + eps);
    for (int i = 0; i < hidden; ++i)
      dw[i] += double{dy[r * hidden + i]} * x[r * hidden + i] * inv_rms;
  }
  return dw;
}

// A norm weight's gradient (column sums of dy * x / rms(x)) adds into its accumulator itself.
TEST(Compile, NormWeightGradientsAddIntoTheirAccumulators) {
  constexpr int kRows = 6, kHidden = 8;
  graph::Builder b;
  const auto x = b.input("x", {2, 3, kHidden}, DType::f32);
  const auto dy = b.input("dy", {2, 3, kHidden}, DType::f32);
  const auto acc = b.state("acc", {kHidden}, DType::f32);
  b.accumulate(acc, b.rms_norm_grad_weight(x, dy, 1e-6f));
  b.output(b.reduce_rows(x));
  const graph::Graph g = b.finish();

  const fusion::Plan plan = cpu::cpu_plan(g);
  const auto [accumulations, in_place] = accumulation_steps(plan, Op::kRmsNormGradWeight);
  EXPECT_EQ(accumulations, 0);
  EXPECT_EQ(in_place, 1);

  const std::vector<float> x_values = testing::random_values(kRows * kHidden, 14),
                           dy_values = testing::random_values(kRows * kHidden, 15),
                           start = testing::random_values(kHidden, 16);
  const std::vector<double> dw = norm_weight_grad(x_values, dy_values, kRows, kHidden, 1e-6);
  const Tensor sums = Tensor::from_vector<float>(start, {kHidden});
  const std::vector<Tensor> in{Tensor::from_vector<float>(x_values, {2, 3, kHidden}),
                               Tensor::from_vector<float>(dy_values, {2, 3, kHidden}), sums};
  graph::Backend& cpu = graph::backend_for(kCpu);
  const auto compiled = cpu::cpu_executable(plan);
  compiled->run(in).outputs;
  compiled->run(in).outputs;
  cpu.run_eager(g, in);
  std::vector<float> want(kHidden);
  for (int i = 0; i < kHidden; ++i) want[i] = static_cast<float>(start[i] + 3 * dw[i]);
  testing::expect_close(sums.to_f32_vector(), want, 1e-5f, "start + 3 dw");
}

// Inputs x, dy and residual ([2, 3, kNormHidden] each) and state acc: RMSNorm's input gradient
// plus the residual, the weight's gradient added into acc; the weight's values from `seed`.
constexpr int kNormHidden = 8;
constexpr float kNormEps = 1e-6f;
graph::ValueId norm_gradient_with_residual(graph::Builder& b, uint64_t seed) {
  const Shape rows{2, 3, kNormHidden};
  const auto x = b.input("x", rows, DType::f32);
  const auto dy = b.input("dy", rows, DType::f32);
  const auto residual = b.input("residual", rows, DType::f32);
  const auto acc = b.state("acc", {kNormHidden}, DType::f32);
  const auto w =
      b.weight("w", Tensor::from_vector<float>(
                        testing::random_values(kNormHidden, seed, 0.5f, 1.5f), {kNormHidden}));
  b.accumulate(acc, b.rms_norm_grad_weight(x, dy, kNormEps));
  return b.add(b.rms_norm_grad_input(x, w, dy, kNormEps), residual);
}

// Where the norm's input gradient is taken too, that step adds the weight's gradient as it goes
// (one pass over x and dy), after the residual and the bf16 cast have folded into it as well:
// compiled == eager bit for bit, the accumulator against the closed form.
TEST(Compile, NormInputGradientsAddTheWeightGradientsAsTheyRun) {
  constexpr int kRows = 6, kHidden = kNormHidden;
  constexpr float kEps = kNormEps;
  graph::Builder b;
  b.output(b.cast(norm_gradient_with_residual(b, 17), DType::bf16));
  const graph::Graph g = b.finish();

  const fusion::Plan plan = cpu::cpu_plan(g);
  EXPECT_EQ(steps_where(plan, [](const graph::Node& n) { return is(n, Op::kRmsNormGradWeight); }),
            0);
  EXPECT_EQ(steps_where(plan,
                        [](const graph::Node& n) {
                          return is(n, Op::kRmsNormGradInput) && n.adds_weight_grad && n.residual &&
                                 bf16(n);
                        }),
            1);
  EXPECT_EQ(plan.schedule.size(), 2u) << "the gradient step and the cast's view of it";

  const std::vector<float> x_values = testing::random_values(kRows * kHidden, 18),
                           dy_values = testing::random_values(kRows * kHidden, 19),
                           start = testing::random_values(kHidden, 20);
  std::vector<Tensor> in{
      Tensor::from_vector<float>(x_values, {2, 3, kHidden}),
      Tensor::from_vector<float>(dy_values, {2, 3, kHidden}),
      Tensor::from_vector<float>(testing::random_values(kRows * kHidden, 21), {2, 3, kHidden}),
      Tensor::from_vector<float>(start, {kHidden})};
  graph::Backend& cpu = graph::backend_for(kCpu);
  const std::vector<Tensor> compiled = cpu::cpu_executable(plan)->run(in).outputs;
  const std::vector<float> compiled_sums = in[3].to_f32_vector();
  in[3].copy_from(Tensor::from_vector<float>(start, {kHidden}));
  const std::vector<Tensor> eager = cpu.run_eager(g, in);
  EXPECT_EQ(compiled[0].to_f32_vector(), eager[0].to_f32_vector());
  EXPECT_EQ(compiled_sums, in[3].to_f32_vector());

  const std::vector<double> dw = norm_weight_grad(x_values, dy_values, kRows, kHidden, kEps);
  std::vector<float> want(kHidden);
  for (int i = 0; i < kHidden; ++i) want[i] = static_cast<float>(start[i] + dw[i]);
  testing::expect_close(compiled_sums, want, 1e-5f, "start + dw");
}

// The same gradient read in f32 too (the residual stream's gradient: the next norm's gradient adds
// it) writes its bf16 copy for the cast's readers beside its f32 result, in the same step
// (fold_narrow_copies): no cast step, the copy the f32 result rounded once, as eager's cast.
TEST(Compile, ANormGradientReadInF32AndBf16WritesItsBf16CopyAsItRuns) {
  constexpr int kRows = 6, kHidden = kNormHidden;
  graph::Builder b;
  const auto dx = norm_gradient_with_residual(b, 22);
  b.output(dx);
  b.output(b.cast(dx, DType::bf16));
  const graph::Graph g = b.finish();

  const fusion::Plan plan = cpu::cpu_plan(g);
  EXPECT_EQ(steps_where(plan, [](const graph::Node& n) { return is(n, Op::kCast); }), 0);
  EXPECT_EQ(steps_where(plan,
                        [](const graph::Node& n) {
                          return is(n, Op::kRmsNormGradInput) && n.adds_weight_grad &&
                                 n.narrow_copy && !bf16(n);
                        }),
            1);

  std::vector<Tensor> in{
      Tensor::from_vector<float>(testing::random_values(kRows * kHidden, 23), {2, 3, kHidden}),
      Tensor::from_vector<float>(testing::random_values(kRows * kHidden, 24), {2, 3, kHidden}),
      Tensor::from_vector<float>(testing::random_values(kRows * kHidden, 25), {2, 3, kHidden}),
      Tensor::zeros({kHidden}, DType::f32)};
  graph::Backend& cpu = graph::backend_for(kCpu);
  const std::vector<Tensor> compiled = cpu::cpu_executable(plan)->run(in).outputs;
  ASSERT_EQ(compiled[1].dtype(), DType::bf16);
  EXPECT_EQ(compiled[1].to_f32_vector(), compiled[0].to(DType::bf16).to_f32_vector());
  in[3].copy_from(Tensor::zeros({kHidden}, DType::f32));
  const std::vector<Tensor> eager = cpu.run_eager(g, in);
  EXPECT_EQ(compiled[0].to_f32_vector(), eager[0].to_f32_vector());
  EXPECT_EQ(compiled[1].to_f32_vector(), eager[1].to_f32_vector());
}

// The output layer's gradient is summed chunk by chunk into the first chunk's product (a computed
// accumulator): the second chunk's product adds into it; a product something else reads too
// keeps its own buffer and accumulation.
TEST(Compile, AccumulationsIntoAComputedSumFold) {
  graph::Builder b;
  const auto dy = b.input("dy", {6, 4}, DType::f32);
  const auto x = b.input("x", {6, 3}, DType::f32);
  const auto first = b.linear_grad_weight(b.view(dy, 0, {3, 4}), b.view(x, 0, {3, 3}));
  const auto second = b.linear_grad_weight(b.view(dy, 12, {3, 4}), b.view(x, 9, {3, 3}));
  b.output(b.accumulate(first, second));
  const auto shared = b.linear_grad_weight(dy, x);
  b.output(b.accumulate(b.linear_grad_weight(dy, x), shared));
  b.output(shared);
  const graph::Graph g = b.finish();

  const auto [accumulations, products_in_place] =
      accumulation_steps(cpu::cpu_plan(g), Op::kLinearGradWeight);
  EXPECT_EQ(products_in_place, 1) << "the chunks' sum";
  EXPECT_EQ(accumulations, 1) << "the sum with a product read twice";

  const std::vector<float> dy_values = testing::random_values(24, 9),
                           x_values = testing::random_values(18, 10);
  const std::vector<Tensor> out = graph::backend_for(kCpu)
                                      .compile(g)
                                      ->run({Tensor::from_vector<float>(dy_values, {6, 4}),
                                             Tensor::from_vector<float>(x_values, {6, 3})})
                                      .outputs;
  const std::vector<double> product = weight_grad(dy_values, x_values, 6, 4, 3);
  std::vector<float> whole(product.size()), twice(product.size());
  for (size_t i = 0; i < product.size(); ++i) {
    whole[i] = static_cast<float>(product[i]);
    twice[i] = static_cast<float>(2 * product[i]);
  }
  ASSERT_EQ(out.size(), 3u);
  testing::expect_close(out[0].to_f32_vector(), whole, 1e-5f, "chunks summed");
  testing::expect_close(out[1].to_f32_vector(), twice, 1e-5f, "product read twice, summed");
  testing::expect_close(out[2].to_f32_vector(), whole, 1e-5f, "product read twice");
}

TEST(Compile, CompiledEqualsEagerBitForBit) {
  set_log_level(LogLevel::kWarn);
  CausalLM model = AutoModelForCausalLM::from_pretrained(
      testing::fixture_dir("llama"), {.dtype = DType::bf16, .device_map = "cpu"});
  const Tensor ids = testing::int_matrix(testing::reference("llama")["input_ids"]);
  const Tensor compiled = model.forward(ids, nullptr, true, false);
  const Tensor eager = model.forward(ids, nullptr, true, true);
  ASSERT_EQ(compiled.shape(), eager.shape());
  EXPECT_EQ(compiled.to_f32_vector(), eager.to_f32_vector());
  EXPECT_EQ(model.graph_stats().compiles, 1);
}

TEST(Compile, CacheCountsHits) {
  set_log_level(LogLevel::kWarn);
  CausalLM model = AutoModelForCausalLM::from_pretrained(
      testing::fixture_dir("qwen3"), {.dtype = DType::f32, .device_map = "cpu"});
  const Tensor ids = testing::int_matrix(testing::reference("qwen3")["input_ids"]);
  for (int i = 0; i < 3; ++i) model.forward(ids);
  EXPECT_EQ(model.graph_stats().compiles, 1);
  EXPECT_EQ(model.graph_stats().hits, 2);
  EXPECT_GT(model.graph_stats().arena_bytes, 0u);
}

}  // namespace
}  // namespace tfm

namespace tfm {
namespace {

graph::Graph tiny_graph(int64_t rows) {
  graph::Builder b;
  b.output(b.silu(b.input("x", {rows, 4}, DType::f32)));
  return b.finish();
}

TEST(GraphCache, LogsEachCompilationAndWarnsWhenShapesKeepChanging) {
  set_log_level(LogLevel::kInfo);
  graph::GraphCache cache("tiny", kCpu);
  cache.set_warn_after(2);
  ::testing::internal::CaptureStderr();
  for (int64_t rows = 1; rows <= 3; ++rows) {
    cache.get({.batch = rows}, [rows] { return tiny_graph(rows); });
  }
  cache.get({.batch = 1}, [] { return tiny_graph(1); });
  const std::string log = ::testing::internal::GetCapturedStderr();
  set_log_level(LogLevel::kWarn);
  EXPECT_EQ(cache.stats().compiles, 3);
  EXPECT_EQ(cache.stats().hits, 1);
  EXPECT_NE(log.find("compiled tiny graph [batch=3 seq=1"), std::string::npos) << log;
  EXPECT_NE(log.find("warning: tiny has made 3 graphs"), std::string::npos) << log;
  // It names the dimension that changed, and only that one.
  EXPECT_NE(log.find("(batch took 3 values;"), std::string::npos) << log;
}

}  // namespace
}  // namespace tfm
