// Folding a decode step's prepare_attention into its attention (backends/cuda/attention_fusion.h,
// host code built here beside the kernels): on a decoder layer's graph as the models build it
// (three products, RoPE, the cache writes, attention over the caches, the output product), fused
// and planned by the fusion pipeline as the CUDA backend runs it. The fold needs one new token a
// row, q read by that attention alone over the same caches and slots, and the token's rows alive
// until attention runs.
#include "backends/cuda/attention_fusion.h"

#include <gtest/gtest.h>

#include "fusion/pipeline.h"
#include "graph/builder.h"
#include "graph/op_args.h"
#include "support/random_values.h"

namespace tfm::cuda {
namespace {

using graph::Builder;
using graph::Graph;
using graph::Node;
using graph::Op;
using graph::ValueId;
using testing::random_values;

constexpr int64_t kHidden = 64, kQHeads = 4, kKvHeads = 2, kHeadDim = 16, kCache = 32;

Tensor matrix(int64_t rows, int64_t cols, uint64_t seed) {
  return Tensor::from_vector<float>(random_values(static_cast<size_t>(rows * cols), seed),
                                    {rows, cols});
}

// The planner's alignment and the passes' targets as the CUDA backend sets them.
fusion::Plan planned(Graph graph) {
  const fusion::Target target{.name = "cuda",
                              .writes_bf16 = fusion::default_writes_bf16,
                              .elementwise = {},
                              .alignment = 256};
  return fusion::compile(std::move(graph), fusion::standard_pipeline(), target);
}

// One layer for `seq` new tokens a row, fused and planned.
fusion::Plan layer(int64_t batch, int64_t seq) {
  Builder g;
  const int64_t nq = kQHeads * kHeadDim, nkv = kKvHeads * kHeadDim;
  const ValueId x = g.input("x", {batch, seq, kHidden}, DType::f32);
  const ValueId positions = g.input("positions", {batch, seq}, DType::i32);
  const ValueId slots = g.input("slots", {seq}, DType::i32);
  const ValueId mask = g.input("mask", {batch, kCache}, DType::i32);
  const ValueId k_cache = g.state("k_cache", {batch, kCache, kKvHeads, kHeadDim}, DType::f32);
  const ValueId v_cache = g.state("v_cache", {batch, kCache, kKvHeads, kHeadDim}, DType::f32);
  const ValueId inv_freq = g.weight(
      "inv_freq", Tensor::from_vector<float>(random_values(kHeadDim / 2, 4), {kHeadDim / 2}));
  const ValueId wq = g.weight("wq", matrix(nq, kHidden, 1)),
                wk = g.weight("wk", matrix(nkv, kHidden, 2)),
                wv = g.weight("wv", matrix(nkv, kHidden, 3));
  const ValueId q_rows = g.linear(x, wq), k_rows = g.linear(x, wk), v_rows = g.linear(x, wv);
  // As the models order them: the heads of all three, then RoPE.
  const ValueId q_heads = g.reshape(q_rows, {batch, seq, kQHeads, kHeadDim});
  const ValueId k_heads = g.reshape(k_rows, {batch, seq, kKvHeads, kHeadDim});
  const ValueId v = g.reshape(v_rows, {batch, seq, kKvHeads, kHeadDim});
  const ValueId q = g.rope(q_heads, positions, inv_freq, 1.f);
  const ValueId k = g.rope(k_heads, positions, inv_freq, 1.f);
  const ValueId a = g.attention(q, g.cache_write(k_cache, k, slots),
                                g.cache_write(v_cache, v, slots), mask, slots, 0.25f);
  g.output(g.linear(g.reshape(a, {batch, seq, nq}), g.weight("wo", matrix(kHidden, nq, 5))));
  return planned(g.finish());
}

ValueId find(const Graph& graph, Op op) {
  for (size_t i = 0; i < graph.nodes.size(); ++i) {
    if (graph.nodes[i].op == op) return static_cast<ValueId>(i);
  }
  return -1;
}

TEST(AttentionFusion, DecodeFoldsCompiledAndEager) {
  for (const int64_t batch : {1, 3, 16}) {
    const fusion::Plan plan = layer(batch, 1);
    const ValueId prepare = find(plan.graph, Op::kPrepareAttention);
    ASSERT_GE(prepare, 0) << "the pipeline makes one prepare_attention";
    EXPECT_TRUE(prepare_folds_into_attention(plan.graph, prepare, nullptr)) << "batch " << batch;
    EXPECT_TRUE(prepare_folds_into_attention(plan.graph, prepare, &plan)) << "batch " << batch;
  }
}

TEST(AttentionFusion, PrefillDoesNotFold) {
  const fusion::Plan plan = layer(2, 4);
  const ValueId prepare = find(plan.graph, Op::kPrepareAttention);
  ASSERT_GE(prepare, 0);
  EXPECT_FALSE(prepare_folds_into_attention(plan.graph, prepare, &plan));
  EXPECT_FALSE(prepare_folds_into_attention(plan.graph, prepare, nullptr));
}

TEST(AttentionFusion, QReadElsewhereOrOtherSlotsDoNotFold) {
  fusion::Plan output = layer(2, 1);
  const ValueId prepare = find(output.graph, Op::kPrepareAttention);
  output.graph.outputs.push_back(prepare);
  EXPECT_FALSE(prepare_folds_into_attention(output.graph, prepare, nullptr));

  fusion::Plan slots = layer(2, 1);
  Node& attention = slots.graph.nodes[static_cast<size_t>(find(slots.graph, Op::kAttention))];
  Node other_slots;
  other_slots.shape = {1};
  other_slots.dtype = DType::i32;
  const ValueId other = slots.graph.add(std::move(other_slots));
  attention.inputs[4] = other;
  EXPECT_FALSE(prepare_folds_into_attention(slots.graph, prepare, nullptr));
}

// A plan that put attention's output on the new token's k rows (which its kernel still reads)
// must not fold; one that put it exactly on q may.
TEST(AttentionFusion, OutputOverTheTokensKeysDoesNotFold) {
  fusion::Plan plan = layer(2, 1);
  const ValueId prepare = find(plan.graph, Op::kPrepareAttention);
  const ValueId attention = find(plan.graph, Op::kAttention);
  ASSERT_GE(attention, 0);
  // The token's k rows: a reshape of a view of the fused q, k and v product.
  const auto source = [&](ValueId v) {
    return graph::operand(plan.graph.nodes[static_cast<size_t>(v)]);
  };
  const ValueId k_view =
      source(graph::prepare_attention_args(plan.graph.nodes[static_cast<size_t>(prepare)]).k);
  const Node& view = plan.graph.nodes[static_cast<size_t>(k_view)];
  ASSERT_EQ(view.op, Op::kView);
  const int64_t qkv_offset = plan.offset[static_cast<size_t>(graph::operand(view))];
  ASSERT_GE(qkv_offset, 0);
  plan.offset[static_cast<size_t>(attention)] =
      qkv_offset + view.start * static_cast<int64_t>(sizeof(float));
  EXPECT_FALSE(prepare_folds_into_attention(plan.graph, prepare, &plan));
  plan.offset[static_cast<size_t>(attention)] = qkv_offset;  // exactly on q
  EXPECT_TRUE(prepare_folds_into_attention(plan.graph, prepare, &plan));
}

}  // namespace
}  // namespace tfm::cuda
