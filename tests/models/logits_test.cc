// Whole models against transformers + PyTorch: logits of the fixtures' reference.json, compiled
// (fused), eagerly and compiled with every fusion off.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>

#include "io/model_config.h"
#include "support/devices.h"
#include "support/fixtures.h"
#include "tfm/device.h"
#include "tfm/log.h"
#include "tfm/model.h"

namespace tfm {
namespace {

using testing::Mode;

struct Case {
  std::string arch;
  DType dtype;
  Mode mode;
  std::string device = "cpu";

  friend void PrintTo(const Case& c, std::ostream* os) {
    *os << c.device << " " << c.arch << " " << dtype_name(c.dtype) << " "
        << testing::mode_name(c.mode);
  }
};

// Every case on the CPU and, where a GPU is present, on CUDA; the compiled ones through a PJRT
// plugin too (a compiler backend has no other mode).
std::vector<Case> on_each_device(std::vector<Case> cases) {
  const size_t count = cases.size();
  for (size_t i = 0; i < count; ++i) {
    Case c = cases[i];
    c.device = "cuda";
    cases.push_back(c);
    if (c.mode == Mode::kCompiled) {
      c.device = "pjrt";
      cases.push_back(c);
    }
  }
  return cases;
}

class LogitsTest : public ::testing::TestWithParam<Case> {};

TEST_P(LogitsTest, MatchesTransformers) {
  set_log_level(LogLevel::kWarn);
  const Case& c = GetParam();
  if (!testing::device_present(c.device)) GTEST_SKIP() << "no " << c.device << " device present";
  CausalLM model = AutoModelForCausalLM::from_pretrained(
      testing::fixture_dir(c.arch),
      {.dtype = c.dtype, .device_map = c.device, .fuse = c.mode != Mode::kUnfused});
  const nlohmann::json& ref = testing::reference(c.arch);
  const Tensor logits =
      model.forward(testing::int_matrix(ref["input_ids"]), nullptr, true, c.mode == Mode::kEager);
  const int64_t batch = logits.dim(0), seq = logits.dim(1), vocab = logits.dim(2);
  ASSERT_EQ(vocab, model.config().vocab_size);
  const float* got = logits.data_as<float>();
  double max_abs = 0, diff_sq = 0, ref_sq = 0;
  int64_t argmax_same = 0;
  for (int64_t b = 0; b < batch; ++b) {
    for (int64_t s = 0; s < seq; ++s) {
      const auto& want = ref["logits"][b][s];
      int64_t want_arg = 0, got_arg = 0;
      for (int64_t v = 0; v < vocab; ++v) {
        const float w = want[v].get<float>(), g = got[(b * seq + s) * vocab + v];
        max_abs = std::max(max_abs, static_cast<double>(std::fabs(w - g)));
        diff_sq += static_cast<double>(w - g) * (w - g);
        ref_sq += static_cast<double>(w) * w;
        if (w > want[want_arg].get<float>()) want_arg = v;
        if (g > got[(b * seq + s) * vocab + got_arg]) got_arg = v;
      }
      argmax_same += want_arg == got_arg;
    }
  }
  if (c.dtype == DType::f32) {
    EXPECT_LT(max_abs, 1e-4) << "largest absolute logit difference";
    EXPECT_EQ(argmax_same, batch * seq);
  } else {
    // bf16 weights and KV cache: the error relative to the logits' norm, as the fixtures' README
    // states its bf16 tolerance.
    EXPECT_LT(std::sqrt(diff_sq / ref_sq), 2e-2) << "relative L2 difference of the logits";
    EXPECT_GE(static_cast<double>(argmax_same), 0.99 * static_cast<double>(batch * seq));
  }
}

INSTANTIATE_TEST_SUITE_P(
    Fixtures, LogitsTest,
    ::testing::ValuesIn(on_each_device({Case{"qwen3", DType::f32, Mode::kCompiled},
                                        Case{"qwen3", DType::f32, Mode::kEager},
                                        Case{"qwen3", DType::f32, Mode::kUnfused},
                                        Case{"qwen3", DType::bf16, Mode::kCompiled},
                                        Case{"qwen3", DType::bf16, Mode::kEager},
                                        Case{"qwen3", DType::bf16, Mode::kUnfused},
                                        Case{"llama", DType::f32, Mode::kCompiled},
                                        Case{"llama", DType::f32, Mode::kEager},
                                        Case{"llama", DType::f32, Mode::kUnfused},
                                        Case{"llama", DType::bf16, Mode::kCompiled},
                                        Case{"llama", DType::bf16, Mode::kUnfused},
                                        Case{"qwen2", DType::f32, Mode::kCompiled},
                                        Case{"qwen2", DType::f32, Mode::kEager},
                                        Case{"qwen2", DType::f32, Mode::kUnfused},
                                        Case{"llama3-rope", DType::f32, Mode::kCompiled},
                                        Case{"llama3-rope", DType::f32, Mode::kEager},
                                        Case{"llama3-rope", DType::f32, Mode::kUnfused},
                                        Case{"llama3-rope", DType::bf16, Mode::kCompiled},
                                        Case{"qwen3-yarn", DType::f32, Mode::kCompiled},
                                        Case{"qwen3-yarn", DType::f32, Mode::kEager},
                                        Case{"qwen3-yarn", DType::f32, Mode::kUnfused},
                                        Case{"mistral", DType::f32, Mode::kCompiled},
                                        Case{"mistral", DType::f32, Mode::kEager},
                                        Case{"mistral", DType::f32, Mode::kUnfused},
                                        Case{"mistral", DType::bf16, Mode::kCompiled},
                                        Case{"mixtral", DType::f32, Mode::kCompiled},
                                        Case{"mixtral", DType::f32, Mode::kEager},
                                        Case{"mixtral", DType::f32, Mode::kUnfused},
                                        Case{"mixtral", DType::bf16, Mode::kCompiled},
                                        Case{"qwen3-moe", DType::f32, Mode::kCompiled},
                                        Case{"qwen3-moe", DType::f32, Mode::kEager},
                                        Case{"qwen3-moe", DType::f32, Mode::kUnfused},
                                        Case{"qwen3-moe", DType::bf16, Mode::kCompiled},
                                        Case{"qwen3-moe", DType::bf16, Mode::kEager}})),
    [](const auto& info) {
      // Test names allow only letters, digits and '_'; fixture folders use '-'.
      std::string arch = info.param.arch;
      std::replace(arch.begin(), arch.end(), '-', '_');
      return info.param.device + "_" + arch + "_" + std::string(dtype_name(info.param.dtype)) +
             "_" + testing::mode_name(info.param.mode);
    });

}  // namespace
}  // namespace tfm
