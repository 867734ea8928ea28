// Attention under bf16 autocast (on bf16 copies of q, k and v), forward and backward, on CUDA
// (flash-style for head sizes 16, 32, 64 and 128 where dy is bf16, as cuBLASLt products for the
// others; skipped, and said so, where no GPU is present)
// against the CPU backend, which widens the same
// bf16 values exactly into its f32 kernels (those are checked against finite differences in
// tests/graph). CUDA also rounds the probabilities and the scores' gradient to bf16 for its
// products, as flash attention does, so the tolerance is bf16's. Also its output written in bf16.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <random>

#include "backends/cpu/cpu_backend.h"
#include "graph/backend.h"
#include "graph/builder.h"
#include "ops/autodiff.h"
#include "support/random_values.h"
#include "tfm/device.h"

namespace tfm {
namespace {

using graph::ValueId;

using testing::random_tensor;

struct Case {
  int64_t batch, seq, q_heads, kv_heads, head_dim;
};

// Outputs: attention's output, then the gradients of sum(y * dy) for q, k and v. dy in `dy_dtype`:
// bf16 as attention's output gradient is under autocast (CUDA: flash-style where a kernel covers
// the head size), or f32 (CUDA: the products).
graph::Graph attention_graph(const Case& c, uint32_t seed, DType dy_dtype) {
  std::mt19937 rng(seed);
  const Shape q_shape{c.batch, c.seq, c.q_heads, c.head_dim};
  const Shape kv_shape{c.batch, c.seq, c.kv_heads, c.head_dim};
  std::vector<int32_t> mask(static_cast<size_t>(c.batch * c.seq), 1), slots(c.seq);
  // The last row left-padded: its first queries see no key.
  for (int64_t j = 0; j < c.seq / 3; ++j) mask[static_cast<size_t>((c.batch - 1) * c.seq + j)] = 0;
  for (int64_t i = 0; i < c.seq; ++i) slots[static_cast<size_t>(i)] = static_cast<int32_t>(i);
  graph::Builder b;
  b.autocast(DType::bf16);
  const ValueId q = b.weight("q", random_tensor(q_shape, rng));
  const ValueId k = b.weight("k", random_tensor(kv_shape, rng));
  const ValueId v = b.weight("v", random_tensor(kv_shape, rng));
  const ValueId y = b.attention(
      q, k, v, b.weight("mask", Tensor::from_vector(mask, {c.batch, c.seq})),
      b.weight("slots", Tensor::from_vector(slots, {c.seq})), 1.f / std::sqrt(float(c.head_dim)));
  const ValueId dy = b.weight("dy", random_tensor(q_shape, rng).to(dy_dtype));
  b.output(y);
  graph::Graph g = b.finish();
  for (ValueId grad : ops::append_backward(g, y, dy, {q, k, v})) g.outputs.push_back(grad);
  return g;
}

class Bf16AttentionTest : public ::testing::TestWithParam<Case> {};

// Each output on CUDA, compiled (as `options` choose its kernels) and eager, within bf16's
// tolerance of the CPU's eager run.
void expect_cuda_matches_cpu(const graph::Graph& g, const graph::CompileOptions& options = {}) {
  const std::vector<Tensor> want = graph::backend_for(kCpu).run_eager(g, {});
  graph::Backend& cuda = graph::backend_for(Device{"cuda", 0});
  for (const bool eager : {false, true}) {
    const std::vector<Tensor> got =
        eager ? cuda.run_eager(g, {}) : cuda.compile(g, options)->run({}).outputs;
    ASSERT_EQ(got.size(), want.size());
    const char* names[] = {"y", "dq", "dk", "dv"};
    for (size_t i = 0; i < want.size(); ++i) {
      const std::vector<float> a = got[i].to_f32_vector(), w = want[i].to_f32_vector();
      ASSERT_EQ(a.size(), w.size());
      float largest = 0, worst = 0;
      for (size_t j = 0; j < w.size(); ++j) {
        ASSERT_TRUE(std::isfinite(a[j])) << names[i] << " at " << j;
        largest = std::max(largest, std::fabs(w[j]));
        worst = std::max(worst, std::fabs(a[j] - w[j]));
      }
      EXPECT_LE(worst, 2e-2f * largest) << names[i] << (eager ? " eager" : " compiled");
    }
  }
}

TEST_P(Bf16AttentionTest, CudaMatchesCpu) {
  if (!is_available("cuda")) GTEST_SKIP() << "no CUDA device present: CUDA tests skipped";
  for (const DType dy_dtype : {DType::bf16, DType::f32}) {
    SCOPED_TRACE(std::string("dy ") + std::string(dtype_name(dy_dtype)));
    expect_cuda_matches_cpu(attention_graph(GetParam(), 3, dy_dtype));
  }
  // The flash backward's other kernels: dq running the products again (no scores' gradients
  // saved), which only shapes past the saved budget take by default; and the products' backward.
  SCOPED_TRACE("no scores' gradients saved, then the products' backward");
  expect_cuda_matches_cpu(attention_graph(GetParam(), 3, DType::bf16),
                          {.kernels = {.saved_score_grad_mib = 0}});
  expect_cuda_matches_cpu(attention_graph(GetParam(), 3, DType::bf16),
                          {.kernels = {.flash_attention_grad = false}});
}

// Attention's output cast to bf16 (as o_proj reads it under autocast) is written in bf16 by the
// attention step itself (graph::fold_casts): on the CPU the bits of eager's f32 output rounded by
// its cast; on CUDA (flash-style or products) within bf16's tolerance of those.
TEST_P(Bf16AttentionTest, WritesItsOutputInBf16) {
  const Case& c = GetParam();
  std::mt19937 rng(4);
  const Shape q_shape{c.batch, c.seq, c.q_heads, c.head_dim};
  const Shape kv_shape{c.batch, c.seq, c.kv_heads, c.head_dim};
  std::vector<int32_t> slots(static_cast<size_t>(c.seq));
  for (int64_t i = 0; i < c.seq; ++i) slots[static_cast<size_t>(i)] = static_cast<int32_t>(i);
  graph::Builder b;
  b.autocast(DType::bf16);
  const ValueId y = b.attention(
      b.weight("q", random_tensor(q_shape, rng)), b.weight("k", random_tensor(kv_shape, rng)),
      b.weight("v", random_tensor(kv_shape, rng)),
      b.weight("mask",
               Tensor::from_vector(std::vector<int32_t>(static_cast<size_t>(c.batch * c.seq), 1),
                                   {c.batch, c.seq})),
      b.weight("slots", Tensor::from_vector(slots, {c.seq})), 1.f / std::sqrt(float(c.head_dim)));
  b.output(b.cast(y, DType::bf16));
  const graph::Graph g = b.finish();
  const fusion::Plan plan = cpu::cpu_plan(g);
  int bf16_attention = 0, casts = 0;
  for (ValueId id : plan.schedule) {
    const graph::Node& n = plan.graph.nodes[static_cast<size_t>(id)];
    bf16_attention += n.op == graph::Op::kAttention && n.dtype == DType::bf16;
    casts += n.op == graph::Op::kCast && n.inputs[0] == y;
  }
  EXPECT_EQ(bf16_attention, 1);
  EXPECT_EQ(casts, 0);

  graph::Backend& cpu = graph::backend_for(kCpu);
  const std::vector<float> want = cpu.run_eager(g, {})[0].to_f32_vector();
  EXPECT_EQ(cpu.compile(g)->run({}).outputs[0].to_f32_vector(), want);
  if (!is_available("cuda")) GTEST_SKIP() << "no CUDA device present: the CUDA half skipped";
  const Tensor got = graph::backend_for(Device{"cuda", 0}).compile(g)->run({}).outputs[0];
  EXPECT_EQ(got.dtype(), DType::bf16);
  const std::vector<float> a = got.to_f32_vector();
  float largest = 0, worst = 0;
  for (size_t j = 0; j < want.size(); ++j) {
    ASSERT_TRUE(std::isfinite(a[j])) << "at " << j;
    largest = std::max(largest, std::fabs(want[j]));
    worst = std::max(worst, std::fabs(a[j] - want[j]));
  }
  EXPECT_LE(worst, 2e-2f * largest);
}

INSTANTIATE_TEST_SUITE_P(Shapes, Bf16AttentionTest,
                         ::testing::Values(Case{2, 40, 4, 2, 16}, Case{3, 9, 2, 2, 8},
                                           Case{1, 130, 4, 1, 32}, Case{2, 70, 4, 2, 128},
                                           // A long sequence: 129 key tiles, and scores
                                           // the products could not hold at once.
                                           Case{1, 8200, 1, 1, 16}));

}  // namespace
}  // namespace tfm
