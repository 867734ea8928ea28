// A DistributedConfig on the pjrt device: one process runs each graph as one program partitioned
// over the CPU plugin's devices (XLA's SPMD partitioner). The logits of the fixtures against
// transformers' and against the same model on one device, greedy ids against transformers', the
// shardings' text against XLA's format, and the modules against Neuron's op subset.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cmath>
#include <cstdlib>
#include <string_view>

#include "backends/pjrt/sharding.h"
#include "backends/pjrt/stablehlo.h"
#include "io/model_config.h"
#include "models/architectures.h"
#include "models/decoder.h"
#include "models/init_weights.h"
#include "models/tensor_parallel.h"
#include "pjrt/flat_placements.h"
#include "support/fixtures.h"
#include "tfm/device.h"
#include "tfm/error.h"
#include "tfm/log.h"
#include "tfm/model.h"

namespace tfm {
namespace {

using ::testing::AllOf;
using ::testing::HasSubstr;

constexpr int kDevices = 4;

// The plugin opened with four devices; false (the test skips) where there is no plugin, or this
// process opened it earlier with fewer (gtest run outside ctest, which gives each test a process).
bool four_devices() {
  if (std::string_view(TFM_TEST_PJRT_PLUGIN).empty()) return false;
  use_device_plugin("pjrt", TFM_TEST_PJRT_PLUGIN, {.device_count = kDevices, .compile_cache = ""});
  return device_count("pjrt") >= kDevices;
}

float max_abs_diff(const Tensor& a, const Tensor& b) {
  const std::vector<float> x = a.to_f32_vector(), y = b.to_f32_vector();
  if (x.size() != y.size()) return INFINITY;
  float worst = 0;
  for (size_t i = 0; i < x.size(); ++i) worst = std::max(worst, std::fabs(x[i] - y[i]));
  return worst;
}

Tensor reference_logits(const std::string& arch) {
  std::vector<float> values;
  for (const auto& row : testing::reference(arch)["logits"])
    for (const auto& position : row)
      for (const auto& v : position) values.push_back(v.get<float>());
  const Tensor ids = testing::int_matrix(testing::reference(arch)["input_ids"]);
  return Tensor::from_vector(values, {ids.dim(0), ids.dim(1),
                                      static_cast<int64_t>(values.size()) / ids.numel()});
}

struct Layout {
  std::string arch;
  int tp, fsdp;

  friend void PrintTo(const Layout& l, std::ostream* os) {
    *os << l.arch << " tp=" << l.tp << " fsdp=" << l.fsdp;
  }
};

class PartitionedTest : public ::testing::TestWithParam<Layout> {};

// The fixtures' batch of 2 rows splits over fsdp=2; tp=4 over qwen2's 2 KV heads leaves the KV
// projections split by rows, and its vocabulary of 1024 splits 4 ways.
TEST_P(PartitionedTest, LogitsAndGreedyIdsAreTransformers) {
  if (!four_devices()) GTEST_SKIP() << "XLA's CPU plugin with 4 devices is not available here";
  set_log_level(LogLevel::kWarn);
  const Layout& l = GetParam();
  const std::string dir = testing::fixture_dir(l.arch);
  CausalLM whole =
      AutoModelForCausalLM::from_pretrained(dir, {.dtype = DType::f32, .device_map = "pjrt"});
  CausalLM parts = AutoModelForCausalLM::from_pretrained(
      dir, {.dtype = DType::f32, .device_map = "pjrt", .distributed = {l.tp, l.fsdp}});
  const nlohmann::json& ref = testing::reference(l.arch);
  const Tensor ids = testing::int_matrix(ref["input_ids"]);
  const Tensor logits = parts.forward(ids);
  EXPECT_LT(max_abs_diff(logits, whole.forward(ids)), 1e-5f) << "against one device";
  EXPECT_LT(max_abs_diff(logits, reference_logits(l.arch)), 1e-4f) << "against transformers";

  const Tensor padded = testing::int_matrix(ref["padded_input_ids"]);
  const Tensor mask = testing::int_matrix(ref["padded_attention_mask"]);
  GenerationConfig gc;
  gc.max_new_tokens = 16;
  EXPECT_EQ(parts.generate(padded, &mask, gc).to_f32_vector(),
            testing::int_matrix(ref["greedy_16"]).to_f32_vector());
}

INSTANTIATE_TEST_SUITE_P(Fixtures, PartitionedTest,
                         ::testing::Values(Layout{"qwen3", 2, 2}, Layout{"qwen2", 4, 1},
                                           Layout{"llama", 1, 4}),
                         [](const auto& info) {
                           return info.param.arch + "_tp" + std::to_string(info.param.tp) +
                                  "_fsdp" + std::to_string(info.param.fsdp);
                         });

// After a partitioned run each weight lies in blocks, whole norms held by every device: saving
// joins them back into the checkpoint one device loads.
TEST(PartitionedWeights, SaveAsTheyLoaded) {
  if (!four_devices()) GTEST_SKIP() << "XLA's CPU plugin with 4 devices is not available here";
  set_log_level(LogLevel::kWarn);
  const std::string dir = testing::fixture_dir("qwen2");
  CausalLM parts = AutoModelForCausalLM::from_pretrained(
      dir, {.dtype = DType::f32, .device_map = "pjrt", .distributed = {2, 2}});
  const Tensor ids = testing::int_matrix(testing::reference("qwen2")["input_ids"]);
  const Tensor logits = parts.forward(ids);
  const std::string saved = ::testing::TempDir() + "tfm-partitioned-saved";
  parts.save_pretrained(saved);
  CausalLM whole =
      AutoModelForCausalLM::from_pretrained(saved, {.dtype = DType::f32, .device_map = "pjrt"});
  EXPECT_LT(max_abs_diff(whole.forward(ids), logits), 1e-5f);
}

TEST(PartitionedErrors, MoreDevicesThanThePluginHasAreNamed) {
  if (!four_devices()) GTEST_SKIP() << "XLA's CPU plugin with 4 devices is not available here";
  CausalLM model = AutoModelForCausalLM::from_pretrained(
      testing::fixture_dir("qwen3"),
      {.dtype = DType::f32, .device_map = "pjrt", .distributed = {4, 2}});
  const Tensor ids = testing::int_matrix(testing::reference("qwen3")["input_ids"]);
  EXPECT_THAT([&] { model.forward(ids); },
              ::testing::ThrowsMessage<Error>(AllOf(HasSubstr("partitioned over 8 devices"),
                                                    HasSubstr("has 4"),
                                                    HasSubstr("--pjrt-devices"))));
}

TEST(PartitionedErrors, UnderALauncherIsRefused) {
  if (!four_devices()) GTEST_SKIP() << "XLA's CPU plugin with 4 devices is not available here";
  if (std::getenv("WORLD_SIZE") != nullptr) GTEST_SKIP() << "running under a launcher";
  ::setenv("WORLD_SIZE", "4", 1);
  EXPECT_THAT(
      [] {
        AutoModelForCausalLM::from_pretrained(
            testing::fixture_dir("qwen3"),
            {.dtype = DType::f32, .device_map = "pjrt", .distributed = {2, 2}});
      },
      ::testing::ThrowsMessage<Error>(HasSubstr("start it without tfmrun")));
  ::unsetenv("WORLD_SIZE");
}

// XLA's tiled sharding text (xla/hlo/ir/hlo_sharding.cc): the tile array's shape, then its
// devices in row-major order, replicas as a last tile axis.
TEST(Sharding, TextIsXlasTiledFormat) {
  const std::vector<graph::MeshAxis> mesh{{"fsdp", 2}, {"tp", 2}};
  // Device d = fsdp x 2 + tp. Rows over tp, columns over fsdp: tile (i, j) is device j x 2 + i.
  EXPECT_EQ(pjrt::Sharding({6, 8}, mesh, {{"tp"}, {"fsdp"}}).text(), "{devices=[2,2]0,2,1,3}");
  EXPECT_EQ(pjrt::Sharding({6, 8}, mesh, {{"fsdp"}, {"tp"}}).text(), "{devices=[2,2]0,1,2,3}");
  // Rows over fsdp alone: devices 0 and 1 hold block 0, as replicas.
  EXPECT_EQ(pjrt::Sharding({4, 3}, mesh, {{"fsdp"}}).text(),
            "{devices=[2,1,2]0,1,2,3 last_tile_dim_replicate}");
  EXPECT_EQ(pjrt::Sharding({4, 3}, mesh, {{}, {"tp"}}).text(), "{replicated}")
      << "3 columns do not split over 2 devices: whole";
  EXPECT_EQ(pjrt::Sharding({8}, mesh, {{"fsdp", "tp"}}).text(), "{devices=[4]0,1,2,3}");
  EXPECT_EQ(pjrt::Sharding({5, 2}, mesh).text(), "{replicated}");
}

TEST(Sharding, BlocksJoinBackIntoTheWhole) {
  const std::vector<graph::MeshAxis> mesh{{"fsdp", 2}, {"tp", 2}};
  const pjrt::Sharding s({4, 6, 2}, mesh, {{"fsdp"}, {}, {"tp"}});
  ASSERT_EQ(s.block_shape(), (Shape{2, 6, 1}));
  std::vector<float> whole(48);
  for (size_t i = 0; i < whole.size(); ++i) whole[i] = static_cast<float>(i);
  std::vector<std::vector<float>> blocks(kDevices, std::vector<float>(12));
  std::vector<const void*> views;
  for (int d = 0; d < kDevices; ++d) {
    s.cut(whole.data(), sizeof(float), d, blocks[static_cast<size_t>(d)].data());
    views.push_back(blocks[static_cast<size_t>(d)].data());
  }
  // Device 3 = (fsdp 1, tp 1): rows 2-3 of axis 0, column 1 of the last axis.
  EXPECT_EQ(blocks[3][0], whole[(2 * 6 + 0) * 2 + 1]);
  EXPECT_EQ(blocks[3][11], whole[(3 * 6 + 5) * 2 + 1]);
  std::vector<float> joined(48, -1.f);
  s.join(views, sizeof(float), joined.data());
  EXPECT_EQ(joined, whole);
}

void expect_neuron_ops(const std::string& text) {
  for (const std::string& op : pjrt::op_names(text)) {
    EXPECT_TRUE(pjrt::neuron_ops().count(op)) << op << " is outside Neuron's subset";
  }
  EXPECT_THAT(text, HasSubstr("mhlo.num_partitions = 4"));
}

// A partitioned decode step emits the ops of an unpartitioned one (the compiler adds the
// collectives), with each split argument's sharding and the partition count; so does a training
// step, its weights and gradients parts of flat buffers (the Trainer's), each split in 4 runs.
TEST(PartitionedModules, UseOnlyNeuronOpsAndCarryTheirShardings) {
  const std::string dir = testing::fixture_dir("qwen3");
  const ModelConfig c = load_model_config(dir + "/config.json");
  const models::DecoderFeatures f = models::features_for(c, dir);
  models::DecoderWeights w = models::init_weights(c, f, 1);
  const graph::Signature decode{.batch = 2, .seq = 1, .cache_len = 8};
  const graph::Graph g = models::build_decoder_graph(c, f, w, models::rope_tables(c, 8), decode,
                                                     DType::f32);
  const graph::Partitioning p = models::partitioning(2, 2);
  const std::string text =
      pjrt::emit_stablehlo(g, {}, pjrt::partitions_of(pjrt::argument_shardings(g, p), 4)).text;
  expect_neuron_ops(text);
  // q_proj [64 x 64]: rows over tp, columns over fsdp; a KV cache [2, 8, 2, 16]: batch over fsdp,
  // heads over tp, and its update split as it is.
  EXPECT_THAT(text, HasSubstr("{devices=[2,2]0,2,1,3}"));
  EXPECT_THAT(text, HasSubstr("{devices=[2,1,2,1]0,1,2,3}"));

  const graph::Graph train =
      models::build_decoder_training_graph(c, f, w, models::rope_tables(c, 6), 2, 6);
  const pjrt::Placements flat = testing::flat_placements(train, /*matrices_only=*/true);
  int64_t weights = 0;
  for (const auto& [id, placed] : flat) weights = placed.buffer == 0 ? placed.size : weights;
  ASSERT_EQ(weights % 4, 0);
  const std::string step =
      pjrt::emit_stablehlo(train, flat,
                           pjrt::partitions_of(pjrt::argument_shardings(train, p, flat), 4))
          .text;
  expect_neuron_ops(step);
  EXPECT_THAT(step, HasSubstr("tensor<" + std::to_string(weights) +
                              "xf32> {mhlo.sharding = \"{devices=[4]0,1,2,3}\"}"));
}

}  // namespace
}  // namespace tfm
