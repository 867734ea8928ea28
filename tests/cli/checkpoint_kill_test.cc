// Nothing lost to a kill: `tfm train` saving a checkpoint every step is killed (SIGKILL) as its
// saves are being written, then resumed from "last". Every resume either finishes with the model of
// the run that was never killed, bit for bit, or refuses, saying there is no complete checkpoint
// (a kill before the first save finished); none resumes from a checkpoint half written.
#include <fcntl.h>
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <random>
#include <sstream>
#include <thread>

#include "support/fixtures.h"
#include "support/run_binary.h"

namespace tfm {
namespace {

namespace fs = std::filesystem;

std::string contents(const fs::path& file) {
  std::ifstream in(file, std::ios::binary);
  std::stringstream text;
  text << in.rdbuf();
  return text.str();
}

std::vector<std::string> train_args(const fs::path& data, const fs::path& out) {
  return {"train",
          "--model",
          testing::fixture_dir("qwen3"),
          "--data",
          data.string(),
          "--max_length",
          "12",
          "--per_device_train_batch_size",
          "2",
          "--max_steps",
          "12",
          "--save_steps",
          "1",
          "--seed",
          "1",
          "--output_dir",
          out.string()};
}

// `tfm args...` started, then killed with SIGKILL `extra` after the save of checkpoint-`step`
// begins (its .partial folder appears) or ends, whatever it is doing then; or left to finish
// when it gets there first.
void killed_saving(const std::vector<std::string>& args, const fs::path& out, int step,
                   std::chrono::microseconds extra) {
  const std::string tfm = testing::binary_path("tfm");
  std::vector<std::string> argv_strings{"tfm"};
  argv_strings.insert(argv_strings.end(), args.begin(), args.end());
  std::vector<char*> argv;
  for (std::string& s : argv_strings) argv.push_back(s.data());
  argv.push_back(nullptr);
  const pid_t pid = ::fork();
  ASSERT_GE(pid, 0);
  if (pid == 0) {
    const int null = ::open("/dev/null", O_WRONLY);
    ::dup2(null, 1);
    ::dup2(null, 2);
    ::execv(tfm.c_str(), argv.data());
    ::_exit(127);
  }
  const fs::path saved = out / ("checkpoint-" + std::to_string(step));
  const fs::path saving = saved.string() + ".partial";
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(60);
  while (!fs::exists(saving) && !fs::exists(saved) && std::chrono::steady_clock::now() < deadline) {
    if (::waitpid(pid, nullptr, WNOHANG) == pid) return;  // finished first
    std::this_thread::sleep_for(std::chrono::microseconds(100));
  }
  std::this_thread::sleep_for(extra);
  ::kill(pid, SIGKILL);
  ::waitpid(pid, nullptr, 0);
}

TEST(CheckpointKill, EveryResumeContinuesExactlyOrRefuses) {
  if (testing::binary_path("tfm").empty()) GTEST_SKIP() << "TFM_BIN is not set (run via ctest)";
  const fs::path dir = fs::temp_directory_path() / "tfm-checkpoint-kill";
  fs::remove_all(dir);
  fs::create_directories(dir);
  {
    std::mt19937 rng(3);
    std::uniform_int_distribution<int> id(0, 1023);  // the qwen3 fixture's vocabulary
    std::ofstream rows(dir / "rows.jsonl");
    for (int r = 0; r < 40; ++r) {
      std::vector<int> ids;
      for (int t = 0; t < 12; ++t) ids.push_back(id(rng));
      rows << nlohmann::json{{"input_ids", ids}}.dump() << "\n";
    }
  }
  const auto reference = testing::run_binary("tfm", train_args(dir / "rows.jsonl", dir / "whole"));
  ASSERT_EQ(reference->status, 0) << reference->err;
  const std::string want = contents(dir / "whole" / "model.safetensors");
  int resumed = 0;
  for (int trial = 0; trial < 8; ++trial) {
    // Kills as the saves of steps 1 to 8 begin, at 0, 0.5 and 1 ms into them.
    const auto extra = std::chrono::microseconds(500 * (trial % 3));
    SCOPED_TRACE("killed " + std::to_string(extra.count()) + " us into the save of step " +
                 std::to_string(trial + 1));
    const fs::path out = dir / ("trial-" + std::to_string(trial));
    killed_saving(train_args(dir / "rows.jsonl", out), out, trial + 1, extra);
    std::vector<std::string> resume = train_args(dir / "rows.jsonl", out);
    resume.insert(resume.end(), {"--resume_from_checkpoint", "last"});
    const auto run = testing::run_binary("tfm", resume);
    if (run->status == 0) {
      ++resumed;
      EXPECT_TRUE(contents(out / "model.safetensors") == want) << "the resumed model differs";
    } else {
      EXPECT_EQ(run->status, 1) << run->err;
      EXPECT_THAT(run->err, ::testing::HasSubstr("no complete checkpoint-N folder"));
    }
  }
  // From step 2 on, a complete checkpoint was there before each kill.
  EXPECT_GE(resumed, 7);
  fs::remove_all(dir);
}

}  // namespace
}  // namespace tfm
