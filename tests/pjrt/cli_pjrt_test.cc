// `tfm --device pjrt --pjrt-plugin PATH` run as a user would, against transformers' greedy ids;
// the plugin flags' misuse named.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <string>
#include <string_view>

#include "io/checkpoint.h"
#include "support/fixtures.h"
#include "support/run_binary.h"

namespace tfm {
namespace {

using ::testing::AllOf;
using ::testing::HasSubstr;

constexpr const char* kNoBinary = "TFM_BIN is not set to the tfm binary (run the tests via ctest)";

std::optional<testing::Run> run_tfm(const std::vector<std::string>& args) {
  return testing::run_binary("tfm", args);
}

bool have_plugin() { return !std::string_view(TFM_TEST_PJRT_PLUGIN).empty(); }

std::string id_list(const nlohmann::json& ids) {
  std::string text;
  for (const auto& id : ids) text += (text.empty() ? "" : ",") + std::to_string(id.get<int64_t>());
  return text;
}

TEST(PjrtCli, DevicesListsThePluginsDevices) {
  if (!have_plugin()) GTEST_SKIP() << "XLA's CPU plugin is not installed (tools/test_env.sh)";
  const auto run = run_tfm(
      {"devices", "--pjrt-plugin", TFM_TEST_PJRT_PLUGIN, "--pjrt-devices", "2", "--no-pjrt-cache"});
  if (!run) GTEST_SKIP() << kNoBinary;
  ASSERT_EQ(run->status, 0) << run->err;
  EXPECT_THAT(run->out, AllOf(HasSubstr("pjrt:0"), HasSubstr("pjrt:1"), HasSubstr("xla_version")));
}

// Row 0 of the fixtures' padded batch is a whole prompt: its greedy continuation is
// transformers'. A second run of the same shapes compiles nothing (the compile cache); a damaged
// entry is compiled again, not run.
TEST(PjrtCli, GenerateMatchesTransformersAndASecondRunCompilesNothing) {
  if (!have_plugin()) GTEST_SKIP() << "XLA's CPU plugin is not installed (tools/test_env.sh)";
  namespace fs = std::filesystem;
  const fs::path cache = fs::temp_directory_path() / "tfm-pjrt-cli-cache";
  fs::remove_all(cache);
  const nlohmann::json& ref = testing::reference("qwen3");
  for (const auto& m : ref["padded_attention_mask"][0]) ASSERT_EQ(m, 1) << "row 0 is padded";
  const auto generate = [&] {
    return run_tfm({"generate", testing::fixture_dir("qwen3"), "--ids",
                    id_list(ref["padded_input_ids"][0]), "--print-ids", "--max-new-tokens", "16",
                    "--device", "pjrt", "--pjrt-plugin", TFM_TEST_PJRT_PLUGIN, "--pjrt-cache",
                    cache.string()});
  };
  const auto first = generate();
  if (!first) GTEST_SKIP() << kNoBinary;
  ASSERT_EQ(first->status, 0) << first->err;
  EXPECT_EQ(nlohmann::json::parse(first->out), ref["greedy_16"][0]) << first->out;
  // Prefill and decode: each compiled once, and said so.
  EXPECT_THAT(first->err, AllOf(HasSubstr("on pjrt:0"), HasSubstr("graphs compiled: 2 (")));

  const auto second = generate();
  ASSERT_EQ(second->status, 0) << second->err;
  EXPECT_EQ(nlohmann::json::parse(second->out), ref["greedy_16"][0]) << second->out;
  EXPECT_THAT(second->err, AllOf(HasSubstr("graphs compiled: 0, loaded from the compile cache: 2"),
                                 HasSubstr("compile cache hit")));

  std::vector<fs::path> entries;
  for (const auto& e : fs::directory_iterator(cache)) entries.push_back(e.path());
  ASSERT_EQ(entries.size(), 2u);
  {
    std::fstream damage(entries[0], std::ios::in | std::ios::out | std::ios::binary);
    damage.seekp(static_cast<std::streamoff>(fs::file_size(entries[0]) / 2));
    damage.write("\x13\x37\x13\x37", 4);
  }
  const auto third = generate();
  ASSERT_EQ(third->status, 0) << third->err;
  EXPECT_EQ(nlohmann::json::parse(third->out), ref["greedy_16"][0]) << third->out;
  EXPECT_THAT(third->err, AllOf(HasSubstr("damaged"), HasSubstr(entries[0].string()),
                                HasSubstr("graphs compiled: 1, loaded from the compile cache: 1")));
  fs::remove_all(cache);
}

TEST(PjrtCli, PluginMisuseIsNamed) {
  const std::string model = testing::fixture_dir("qwen3");
  const auto without = run_tfm({"logits", model, "--ids", "5,6,7", "--device", "pjrt"});
  if (!without) GTEST_SKIP() << kNoBinary;
  EXPECT_NE(without->status, 0);
  EXPECT_THAT(without->err, AllOf(HasSubstr("pjrt"), HasSubstr("--pjrt-plugin")));
  const auto missing = run_tfm({"logits", model, "--ids", "5,6,7", "--device", "pjrt",
                                "--pjrt-plugin", "/nonexistent/p.so"});
  EXPECT_NE(missing->status, 0);
  EXPECT_THAT(missing->err, HasSubstr("/nonexistent/p.so"));
  const auto count = run_tfm({"logits", model, "--ids", "5,6,7", "--pjrt-devices", "2"});
  EXPECT_NE(count->status, 0);
  EXPECT_THAT(count->err, HasSubstr("--pjrt-devices needs --pjrt-plugin"));
  const auto both = run_tfm({"logits", model, "--ids", "5,6,7", "--device", "pjrt", "--pjrt-plugin",
                             TFM_TEST_PJRT_PLUGIN, "--pjrt-cache", "/tmp/x", "--no-pjrt-cache"});
  EXPECT_NE(both->status, 0);
  EXPECT_THAT(both->err, HasSubstr("contradict"));
}

// `tfm train --device pjrt`: the Trainer's steps (forward, loss and backward, clipping's norm
// and AdamW, each a compiled graph over the flat buffers) through the plugin log the CPU run's
// losses, and the model saved is the one the CPU run saves.
TEST(PjrtCli, TrainsAsTheCpuDoes) {
  if (!have_plugin()) GTEST_SKIP() << "XLA's CPU plugin is not installed (tools/test_env.sh)";
  namespace fs = std::filesystem;
  const fs::path dir = fs::temp_directory_path() / "tfm-pjrt-train";
  fs::remove_all(dir);
  fs::create_directories(dir);
  {
    std::ofstream rows(dir / "rows.jsonl");
    for (int i = 0; i < 4; ++i) {
      rows << nlohmann::json{{"input_ids", {5 + i, 6, 7, 8, 9, 10 - i, 11, 12}}}.dump() << "\n";
    }
  }
  std::vector<std::vector<double>> losses;
  std::vector<std::vector<float>> saved;
  for (const std::string device : {"cpu", "pjrt"}) {
    std::vector<std::string> args{"train",
                                  "--model",
                                  testing::fixture_dir("qwen3"),
                                  "--data",
                                  (dir / "rows.jsonl").string(),
                                  "--max_length",
                                  "8",
                                  "--per_device_train_batch_size",
                                  "2",
                                  "--max_steps",
                                  "3",
                                  "--learning_rate",
                                  "1e-2",
                                  "--max_grad_norm",
                                  "1.0",
                                  "--logging_steps",
                                  "1",
                                  "--output_dir",
                                  (dir / device).string(),
                                  "--device",
                                  device};
    if (device == "pjrt") {
      args.insert(args.end(), {"--pjrt-plugin", TFM_TEST_PJRT_PLUGIN, "--no-pjrt-cache"});
    }
    const auto run = run_tfm(args);
    if (!run) GTEST_SKIP() << kNoBinary;
    ASSERT_EQ(run->status, 0) << run->err;
    losses.emplace_back();
    std::ifstream log(dir / device / "logs.jsonl");
    for (std::string line; std::getline(log, line);) {
      const auto entry = nlohmann::json::parse(line);
      if (entry.contains("loss")) losses.back().push_back(entry["loss"].get<double>());
    }
    saved.push_back(Checkpoint::open(dir / device)
                        .tensor("model.layers.0.self_attn.q_proj.weight")
                        .to_f32_vector());
  }
  ASSERT_EQ(losses[0].size(), 3u);
  ASSERT_EQ(losses[1].size(), 3u);
  for (size_t i = 0; i < 3; ++i) EXPECT_NEAR(losses[1][i], losses[0][i], 1e-4 * losses[0][i]);
  ASSERT_EQ(saved[1].size(), saved[0].size());
  for (size_t i = 0; i < saved[0].size(); ++i) ASSERT_NEAR(saved[1][i], saved[0][i], 1e-4) << i;
  fs::remove_all(dir);
}

}  // namespace
}  // namespace tfm
