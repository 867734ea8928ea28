// Tensor parallelism with 4 CPU processes under tfmrun: each rank's split model against the
// whole model in the same process (logits within 1e-5) and against transformers' greedy ids
// (tensor_parallel_worker.cc), and the configuration errors a user can make.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <chrono>
#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <nlohmann/json.hpp>

#include "support/fixtures.h"
#include "support/run_binary.h"
#include "tfm/error.h"
#include "tfm/model.h"

namespace tfm {
namespace {

using ::testing::HasSubstr;
using ::testing::ThrowsMessage;

std::string worker() { return testing::binary_path("tfm_tensor_parallel_worker"); }
std::string port(int offset) { return testing::test_port(offset); }

struct Layout {
  std::string arch;
  int tp, fsdp;
  int ep = 1;  // expert-parallel ranks (a mixture-of-experts fixture: tp)

  friend void PrintTo(const Layout& l, std::ostream* os) {
    *os << l.arch << " tp=" << l.tp << " fsdp=" << l.fsdp << " ep=" << l.ep;
  }
};

std::string layout_name(const ::testing::TestParamInfo<Layout>& info) {
  const Layout& l = info.param;
  return testing::test_name(l.arch) + "_tp" + std::to_string(l.tp) + "_fsdp" +
         std::to_string(l.fsdp) + (l.ep > 1 ? "_ep" + std::to_string(l.ep) : "");
}

class TensorParallelTest : public ::testing::TestWithParam<Layout> {};

void expect_ranks_ok(const std::string& mode, const Layout& l, int port_offset) {
  const int ranks = l.tp * l.fsdp;
  const auto run = testing::run_binary(
      "tfmrun", {"--nproc_per_node", std::to_string(ranks), "--master_port", port(port_offset),
                 worker(), mode, testing::fixture_dir(l.arch), std::to_string(l.tp),
                 std::to_string(l.fsdp), std::to_string(l.ep)});
  if (!run) GTEST_SKIP() << "TFM_BIN is not set (run via ctest)";
  ASSERT_EQ(run->status, 0) << run->out << run->err;
  for (int r = 0; r < ranks; ++r) {
    EXPECT_THAT(run->out, HasSubstr("rank " + std::to_string(r) + ": ok")) << run->out;
  }
}

TEST_P(TensorParallelTest, RanksMatchOneProcess) {
  expect_ranks_ok("infer", GetParam(), 10 * GetParam().tp + GetParam().fsdp + 100 * GetParam().ep);
}

class TensorParallelTrainingTest : public ::testing::TestWithParam<Layout> {};

TEST_P(TensorParallelTrainingTest, FiveStepsMatchOneProcess) {
  expect_ranks_ok("train", GetParam(),
                  50 + 10 * GetParam().tp + GetParam().fsdp + 100 * GetParam().ep);
}

// tp=4 over the fixtures' 2 KV heads holds each on two ranks, whose gradients are summed;
// fsdp=3 divides none of the fixture's row counts, so every block ends in padding. The
// mixture-of-experts fixtures (8 experts) split their experts over the tensor-parallel ranks,
// with FSDP sharding each rank's experts, or over the FSDP ranks, which send their rows to the
// experts and back by all-to-all; the routers' load-balancing loss is in the loss.
INSTANTIATE_TEST_SUITE_P(Fixtures, TensorParallelTrainingTest,
                         ::testing::Values(Layout{"qwen3", 2, 2}, Layout{"qwen2", 4, 1},
                                           Layout{"qwen3", 1, 4}, Layout{"qwen3", 1, 3},
                                           Layout{"qwen3-moe", 4, 1, 4}, Layout{"mixtral", 2, 2, 2},
                                           Layout{"qwen3-moe", 1, 4, 4},
                                           Layout{"mixtral", 1, 2, 2}),
                         layout_name);

// qwen3: 4 heads over 2 KV heads (tp=4 replicates each KV head on two ranks), tied embeddings;
// qwen2: q/k/v biases and an untied lm_head; fsdp=3 pads the last blocks of every weight.
INSTANTIATE_TEST_SUITE_P(Fixtures, TensorParallelTest,
                         ::testing::Values(Layout{"qwen3", 4, 1}, Layout{"qwen3", 2, 2},
                                           Layout{"qwen2", 4, 1}, Layout{"qwen2", 1, 4},
                                           Layout{"qwen2", 1, 3}, Layout{"mixtral", 4, 1, 4},
                                           Layout{"qwen3-moe", 2, 2, 2},
                                           Layout{"mixtral", 1, 4, 4}),
                         layout_name);

// `tfm logits --tp-size 2` under tfmrun: rank 0 alone prints, and prints the one-process logits.
TEST(TensorParallelCli, LogitsPrintOnceAndMatchOneProcess) {
  const char* tfm = std::getenv("TFM_BIN");
  if (tfm == nullptr) GTEST_SKIP() << "TFM_BIN is not set (run via ctest)";
  const std::vector<std::string> args{
      "logits", testing::fixture_dir("qwen2"), "--ids", "5,17,300,999", "--all", "--device", "cpu"};
  const auto one = testing::run_binary("tfm", args);
  ASSERT_EQ(one->status, 0) << one->err;
  std::vector<std::string> split{"--nproc_per_node", "2", "--master_port", port(11), tfm};
  split.insert(split.end(), args.begin(), args.end());
  split.insert(split.end(), {"--tp-size", "2"});
  const auto two = testing::run_binary("tfmrun", split);
  ASSERT_EQ(two->status, 0) << two->err;
  EXPECT_EQ(two->out.find("[rank1]"), std::string::npos) << two->out;
  const std::string prefix = "[rank0]: ";
  ASSERT_EQ(two->out.rfind(prefix, 0), 0u) << two->out;
  const auto want = nlohmann::json::parse(one->out)["logits"];
  const auto got = nlohmann::json::parse(two->out.substr(prefix.size()))["logits"];
  ASSERT_EQ(got.size(), want.size());
  double worst = 0;
  for (size_t s = 0; s < want.size(); ++s) {
    for (size_t v = 0; v < want[s].size(); ++v) {
      worst = std::max(worst, std::fabs(got[s][v].get<double>() - want[s][v].get<double>()));
    }
  }
  EXPECT_LT(worst, 1e-5);
}

// Each rank's embedding holds half the vocabulary and reads other ids as zero rows: an id outside
// the whole vocabulary (1000 tokens) must still be an error, not a silently zero embedding.
TEST(TensorParallelCli, AnIdOutsideTheVocabularyIsAnError) {
  const char* tfm = std::getenv("TFM_BIN");
  if (tfm == nullptr) GTEST_SKIP() << "TFM_BIN is not set (run via ctest)";
  const auto two =
      testing::run_binary("tfmrun", {"--nproc_per_node", "2", "--master_port", port(14), tfm,
                                     "logits", testing::fixture_dir("qwen2"), "--ids", "5,1000",
                                     "--device", "cpu", "--tp-size", "2"});
  EXPECT_NE(two->status, 0);
  EXPECT_THAT(two->err, HasSubstr("token id 1000 outside the vocabulary (1000 tokens)"));
}

// --nnodes 2: two network namespaces on this machine, 2 ranks each; a tensor-parallel group on
// each node, the data-parallel groups across them.
TEST(TensorParallelTwoNodes, MatchesOneProcess) {
  const char* tfm = std::getenv("TFM_BIN");
  if (tfm == nullptr) GTEST_SKIP() << "TFM_BIN is not set (run via ctest)";
  const std::string build = std::filesystem::path(tfm).parent_path().string();
  const auto run = testing::run_binary(
      "/bin/bash", {std::string(TFM_TEST_DATA_DIR) + "/../distributed/two_nodes.sh", build,
                    port(12), worker(), "infer", testing::fixture_dir("qwen3"), "2", "2"});
  if (run->status == 77) GTEST_SKIP() << "cannot make network namespaces here (needs root)";
  ASSERT_EQ(run->status, 0) << run->out << run->err;
  for (int r = 0; r < 4; ++r) {
    EXPECT_THAT(run->out, HasSubstr("rank " + std::to_string(r) + ": ok")) << run->out;
  }
  EXPECT_THAT(run->out, HasSubstr("[node1] [rank3]"));
}

// `processes` ranks load `l`: the job must fail saying `message`.
void expect_load_error(int processes, const Layout& l, const std::string& message,
                       int port_offset) {
  const auto run = testing::run_binary(
      "tfmrun", {"--nproc_per_node", std::to_string(processes), "--master_port", port(port_offset),
                 worker(), "infer", testing::fixture_dir(l.arch), std::to_string(l.tp),
                 std::to_string(l.fsdp), std::to_string(l.ep)});
  if (!run) GTEST_SKIP() << "TFM_BIN is not set (run via ctest)";
  EXPECT_NE(run->status, 0);
  EXPECT_THAT(run->err, HasSubstr(message));
}

TEST(TensorParallelFailures, ARankKilledMidRunEndsTheJobNamingIt) {
  const auto start = std::chrono::steady_clock::now();
  const auto run =
      testing::run_binary("tfmrun", {"--nproc_per_node", "4", "--master_port", port(13), worker(),
                                     "kill", testing::fixture_dir("qwen3"), "2", "2"});
  if (!run) GTEST_SKIP() << "TFM_BIN is not set (run via ctest)";
  EXPECT_LT(std::chrono::steady_clock::now() - start, std::chrono::seconds(60));
  EXPECT_NE(run->status, 0);
  EXPECT_THAT(run->err, HasSubstr("rank 3 failed (killed by signal 9"));
}

TEST(TensorParallelConfig, HeadsThatDoNotSplitAreAnError) {
  expect_load_error(3, {"qwen3", 3, 1}, "tp_size=3 does not divide num_attention_heads=4", 11);
}

TEST(TensorParallelConfig, WorldSizeMustBeTpTimesFsdp) {
  expect_load_error(2, {"qwen3", 2, 2}, "needs 4 processes, but WORLD_SIZE is 2", 10);
}

TEST(TensorParallelConfig, ExpertsSplitWhereHeadsDo) {
  expect_load_error(2, {"mixtral", 2, 1}, "splits its experts too: set ep_size=2", 30);
  expect_load_error(2, {"mixtral", 2, 1, 4}, "ep_size=4 must be 1, tp_size=2", 31);
  expect_load_error(3, {"mixtral", 3, 1, 3}, "ep_size=3 does not divide num_experts=8", 32);
  expect_load_error(2, {"qwen3", 2, 1, 2}, "needs a mixture-of-experts model", 33);
}

TEST(TensorParallelConfig, WithoutALauncherSaysHowToStart) {
  if (std::getenv("RANK") != nullptr) GTEST_SKIP() << "running under a launcher";
  EXPECT_THAT(
      [] {
        AutoModelForCausalLM::from_pretrained(
            testing::fixture_dir("qwen3"),
            {.dtype = DType::f32, .device_map = "cpu", .distributed = {.tp_size = 2}});
      },
      ThrowsMessage<Error>(HasSubstr("start the program with tfmrun")));
}

}  // namespace
}  // namespace tfm
