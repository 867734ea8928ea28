// `tfm --device pjrt --pjrt-plugin PATH` run as a user would, against transformers' greedy ids;
// the plugin flags' misuse named.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cmath>
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
// losses and gradient norms, and the model saved is the one the CPU run saves; so they are with
// tp_size=2 x fsdp_size=2 as one program partitioned over 4 devices, each FSDP rank's share one
// row of every global batch of 2.
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
  struct Run {
    std::string name, device, per_device;
    std::vector<std::string> extra;
  };
  const std::vector<Run> runs{
      {"cpu", "cpu", "2", {}},
      {"pjrt", "pjrt", "2", {}},
      {"pjrt-tp2-fsdp2", "pjrt", "1", {"--pjrt-devices", "4", "--tp-size", "2", "--fsdp-size", "2"}}};
  std::vector<std::vector<nlohmann::json>> logs;
  std::vector<std::vector<float>> saved;
  for (const Run& r : runs) {
    SCOPED_TRACE(r.name);
    std::vector<std::string> args{"train", "--model", testing::fixture_dir("qwen3"), "--data",
                                  (dir / "rows.jsonl").string(), "--max_length", "8",
                                  "--per_device_train_batch_size", r.per_device, "--max_steps", "3",
                                  "--learning_rate", "1e-2", "--max_grad_norm", "1.0",
                                  "--logging_steps", "1", "--output_dir", (dir / r.name).string(),
                                  "--device", r.device};
    if (r.device == "pjrt") {
      args.insert(args.end(), {"--pjrt-plugin", TFM_TEST_PJRT_PLUGIN, "--no-pjrt-cache"});
    }
    args.insert(args.end(), r.extra.begin(), r.extra.end());
    const auto run = run_tfm(args);
    if (!run) GTEST_SKIP() << kNoBinary;
    ASSERT_EQ(run->status, 0) << run->err;
    logs.emplace_back();
    std::ifstream log(dir / r.name / "logs.jsonl");
    for (std::string line; std::getline(log, line);) {
      const auto entry = nlohmann::json::parse(line);
      if (entry.contains("loss")) logs.back().push_back(entry);
    }
    saved.push_back(Checkpoint::open(dir / r.name)
                        .tensor("model.layers.0.self_attn.q_proj.weight")
                        .to_f32_vector());
  }
  ASSERT_EQ(logs[0].size(), 3u);
  for (size_t run = 1; run < runs.size(); ++run) {
    SCOPED_TRACE(runs[run].name);
    ASSERT_EQ(logs[run].size(), 3u);
    for (size_t i = 0; i < 3; ++i) {
      const double loss = logs[0][i]["loss"], norm = logs[0][i]["grad_norm"];
      EXPECT_NEAR(logs[run][i]["loss"].get<double>(), loss, 1e-4 * loss) << "step " << i + 1;
      EXPECT_NEAR(logs[run][i]["grad_norm"].get<double>(), norm, 1e-4 * norm) << "step " << i + 1;
    }
    ASSERT_EQ(saved[run].size(), saved[0].size());
    for (size_t i = 0; i < saved[0].size(); ++i) ASSERT_NEAR(saved[run][i], saved[0][i], 1e-4) << i;
  }
  fs::remove_all(dir);
}

// `tfm logits --tp-size 2 --fsdp-size 2` on the pjrt device: one process, one program over the
// plugin's 4 devices, the one-device logits; asking for more devices than the plugin has is named.
TEST(PjrtCli, PartitionedLogitsAreOneDevices) {
  if (!have_plugin()) GTEST_SKIP() << "XLA's CPU plugin is not installed (tools/test_env.sh)";
  const std::vector<std::string> args{"logits",   testing::fixture_dir("qwen3"),
                                      "--ids",    "5,17,300,999",
                                      "--all",    "--device",
                                      "pjrt",     "--pjrt-plugin",
                                      TFM_TEST_PJRT_PLUGIN, "--no-pjrt-cache"};
  const auto one = run_tfm(args);
  if (!one) GTEST_SKIP() << kNoBinary;
  ASSERT_EQ(one->status, 0) << one->err;
  std::vector<std::string> split = args;
  split.insert(split.end(), {"--pjrt-devices", "4", "--tp-size", "2", "--fsdp-size", "2"});
  const auto four = run_tfm(split);
  ASSERT_EQ(four->status, 0) << four->err;
  const auto want = nlohmann::json::parse(one->out)["logits"];
  const auto got = nlohmann::json::parse(four->out)["logits"];
  ASSERT_EQ(got.size(), want.size());
  double worst = 0;
  for (size_t s = 0; s < want.size(); ++s) {
    ASSERT_EQ(got[s].size(), want[s].size());
    for (size_t v = 0; v < want[s].size(); ++v) {
      worst = std::max(worst, std::fabs(got[s][v].get<double>() - want[s][v].get<double>()));
    }
  }
  EXPECT_LT(worst, 1e-5);

  std::vector<std::string> two_devices = args;
  two_devices.insert(two_devices.end(),
                     {"--pjrt-devices", "2", "--tp-size", "2", "--fsdp-size", "2"});
  const auto short_of_devices = run_tfm(two_devices);
  EXPECT_EQ(short_of_devices->status, 1);
  EXPECT_THAT(short_of_devices->err,
              AllOf(HasSubstr("partitioned over 4 devices"), HasSubstr("--pjrt-devices")));
}

}  // namespace
}  // namespace tfm
