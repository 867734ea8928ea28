// Every fused op against the basic ops it stands for (ops/decompose.h): a decoder's inference
// graphs, fused by the CPU backend's passes and run by its fused kernels, equal the decomposition
// of that fused graph run op by op, logits and caches alike; the decomposition holds no fused op.
#include "ops/decompose.h"

#include <gtest/gtest.h>

#include <random>

#include "backends/cpu/cpu_backend.h"
#include "graph/op_args.h"
#include "io/model_config.h"
#include "models/architectures.h"
#include "models/decoder.h"
#include "models/init_weights.h"
#include "support/fixtures.h"
#include "support/random_values.h"

namespace tfm {
namespace {

using graph::Node;
using graph::Op;

bool fused(const Node& n) {
  return n.op == Op::kQkvLinear || n.op == Op::kGatedLinear || n.op == Op::kPrepareAttention ||
         (n.op == Op::kLinear && n.residual) || (n.op == Op::kRope && n.normed);
}

int count_fused(const graph::Graph& graph, const std::vector<graph::ValueId>& steps) {
  int count = 0;
  for (graph::ValueId id : steps) count += fused(graph.nodes[static_cast<size_t>(id)]);
  return count;
}

// The decoder graph's inputs for `seq` new tokens a row at the start of a `len`-slot cache.
std::vector<Tensor> step_inputs(const ModelConfig& c, int64_t batch, int64_t seq, int64_t len) {
  std::mt19937 rng(3);
  std::vector<int32_t> ids, positions, slots, mask(static_cast<size_t>(batch * len), 0);
  for (int64_t i = 0; i < batch * seq; ++i) {
    ids.push_back(static_cast<int32_t>(rng() % static_cast<uint32_t>(c.vocab_size)));
    positions.push_back(static_cast<int32_t>(i % seq));
  }
  for (int64_t s = 0; s < seq; ++s) slots.push_back(static_cast<int32_t>(s));
  for (int64_t b = 0; b < batch; ++b) {
    for (int64_t s = 0; s < seq; ++s) mask[static_cast<size_t>(b * len + s)] = 1;
  }
  std::vector<Tensor> inputs{
      Tensor::from_vector(ids, {batch, seq}), Tensor::from_vector(positions, {batch, seq}),
      Tensor::from_vector(slots, {seq}), Tensor::from_vector(mask, {batch, len})};
  for (int64_t i = 0; i < 2 * c.num_hidden_layers; ++i) {
    inputs.push_back(testing::random_tensor({batch, len, c.num_key_value_heads, c.head_dim}, rng));
  }
  return inputs;
}

std::vector<Tensor> copies(const std::vector<Tensor>& tensors) {
  std::vector<Tensor> out;
  for (const Tensor& t : tensors) out.push_back(t.clone());
  return out;
}

class DecomposeTest : public ::testing::TestWithParam<std::string> {};

TEST_P(DecomposeTest, FusedKernelsEqualTheirBasicOps) {
  const std::string dir = testing::fixture_dir(GetParam());
  const ModelConfig c = load_model_config(dir + "/config.json");
  const models::DecoderFeatures f = models::features_for(c, dir);
  const models::DecoderWeights w = models::init_weights(c, f, 1);
  for (const int64_t seq : {1, 5}) {
    graph::Signature signature{.batch = 2, .seq = seq, .cache_len = 8, .all_logits = true};
    const fusion::Plan plan = cpu::cpu_plan(models::build_decoder_graph(
        c, f, w, models::rope_tables(c, signature.cache_len), signature, DType::f32));
    const int fused_steps = count_fused(plan.graph, plan.schedule);
    // Per layer: q, k and v's product, prepare_attention, o_proj + residual, the gated product,
    // down_proj + residual.
    EXPECT_EQ(fused_steps, 5 * c.num_hidden_layers) << "seq " << seq;
    const graph::Graph basic = ops::decompose(plan.graph);
    std::vector<graph::ValueId> all(basic.nodes.size());
    for (size_t i = 0; i < all.size(); ++i) all[i] = static_cast<graph::ValueId>(i);
    EXPECT_EQ(count_fused(basic, all), 0) << "seq " << seq;

    const std::vector<Tensor> inputs = step_inputs(c, signature.batch, seq, signature.cache_len);
    std::vector<Tensor> fused_inputs = copies(inputs), basic_inputs = copies(inputs);
    const std::vector<Tensor> want = cpu::cpu_backend().run_eager(basic, basic_inputs);
    const std::vector<Tensor> got = cpu::cpu_executable(plan)->run(fused_inputs).outputs;
    testing::expect_close(got.at(0).to_f32_vector(), want.at(0).to_f32_vector(), 1e-5f,
                          "logits, seq " + std::to_string(seq));
    for (size_t i = 4; i < inputs.size(); ++i) {
      testing::expect_close(fused_inputs[i].to_f32_vector(), basic_inputs[i].to_f32_vector(), 1e-6f,
                            "cache " + std::to_string(i - 4) + ", seq " + std::to_string(seq));
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Fixtures, DecomposeTest, ::testing::Values("qwen3", "llama", "qwen2"),
                         [](const auto& info) { return info.param; });

}  // namespace
}  // namespace tfm
