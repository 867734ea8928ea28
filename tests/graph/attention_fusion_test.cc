// Folding a decode step's prepare_attention into its attention (graph/attention_fusion.h): on a
// decoder layer's graph as the models build it (one product for q, k and v, then prepare, then
// attention over the caches, then the output product), planned as compile() plans it. The fold
// needs one new token a row, q read by that attention alone over the same caches and slots, and
// the token's rows alive until attention runs.
#include "graph/attention_fusion.h"

#include <gtest/gtest.h>

#include "graph/builder.h"
#include "graph/plan.h"
#include "support/random_values.h"

namespace tfm::graph {
namespace {

using testing::random_values;

constexpr int64_t kHidden = 64, kQHeads = 4, kKvHeads = 2, kHeadDim = 16, kCache = 32;

Tensor matrix(int64_t rows, int64_t cols, uint64_t seed) {
  return Tensor::from_vector<float>(random_values(static_cast<size_t>(rows * cols), seed),
                                    {rows, cols});
}

struct Layer {
  Graph graph;
  ValueId prepare = -1;
};

// One layer for `seq` new tokens a row. With `q_as_output` the prepared q is also a graph output;
// with `own_slots` attention reads slots of its own rather than prepare's.
Layer layer(int64_t batch, int64_t seq, bool q_as_output = false, bool own_slots = false) {
  Builder g;
  const int64_t rows = batch * seq, nq = kQHeads * kHeadDim, nkv = kKvHeads * kHeadDim;
  const ValueId x = g.input("x", {batch, seq, kHidden}, DType::f32);
  const ValueId positions = g.input("positions", {batch, seq}, DType::i32);
  const ValueId slots = g.input("slots", {seq}, DType::i32);
  const ValueId mask = g.input("mask", {batch, kCache}, DType::i32);
  const ValueId k_cache = g.state("k_cache", {batch, kCache, kKvHeads, kHeadDim}, DType::f32);
  const ValueId v_cache = g.state("v_cache", {batch, kCache, kKvHeads, kHeadDim}, DType::f32);
  const ValueId qkv =
      g.qkv_linear(x,
                   {g.weight("wq", matrix(nq, kHidden, 1)), g.weight("wk", matrix(nkv, kHidden, 2)),
                    g.weight("wv", matrix(nkv, kHidden, 3))},
                   {-1, -1, -1}, InputNorm{});
  const Tensor inv_freq =
      Tensor::from_vector<float>(random_values(kHeadDim / 2, 4), {kHeadDim / 2});
  Builder::AttentionInputs in{g.view(qkv, 0, {batch, seq, kQHeads, kHeadDim}),
                              g.view(qkv, rows * nq, {batch, seq, kKvHeads, kHeadDim}),
                              g.view(qkv, rows * (nq + nkv), {batch, seq, kKvHeads, kHeadDim}),
                              positions,
                              g.weight("inv_freq", inv_freq),
                              slots,
                              k_cache,
                              v_cache};
  const ValueId q = g.prepare_attention(in);
  const ValueId read_slots = own_slots ? g.input("other_slots", {seq}, DType::i32) : slots;
  const ValueId a = g.attention(q, k_cache, v_cache, mask, read_slots, 0.25f);
  g.output(g.linear(g.reshape(a, {batch, seq, nq}), g.weight("wo", matrix(kHidden, nq, 5)), -1));
  if (q_as_output) g.output(q);
  return {g.finish(), q};
}

TEST(AttentionFusion, DecodeFoldsCompiledAndEager) {
  for (const int64_t batch : {1, 3, 16}) {
    const Layer l = layer(batch, 1);
    EXPECT_TRUE(prepare_folds_into_attention(l.graph, l.prepare, nullptr)) << "batch " << batch;
    const Plan plan = plan_graph(l.graph);
    EXPECT_TRUE(prepare_folds_into_attention(plan.graph, l.prepare, &plan)) << "batch " << batch;
  }
}

TEST(AttentionFusion, PrefillDoesNotFold) {
  const Layer l = layer(2, 4);
  const Plan plan = plan_graph(l.graph);
  EXPECT_FALSE(prepare_folds_into_attention(plan.graph, l.prepare, &plan));
  EXPECT_FALSE(prepare_folds_into_attention(l.graph, l.prepare, nullptr));
}

TEST(AttentionFusion, QReadElsewhereOrOtherSlotsDoNotFold) {
  const Layer output = layer(2, 1, true);
  EXPECT_FALSE(prepare_folds_into_attention(output.graph, output.prepare, nullptr));
  const Layer slots = layer(2, 1, false, true);
  EXPECT_FALSE(prepare_folds_into_attention(slots.graph, slots.prepare, nullptr));
}

// A plan that put attention's output on the new token's k rows (which its kernel still reads)
// must not fold; one that put it exactly on q may.
TEST(AttentionFusion, OutputOverTheTokensKeysDoesNotFold) {
  const Layer l = layer(2, 1);
  Plan plan = plan_graph(l.graph);
  const Node& prepare = plan.graph.nodes[static_cast<size_t>(l.prepare)];
  ValueId attention = -1;
  for (size_t i = 0; i < plan.graph.nodes.size(); ++i) {
    if (plan.graph.nodes[i].op == Op::kAttention) attention = static_cast<ValueId>(i);
  }
  ASSERT_GE(attention, 0);
  const Node& k_view = plan.graph.nodes[static_cast<size_t>(prepare.inputs[1])];
  const int64_t qkv_offset = plan.offset[static_cast<size_t>(k_view.inputs[0])];
  ASSERT_GE(qkv_offset, 0);
  plan.offset[static_cast<size_t>(attention)] =
      qkv_offset + k_view.start * static_cast<int64_t>(sizeof(float));
  EXPECT_FALSE(prepare_folds_into_attention(plan.graph, l.prepare, &plan));
  plan.offset[static_cast<size_t>(attention)] = qkv_offset;  // exactly on q
  EXPECT_TRUE(prepare_folds_into_attention(plan.graph, l.prepare, &plan));
}

}  // namespace
}  // namespace tfm::graph
