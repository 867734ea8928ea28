// Three AdamW steps on the fixtures against torch.optim.AdamW (the fixtures' adamw losses: the
// loss after each update, on the same batch, every parameter decayed), compiled and eager, on the
// CPU and, where present, on CUDA and through the PJRT test plugin (master weights, gradients
// and moments on the device).
#include <gtest/gtest.h>

#include "models/causal_lm.h"
#include "support/devices.h"
#include "support/fixtures.h"
#include "tfm/device.h"
#include "tfm/log.h"
#include "training/adamw.h"
#include "training/causal_lm_batch.h"
#include "training/flat_parameters.h"

namespace tfm {
namespace {

class AdamWSteps : public ::testing::TestWithParam<std::tuple<std::string, bool, std::string>> {};

TEST_P(AdamWSteps, LossesMatchTorch) {
  const auto& [arch, eager, device] = GetParam();
  if (!testing::device_present(device)) GTEST_SKIP() << "no " << device << " device present";
  if (device == "pjrt" && eager) GTEST_SKIP() << "pjrt has no op-by-op mode: eager is compiled";
  set_log_level(LogLevel::kWarn);
  auto model =
      load_causal_lm(testing::fixture_dir(arch), {.dtype = DType::f32, .device_map = device});
  training::FlatParameters params(*model);
  const nlohmann::json& ref = testing::reference(arch);
  const nlohmann::json& hp = ref["adamw"];
  training::AdamW optimizer(params.segments(/*decay_all=*/true), params.size(),
                            {.lr = hp["lr"].get<double>(),
                             .beta1 = hp["betas"][0].get<double>(),
                             .beta2 = hp["betas"][1].get<double>(),
                             .eps = hp["eps"].get<double>(),
                             .weight_decay = hp["weight_decay"].get<double>()},
                            params.device());
  const testing::FixtureBatch batch = testing::fixture_batch(arch);
  const TrainInputs in = training::make_train_inputs(batch.input_ids, batch.attention_mask,
                                                     batch.input_ids, batch.targets);

  for (const auto& expected : hp["losses_after_steps_1_2_3"]) {
    params.zero_grads();
    model->train_step_into(in, params.grad_blocks(), eager);
    optimizer.step(params.values(), params.grads(), optimizer.options().lr);
    const double loss = batch.mean_loss(model->train_step(in, eager).loss_sum);
    EXPECT_NEAR(loss, expected.get<double>(), 1e-4 * expected.get<double>())
        << "after step " << optimizer.steps_taken();
  }
}

INSTANTIATE_TEST_SUITE_P(
    Fixtures, AdamWSteps,
    ::testing::Combine(::testing::Values("qwen3", "llama", "mistral", "mixtral", "qwen3-moe"),
                       ::testing::Bool(), ::testing::Values("cpu", "cuda", "pjrt")),
    [](const auto& info) {
      const std::string& device = std::get<2>(info.param);
      return (device == "cpu" ? "" : device + "_") + testing::test_name(std::get<0>(info.param)) +
             (std::get<1>(info.param) ? "_eager" : "_compiled");
    });

TEST(Decay, FollowsTheTransformersTrainer) {
  EXPECT_TRUE(training::decays("model.layers.0.self_attn.q_proj.weight"));
  EXPECT_TRUE(training::decays("model.embed_tokens.weight"));
  EXPECT_TRUE(training::decays("lm_head.weight"));
  EXPECT_FALSE(training::decays("model.layers.0.self_attn.q_proj.bias"));
  EXPECT_FALSE(training::decays("model.layers.0.input_layernorm.weight"));
  EXPECT_FALSE(training::decays("model.layers.0.post_attention_layernorm.weight"));
  EXPECT_FALSE(training::decays("model.layers.0.self_attn.q_norm.weight"));
  EXPECT_FALSE(training::decays("model.norm.weight"));
}

}  // namespace
}  // namespace tfm
