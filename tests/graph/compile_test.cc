// The compiler: elementwise fusion, arena planning, and compiled == eager.
#include <gtest/gtest.h>

#include "graph/backend.h"
#include "graph/builder.h"
#include "graph/cache.h"
#include "graph/plan.h"
#include "support/fixtures.h"
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

TEST(Compile, FusesElementwiseChainIntoOneNode) {
  const graph::Plan plan = graph::plan_graph(mlp_like_graph());
  int elementwise = 0;
  for (graph::ValueId id : plan.schedule) {
    if (plan.graph.nodes[static_cast<size_t>(id)].op == Op::kElementwise) ++elementwise;
  }
  EXPECT_EQ(elementwise, 1) << "silu, mul and add should run as one fused node";
}

TEST(Compile, UnfusedPlanKeepsEveryNode) {
  const graph::Plan plan = graph::plan_graph(mlp_like_graph(), {.fuse = false});
  EXPECT_EQ(plan.schedule.size(), 5u);
}

TEST(Compile, ArenaReusesDeadBuffers) {
  graph::Builder b;
  auto x = b.input("x", {16, 256}, DType::f32);
  for (int i = 0; i < 10; ++i) x = b.silu(b.reshape(x, {16, 256}));
  b.output(x);
  const graph::Plan plan = graph::plan_graph(b.finish(), {.fuse = false});
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
  const graph::Plan plan = graph::plan_graph(b.finish(), {.fuse = false});
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
  const auto compiled = cpu.compile(graph::plan_graph(g));
  compiled->run({in, sums});
  const std::vector<Tensor> out = compiled->run({in, sums});
  cpu.run_eager(g, {in, sums});
  EXPECT_EQ(sums.to_f32_vector(), (std::vector<float>{9, 18, 27, 36, 45, 54}));
  ASSERT_EQ(out.size(), 1u);
  EXPECT_EQ(out[0].to_f32_vector(), (std::vector<float>{5, 7, 9}));
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
  EXPECT_NE(log.find("warning: tiny has compiled 3 graphs"), std::string::npos) << log;
}

}  // namespace
}  // namespace tfm
