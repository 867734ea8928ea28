// save_pretrained writes what from_pretrained reads back, and a model from a config starts as
// transformers initializes one.
#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>

#include "io/checkpoint.h"
#include "io/model_config.h"
#include "support/fixtures.h"
#include "tfm/log.h"
#include "tfm/model.h"

namespace tfm {
namespace {

std::filesystem::path temp_dir(const std::string& name) {
  const auto dir = std::filesystem::temp_directory_path() / ("tfm_save_" + name);
  std::filesystem::remove_all(dir);
  return dir;
}

TEST(SavePretrained, ReloadedModelGivesTheReferenceLogits) {
  set_log_level(LogLevel::kWarn);
  for (const std::string arch : {"qwen3", "llama"}) {
    const auto dir = temp_dir(arch);
    AutoModelForCausalLM::from_pretrained(testing::fixture_dir(arch),
                                          {.dtype = DType::f32, .device_map = "cpu"})
        .save_pretrained(dir.string());
    // A tied lm_head is left out, as transformers saves it.
    EXPECT_EQ(Checkpoint::open(dir).contains("lm_head.weight"), arch == "llama");
    CausalLM reloaded = AutoModelForCausalLM::from_pretrained(dir.string(), {.device_map = "cpu"});
    EXPECT_EQ(reloaded.dtype(), DType::f32);
    const nlohmann::json& ref = testing::reference(arch);
    const std::vector<float> logits =
        reloaded.forward(testing::int_matrix(ref["input_ids"])).to_f32_vector();
    size_t i = 0;
    for (const auto& row : ref["logits"])
      for (const auto& position : row)
        for (const auto& v : position) ASSERT_NEAR(logits[i++], v.get<float>(), 1e-4) << arch;
    std::filesystem::remove_all(dir);
  }
}

TEST(SavePretrained, Bf16CheckpointDeclaresItsDtype) {
  set_log_level(LogLevel::kWarn);
  const auto dir = temp_dir("bf16");
  AutoModelForCausalLM::from_pretrained(testing::fixture_dir("qwen3"), {.device_map = "cpu"})
      .save_pretrained(dir.string(), DType::bf16);
  EXPECT_EQ(load_model_config(dir / "config.json").dtype, DType::bf16);
  EXPECT_EQ(Checkpoint::open(dir).info("model.embed_tokens.weight").dtype, DType::bf16);
  std::filesystem::remove_all(dir);
}

TEST(FromConfig, InitializesAsTransformers) {
  set_log_level(LogLevel::kWarn);
  const std::string config = testing::fixture_dir("qwen3") + "/config.json";
  CausalLM model = AutoModelForCausalLM::from_config(config, {.device_map = "cpu"}, 1);
  const auto dir = temp_dir("init");
  model.save_pretrained(dir.string());
  const Checkpoint saved = Checkpoint::open(dir);
  const double range = load_model_config(config).initializer_range;
  const std::vector<float> embed = saved.tensor("model.embed_tokens.weight").to_f32_vector();
  double sum = 0, sum_sq = 0;
  for (float v : embed) sum += v, sum_sq += static_cast<double>(v) * v;
  const double n = static_cast<double>(embed.size());
  EXPECT_NEAR(sum / n, 0.0, 4 * range / std::sqrt(n));  // mean of N(0, range^2) samples
  EXPECT_NEAR(std::sqrt(sum_sq / n), range, 0.05 * range);
  for (float v : saved.tensor("model.norm.weight").to_f32_vector()) EXPECT_EQ(v, 1.f);
  // The same seed gives the same weights.
  CausalLM again = AutoModelForCausalLM::from_config(config, {.device_map = "cpu"}, 1);
  const Tensor ids = testing::int_matrix(testing::reference("qwen3")["input_ids"]);
  EXPECT_EQ(model.forward(ids).to_f32_vector(), again.forward(ids).to_f32_vector());
  std::filesystem::remove_all(dir);
}

}  // namespace
}  // namespace tfm
