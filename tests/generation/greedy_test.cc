// generate() against transformers: greedy ids on a left-padded batch with a static cache, compiled
// (fused), eagerly and compiled unfused; through a PJRT plugin, whose compiler fuses, compiled.
#include <gtest/gtest.h>

#include <algorithm>
#include <string>

#include "support/devices.h"
#include "support/fixtures.h"
#include "tfm/device.h"
#include "tfm/log.h"
#include "tfm/model.h"

namespace tfm {
namespace {

using testing::Mode;

class GreedyTest : public ::testing::TestWithParam<std::tuple<std::string, Mode, std::string>> {};

TEST_P(GreedyTest, PaddedBatchMatchesTransformers) {
  set_log_level(LogLevel::kWarn);
  const auto& [arch, mode, device] = GetParam();
  if (!testing::device_present(device)) GTEST_SKIP() << "no " << device << " device present";
  CausalLM model = AutoModelForCausalLM::from_pretrained(
      testing::fixture_dir(arch),
      {.dtype = DType::f32, .device_map = device, .fuse = mode != Mode::kUnfused});
  const nlohmann::json& ref = testing::reference(arch);
  const Tensor ids = testing::int_matrix(ref["padded_input_ids"]);
  const Tensor mask = testing::int_matrix(ref["padded_attention_mask"]);
  GenerationConfig gc;
  gc.max_new_tokens = 16;
  gc.disable_compile = mode == Mode::kEager;
  const Tensor out = model.generate(ids, &mask, gc);
  const Tensor want = testing::int_matrix(ref["greedy_16"]);
  ASSERT_EQ(out.shape(), want.shape());
  for (int64_t i = 0; i < want.numel(); ++i) {
    EXPECT_EQ(out.data_as<int64_t>()[i], want.data_as<int64_t>()[i]) << "at flat index " << i;
  }
}

using Case = std::tuple<std::string, Mode, std::string>;

std::vector<Case> cases() {
  std::vector<Case> all;
  for (const char* arch : {"qwen3", "llama", "qwen2", "llama3-rope", "qwen3-yarn", "mistral",
                           "mixtral", "qwen3-moe"}) {
    for (const char* device : {"cpu", "cuda"}) {
      for (const Mode mode : {Mode::kCompiled, Mode::kEager, Mode::kUnfused}) {
        all.emplace_back(arch, mode, device);
      }
    }
    all.emplace_back(arch, Mode::kCompiled, "pjrt");
  }
  return all;
}

INSTANTIATE_TEST_SUITE_P(Fixtures, GreedyTest, ::testing::ValuesIn(cases()), [](const auto& info) {
  // Test names allow only letters, digits and '_'.
  std::string arch = std::get<0>(info.param);
  std::replace(arch.begin(), arch.end(), '-', '_');
  return std::get<2>(info.param) + "_" + arch + "_" + testing::mode_name(std::get<1>(info.param));
});

}  // namespace
}  // namespace tfm
