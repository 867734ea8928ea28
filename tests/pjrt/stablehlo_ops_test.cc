// Every module tfm emits stays inside the StableHLO subset AWS Neuron's compiler takes
// (pjrt::neuron_ops): the decoder's prefill, decode and greedy-id graphs and its training step,
// of each fixture, that step also as the Trainer lays it out (weights and gradients parts of flat
// buffers), and the optimizer's graphs (AdamW over parts of flat buffers, the gradient norm).
#include <gtest/gtest.h>

#include "backends/pjrt/stablehlo.h"
#include "io/model_config.h"
#include "models/architectures.h"
#include "models/decoder.h"
#include "models/init_weights.h"
#include "pjrt/flat_placements.h"
#include "support/fixtures.h"
#include "training/adamw.h"
#include "training/grad_clip.h"

namespace tfm {
namespace {

struct Step {
  const char* name;
  graph::Signature signature;
};

void expect_neuron_ops(const graph::Graph& g, const pjrt::Placements& placements = {},
                       bool products = true) {
  const std::set<std::string> used = pjrt::op_names(pjrt::emit_stablehlo(g, placements).text);
  if (products) {
    EXPECT_TRUE(used.count("stablehlo.dot_general")) << "the products are missing";
  }
  for (const std::string& op : used) {
    EXPECT_TRUE(pjrt::neuron_ops().count(op)) << op << " is outside Neuron's subset";
  }
}

size_t aliased_arguments(const std::string& text) {
  size_t aliased = 0;
  for (size_t at = text.find("tf.aliasing_output"); at != std::string::npos;
       at = text.find("tf.aliasing_output", at + 1)) {
    ++aliased;
  }
  return aliased;
}

class StableHloOpsTest : public ::testing::TestWithParam<std::string> {};

TEST_P(StableHloOpsTest, DecoderGraphsUseOnlyNeuronOps) {
  const std::string dir = testing::fixture_dir(GetParam());
  const ModelConfig c = load_model_config(dir + "/config.json");
  const models::DecoderFeatures f = models::features_for(c, dir);
  models::DecoderWeights w = models::init_weights(c, f, 1);
  const Step steps[] = {
      {"prefill", {.batch = 2, .seq = 5, .cache_len = 8, .all_logits = true}},
      {"decode", {.batch = 2, .seq = 1, .cache_len = 8}},
      {"greedy decode", {.batch = 2, .seq = 1, .cache_len = 8, .argmax = true}},
  };
  for (const Step& step : steps) {
    SCOPED_TRACE(step.name);
    const graph::Graph g = models::build_decoder_graph(
        c, f, w, models::rope_tables(c, step.signature.cache_len), step.signature, DType::bf16);
    expect_neuron_ops(g);
    // Every cache the step writes is returned where its argument was donated.
    EXPECT_EQ(g.updates.size(), static_cast<size_t>(2 * c.num_hidden_layers));
    EXPECT_EQ(aliased_arguments(pjrt::emit_stablehlo(g).text), g.updates.size());
  }
  SCOPED_TRACE("train step");
  const graph::Graph train =
      models::build_decoder_training_graph(c, f, w, models::rope_tables(c, 6), 2, 6);
  expect_neuron_ops(train);
  EXPECT_EQ(aliased_arguments(pjrt::emit_stablehlo(train).text), train.updates.size())
      << "each gradient accumulated where it lives";

  SCOPED_TRACE("train step over flat buffers");
  const pjrt::Placements flat = testing::flat_placements(train);
  expect_neuron_ops(train, flat);
  EXPECT_EQ(aliased_arguments(pjrt::emit_stablehlo(train, flat).text), 1u)
      << "the gradients' one buffer, donated";
}

// The optimizer's graphs (training/adamw.h, training/grad_clip.h): AdamW over two runs of flat
// buffers (one decayed), each written buffer's update after both, and the sum of squares of two
// ranges of the gradients.
TEST(StableHloOps, OptimizerGraphsUseOnlyNeuronOps) {
  const std::vector<training::ParamSegment> runs{{0, 6, true}, {6, 4, false}};
  const graph::Graph update = training::update_graph(runs, 10);
  expect_neuron_ops(update, {}, false);
  EXPECT_EQ(aliased_arguments(pjrt::emit_stablehlo(update).text), 3u);
  expect_neuron_ops(training::squares_graph(runs, 10), {}, false);
}

INSTANTIATE_TEST_SUITE_P(Fixtures, StableHloOpsTest,
                         ::testing::Values("qwen3", "llama", "qwen2", "qwen3-yarn"),
                         [](const auto& info) {
                           std::string name = info.param;
                           for (char& ch : name) ch = ch == '-' ? '_' : ch;
                           return name;
                         });

}  // namespace
}  // namespace tfm
