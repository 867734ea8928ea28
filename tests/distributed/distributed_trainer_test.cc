// `tfm train` under tfmrun with 4 CPU processes against one process on the same global batches:
// the logged losses and gradient norms (clipping on) and the saved checkpoint must agree.
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>

#include "io/checkpoint.h"
#include "support/fixtures.h"
#include "support/run_binary.h"

namespace tfm {
namespace {

namespace fs = std::filesystem;

std::string port(int offset) { return testing::test_port(offset); }

// Ten rows of 12 token ids: the fixture's two and rotations of them.
fs::path write_rows(const fs::path& dir) {
  const nlohmann::json& ids = testing::reference("qwen3")["input_ids"];
  std::ofstream out(dir / "rows.jsonl");
  for (int shift = 0; shift < 5; ++shift) {
    for (const auto& row : ids) {
      std::vector<int64_t> r = row.get<std::vector<int64_t>>();
      std::rotate(r.begin(), r.begin() + shift, r.end());
      out << nlohmann::json{{"input_ids", r}}.dump() << "\n";
    }
  }
  return dir / "rows.jsonl";
}

std::vector<std::string> train_args(const fs::path& data, const fs::path& out, int per_device) {
  return {"train", "--model", testing::fixture_dir("qwen3"), "--data", data.string(),
          "--max_length", "12", "--per_device_train_batch_size", std::to_string(per_device),
          "--max_steps", "5", "--logging_steps", "1", "--learning_rate", "1e-2",
          "--max_grad_norm", "1.0", "--save_steps", "0", "--output_dir", out.string(),
          "--device", "cpu", "--disable_tqdm"};
}

std::vector<nlohmann::json> log_lines(const fs::path& dir) {
  std::vector<nlohmann::json> lines;
  std::ifstream in(dir / "logs.jsonl");
  for (std::string line; std::getline(in, line);) {
    const auto entry = nlohmann::json::parse(line);
    if (entry.contains("loss")) lines.push_back(entry);
  }
  return lines;
}

struct Layout {
  int tp, fsdp;

  friend void PrintTo(const Layout& l, std::ostream* os) {
    *os << "tp=" << l.tp << " fsdp=" << l.fsdp;
  }
};

class DistributedTrainerTest : public ::testing::TestWithParam<Layout> {};

TEST_P(DistributedTrainerTest, MatchesOneProcess) {
  const Layout l = GetParam();
  const char* tfm = std::getenv("TFM_BIN");
  if (tfm == nullptr) GTEST_SKIP() << "TFM_BIN is not set (run via ctest)";
  const fs::path dir = fs::temp_directory_path() /
                       ("tfm-dist-train-" + std::to_string(::getpid()) + "-" + std::to_string(l.tp));
  fs::remove_all(dir);
  fs::create_directories(dir);
  const fs::path data = write_rows(dir);
  const int global_batch = 4;

  const auto one = testing::run_binary("tfm", train_args(data, dir / "one", global_batch));
  ASSERT_EQ(one->status, 0) << one->err;
  std::vector<std::string> args{"--nproc_per_node", "4", "--master_port", port(l.tp), tfm};
  for (const std::string& a : train_args(data, dir / "four", global_batch / l.fsdp)) {
    args.push_back(a);
  }
  args.insert(args.end(), {"--tp-size", std::to_string(l.tp), "--fsdp-size",
                           std::to_string(l.fsdp)});
  const auto four = testing::run_binary("tfmrun", args);
  ASSERT_EQ(four->status, 0) << four->out << four->err;

  const auto want = log_lines(dir / "one"), got = log_lines(dir / "four");
  ASSERT_EQ(want.size(), 5u);
  ASSERT_EQ(got.size(), want.size()) << four->out;
  for (size_t i = 0; i < want.size(); ++i) {
    const double loss = want[i]["loss"], norm = want[i]["grad_norm"];
    EXPECT_NEAR(got[i]["loss"].get<double>(), loss, 1e-5 * loss) << "step " << i + 1;
    EXPECT_NEAR(got[i]["grad_norm"].get<double>(), norm, 1e-4 * norm) << "step " << i + 1;
  }
  EXPECT_GT(want[0]["grad_norm"].get<double>(), 1.0) << "clipping was not exercised";

  // One ordinary checkpoint, gathered from the slices. Adam divides each gradient by its own
  // running size, so where a gradient is near zero its rounding (summed in another order here)
  // moves the weight by a visible part of a step: the bound is 2% of one step (lr 1e-2).
  const Checkpoint a = Checkpoint::open(dir / "one"), b = Checkpoint::open(dir / "four");
  for (const std::string name : {"model.embed_tokens.weight", "model.layers.0.self_attn.q_proj.weight",
                                 "model.layers.1.mlp.down_proj.weight", "model.norm.weight"}) {
    const std::vector<float> x = a.tensor(name).to_f32_vector(), y = b.tensor(name).to_f32_vector();
    ASSERT_EQ(x.size(), y.size()) << name;
    float worst = 0;
    for (size_t i = 0; i < x.size(); ++i) worst = std::max(worst, std::fabs(x[i] - y[i]));
    EXPECT_LT(worst, 2e-4) << name;
  }
  fs::remove_all(dir);
}

INSTANTIATE_TEST_SUITE_P(Layouts, DistributedTrainerTest,
                         ::testing::Values(Layout{2, 2}, Layout{4, 1}, Layout{1, 4}),
                         [](const auto& info) {
                           return "tp" + std::to_string(info.param.tp) + "_fsdp" +
                                  std::to_string(info.param.fsdp);
                         });

}  // namespace
}  // namespace tfm
