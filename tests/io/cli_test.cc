// Runs the built `tfm` binary ($TFM_BIN, set by CTest) the way a user would.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cstdio>
#include <cstdlib>
#include <nlohmann/json.hpp>

#include "io/io_test_util.h"

namespace tfm {
namespace {

using testing::AllOf;
using testing::HasSubstr;

const std::filesystem::path kFixtures = std::filesystem::path(TFM_TEST_DATA_DIR) / "fixtures";

struct TfmRun {
  int status;
  std::string output;  // stdout and stderr
};

std::optional<TfmRun> run_tfm(const std::string& arguments) {
  const char* binary = std::getenv("TFM_BIN");
  if (binary == nullptr || !std::filesystem::exists(binary)) return std::nullopt;
  FILE* pipe = ::popen(("'" + std::string(binary) + "' " + arguments + " 2>&1").c_str(), "r");
  TfmRun run{-1, ""};
  char buffer[4096];
  while (size_t n = std::fread(buffer, 1, sizeof buffer, pipe)) run.output.append(buffer, n);
  run.status = WEXITSTATUS(::pclose(pipe));
  return run;
}

constexpr const char* kNoBinary = "TFM_BIN is not set to the tfm binary (run the tests via ctest)";

TEST(CliTest, DevicesListsTheCpu) {
  const auto run = run_tfm("devices");
  if (!run) GTEST_SKIP() << kNoBinary;
  EXPECT_EQ(run->status, 0);
  EXPECT_THAT(run->output, HasSubstr("cpu\t"));
}

TEST(CliTest, InspectPrintsArchitectureParametersAndTensors) {
  const auto run = run_tfm("inspect '" + (kFixtures / "llama").string() + "'");
  if (!run) GTEST_SKIP() << kNoBinary;
  EXPECT_EQ(run->status, 0) << run->output;
  EXPECT_THAT(run->output, AllOf(HasSubstr("architecture: LlamaForCausalLM"),
                                 HasSubstr("lm_head.weight\tf32\t[1000, 96]"),
                                 HasSubstr("model.layers.2.mlp.down_proj.weight\tf32\t[96, 160]")));
}

// Parameter count from the config: embed V*H, per layer q/o H*H, k/v (H/2)*H (3 of 6 heads KV),
// gate/up/down 3*H*I, two norms 2*H; final norm H; lm_head V*H (llama fixture is untied).
TEST(CliTest, InspectJson) {
  const auto run = run_tfm("inspect --json '" + (kFixtures / "llama").string() + "'");
  if (!run) GTEST_SKIP() << kNoBinary;
  ASSERT_EQ(run->status, 0) << run->output;
  const nlohmann::json d = nlohmann::json::parse(run->output);
  const int64_t v = 1000, h = 96, i = 160, layers = 3;
  const int64_t per_layer = 2 * h * h + 2 * (h / 2) * h + 3 * h * i + 2 * h;
  EXPECT_EQ(d["parameters"], 2 * v * h + layers * per_layer + h);
  EXPECT_EQ(d["architecture"], "LlamaForCausalLM");
  EXPECT_EQ(d["tensors"].size(), 2 + 9 * layers + 1);
  EXPECT_EQ(d["tensors"][0]["name"], "lm_head.weight");
  EXPECT_EQ(d["tensors"][0]["shape"], nlohmann::json::array({1000, 96}));
}

TEST(CliTest, InspectBareFileHasNoArchitecture) {
  testing_io::TempDir dir;
  std::filesystem::copy_file(kFixtures / "qwen3" / "model.safetensors", dir / "w.safetensors");
  const auto run = run_tfm("inspect --json '" + (dir / "w.safetensors").string() + "'");
  if (!run) GTEST_SKIP() << kNoBinary;
  ASSERT_EQ(run->status, 0) << run->output;
  const nlohmann::json d = nlohmann::json::parse(run->output);
  EXPECT_TRUE(d["architecture"].is_null());
  EXPECT_EQ(d["tensors"].size(), 24u);
}

TEST(CliTest, ErrorsArePrintedNotCrashed) {
  const auto run = run_tfm("inspect Org/DoesNotExist");
  if (!run) GTEST_SKIP() << kNoBinary;
  EXPECT_EQ(run->status, 1);
  EXPECT_THAT(run->output, AllOf(HasSubstr("tfm: error: model 'Org/DoesNotExist' not found"),
                                 HasSubstr("hf download")));
}

}  // namespace
}  // namespace tfm
