// Collective graph nodes in a world of one rank, on the CPU (gloo) and, where a GPU is present, on
// CUDA through NCCL (skipped, and said so, where not). One GPU allows no more ranks; each
// collective is then the identity, a closed form the compiled (on CUDA, captured) and eager runs
// must both give: on CUDA this proves the NCCL path is built, starts (its id broadcast over the
// gloo group) and runs inside a CUDA Graph.
#include <gtest/gtest.h>

#include <memory>

#include "distributed/process_group.h"
#include "fusion/plan.h"
#include "graph/backend.h"
#include "graph/builder.h"
#include "support/run_binary.h"
#include "tfm/device.h"

namespace tfm {
namespace {

// x [4, 6] -> scale 2 -> every collective in turn; also the vocabulary shard embedding that
// tensor parallelism pairs with them (rows 3..5 of the vocabulary on this "rank").
graph::Graph collectives_graph(const std::shared_ptr<graph::Communicator>& world,
                               const Tensor& table) {
  const std::shared_ptr<const graph::CollectiveGroup> group = graph::world_group(world);
  graph::Builder b;
  const auto x = b.input("x", {4, 6}, DType::f32);
  const auto ids = b.input("ids", {1, 4}, DType::i32);
  auto y = b.scale(x, 2.f);
  y = b.all_reduce(y, group);
  y = b.all_gather(y, group);
  y = b.gather_shards(y, group);
  y = b.reduce_scatter(y, group);
  y = b.sum_over_replicas(y, 1, group);
  y = b.copy_to_group(y, group);
  b.output(b.scale(y, 1.f));
  b.output(b.embedding_shard(b.weight("table", table), ids, 3));
  return b.finish();
}

class CollectivesInAWorldOfOne : public ::testing::TestWithParam<std::string> {};

TEST_P(CollectivesInAWorldOfOne, GiveTheIdentityCompiledAndEager) {
  if (!is_available(GetParam())) GTEST_SKIP() << "no " << GetParam() << " device present";
  const Device device = resolve_device(GetParam());
  auto group = std::make_shared<distributed::ProcessGroup>(distributed::ProcessGroupOptions{
      .rank = 0, .world_size = 1, .master_port = std::stoi(testing::test_port(40))});
  std::vector<float> x(24), rows(3 * 2);
  for (size_t i = 0; i < x.size(); ++i) x[i] = static_cast<float>(i) - 7.5f;
  for (size_t i = 0; i < rows.size(); ++i) rows[i] = 100.f + static_cast<float>(i);
  const Tensor table = Tensor::from_vector(rows, {3, 2});
  const std::vector<Tensor> inputs{Tensor::from_vector(x, {4, 6}),
                                   Tensor::from_vector<int32_t>({0, 3, 5, 6}, {1, 4})};
  // ids 0 and 6 belong to other ranks' shards: zero rows.
  const std::vector<float> embedded{0, 0, 100, 101, 104, 105, 0, 0};
  std::vector<float> doubled(x);
  for (float& v : doubled) v *= 2.f;

  graph::Backend& backend = graph::backend_for(device);
  const auto compiled = backend.compile(collectives_graph(group, table));
  for (int run = 0; run < 2; ++run) {  // the second replays the captured graph
    const std::vector<Tensor> out = compiled->run(inputs).outputs;
    EXPECT_EQ(out.at(0).to_f32_vector(), doubled) << "run " << run;
    EXPECT_EQ(out.at(1).to_f32_vector(), embedded) << "run " << run;
  }
  const std::vector<Tensor> eager = backend.run_eager(collectives_graph(group, table), inputs);
  EXPECT_EQ(eager.at(0).to_f32_vector(), doubled);
  EXPECT_EQ(eager.at(1).to_f32_vector(), embedded);
}

INSTANTIATE_TEST_SUITE_P(Devices, CollectivesInAWorldOfOne, ::testing::Values("cpu", "cuda"),
                         [](const auto& info) { return info.param; });

}  // namespace
}  // namespace tfm
