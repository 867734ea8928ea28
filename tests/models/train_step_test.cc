// One training step's loss and gradients against transformers + PyTorch (the fixtures' train_loss0
// and grad_norms: labels = input_ids, one backward), compiled (fused), eagerly and compiled with
// every fusion off, on each device; the CUDA cases skip where no GPU is present, the PJRT ones
// (the graph as StableHLO, compiled by XLA's CPU plugin) where the tests did not install it.
#include <gtest/gtest.h>

#include <cmath>

#include "models/causal_lm.h"
#include "support/devices.h"
#include "support/fixtures.h"
#include "tfm/device.h"
#include "tfm/log.h"
#include "training/causal_lm_batch.h"

namespace tfm {
namespace {

double l2_norm(const Tensor& t) {
  double sum = 0;
  for (float v : t.to_f32_vector()) sum += static_cast<double>(v) * v;
  return std::sqrt(sum);
}

TrainInputs train_inputs(const testing::FixtureBatch& b) {
  return training::make_train_inputs(b.input_ids, b.attention_mask, b.input_ids, b.targets);
}

// Test names: "qwen3_eager" on the cpu, "cuda_qwen3_eager" on CUDA.
std::string device_prefix(const std::string& device) { return device == "cpu" ? "" : device + "_"; }

// Parameters: architecture, mode, device, and the token rows the loss takes at a time (0: all
// of the fixture's at once; 5: five chunks, the last a short one).
using testing::Mode;

class TrainStep
    : public ::testing::TestWithParam<std::tuple<std::string, Mode, std::string, int64_t>> {};

TEST_P(TrainStep, LossAndGradNormsMatchTransformers) {
  const auto& [arch, mode, device, chunk_rows] = GetParam();
  if (!testing::device_present(device)) GTEST_SKIP() << "no " << device << " device present";
  set_log_level(LogLevel::kWarn);
  auto model =
      load_causal_lm(testing::fixture_dir(arch),
                     {.dtype = DType::f32, .device_map = device, .fuse = mode != Mode::kUnfused});
  const bool eager = mode == Mode::kEager;
  model->set_loss_chunk_rows(chunk_rows);
  const nlohmann::json& ref = testing::reference(arch);
  const testing::FixtureBatch batch = testing::fixture_batch(arch);
  const LossAndGrads out = model->train_step(train_inputs(batch), eager);

  const double loss = batch.mean_loss(out.loss_sum);
  const double expected_loss = ref["train_loss0"].get<double>();
  EXPECT_NEAR(loss, expected_loss, 1e-5 * expected_loss);

  size_t i = 0;
  int compared = 0;
  model->for_each_weight([&](const std::string& name, Tensor&, const Shape& shape) {
    const Tensor& grad = out.grads.at(i++);
    ASSERT_EQ(grad.shape(), shape) << name;
    ASSERT_TRUE(ref["grad_norms"].contains(name)) << name;
    const double expected = ref["grad_norms"][name].get<double>();
    EXPECT_NEAR(l2_norm(grad), expected, 1e-4 * expected) << name;
    ++compared;
  });
  EXPECT_EQ(compared, static_cast<int>(ref["grad_norms"].size()));
}

using Case = std::tuple<std::string, Mode, std::string, int64_t>;

std::vector<Case> cases() {
  std::vector<Case> all;
  for (const char* arch : {"qwen3", "llama", "mistral", "mixtral", "qwen3-moe"}) {
    for (const int64_t chunk_rows : {int64_t{0}, int64_t{5}}) {
      for (const char* device : {"cpu", "cuda"}) {
        for (const Mode mode : {Mode::kCompiled, Mode::kEager, Mode::kUnfused}) {
          all.emplace_back(arch, mode, device, chunk_rows);
        }
      }
      // A compiler backend has one mode: the graph compiled whole.
      all.emplace_back(arch, Mode::kCompiled, "pjrt", chunk_rows);
    }
  }
  return all;
}

INSTANTIATE_TEST_SUITE_P(Fixtures, TrainStep, ::testing::ValuesIn(cases()), [](const auto& info) {
  return device_prefix(std::get<2>(info.param)) + testing::test_name(std::get<0>(info.param)) +
         "_" + testing::mode_name(std::get<1>(info.param)) +
         (std::get<3>(info.param) > 0 ? "_loss_in_chunks" : "");
});

// bf16 autocast: the same step with matrix products in bf16 stays within bf16's precision of the
// f32 reference (the fixtures README's 2e-2 relative for bf16 compute).
class TrainStepBf16 : public ::testing::TestWithParam<std::string> {};

TEST_P(TrainStepBf16, StaysWithinBf16PrecisionOfTransformers) {
  const std::string& device = GetParam();
  if (!testing::device_present(device)) GTEST_SKIP() << "no " << device << " device present";
  set_log_level(LogLevel::kWarn);
  for (const std::string arch : {"qwen3", "llama", "mistral", "mixtral", "qwen3-moe"}) {
    auto model =
        load_causal_lm(testing::fixture_dir(arch), {.dtype = DType::f32, .device_map = device});
    const nlohmann::json& ref = testing::reference(arch);
    const testing::FixtureBatch batch = testing::fixture_batch(arch);
    const LossAndGrads out = model->train_step(train_inputs(batch), false, true, DType::bf16);
    const LossAndGrads eager = model->train_step(train_inputs(batch), true, true, DType::bf16);
    auto basic = load_causal_lm(testing::fixture_dir(arch),
                                {.dtype = DType::f32, .device_map = device, .fuse = false});
    const LossAndGrads unfused = basic->train_step(train_inputs(batch), false, true, DType::bf16);
    const double expected_loss = ref["train_loss0"].get<double>();
    EXPECT_NEAR(batch.mean_loss(out.loss_sum), expected_loss, 2e-2 * expected_loss) << arch;
    EXPECT_NE(batch.mean_loss(out.loss_sum), expected_loss) << "bf16 changed nothing";
    EXPECT_EQ(out.loss_sum, eager.loss_sum) << arch;
    EXPECT_EQ(unfused.loss_sum, eager.loss_sum) << arch << ": every fusion off";
    size_t i = 0;
    model->for_each_weight([&](const std::string& name, Tensor&, const Shape&) {
      const double expected = ref["grad_norms"][name].get<double>();
      EXPECT_NEAR(l2_norm(out.grads.at(i++)), expected, 2e-2 * expected) << arch << " " << name;
    });
  }
}

INSTANTIATE_TEST_SUITE_P(Devices, TrainStepBf16, ::testing::Values("cpu", "cuda", "pjrt"),
                         [](const auto& info) { return info.param; });

}  // namespace
}  // namespace tfm
