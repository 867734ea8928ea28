// Four ranks under tfmrun: gloo collectives against closed-form results, and a rank that dies
// ending the job with an error instead of a hang.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <chrono>

#include "support/run_binary.h"

namespace tfm {
namespace {

using ::testing::HasSubstr;

std::string worker() { return testing::binary_path("tfm_collectives_worker"); }
std::string port(int offset) { return testing::test_port(offset); }

TEST(Collectives, FourRanksAgreeWithClosedForms) {
  const auto run = testing::run_binary(
      "tfmrun", {"--nproc_per_node", "4", "--master_port", port(0), worker(), "check"});
  if (!run) GTEST_SKIP() << "TFM_BIN is not set (run via ctest)";
  ASSERT_EQ(run->status, 0) << run->out << run->err;
  for (int r = 0; r < 4; ++r) {
    EXPECT_THAT(run->out,
                HasSubstr("[rank" + std::to_string(r) + "]: rank " + std::to_string(r) + ": ok"));
  }
}

TEST(Collectives, ADeadRankIsAnErrorNotAHang) {
  const auto start = std::chrono::steady_clock::now();
  const auto run = testing::run_binary(
      "tfmrun", {"--nproc_per_node", "4", "--master_port", port(1), worker(), "die", "2"});
  if (!run) GTEST_SKIP() << "TFM_BIN is not set (run via ctest)";
  EXPECT_LT(std::chrono::steady_clock::now() - start, std::chrono::seconds(30));
  EXPECT_NE(run->status, 0);
  EXPECT_THAT(run->err, HasSubstr("rank 2 failed (exit code 7)"));
}

TEST(Collectives, ACollectiveWithAStalledPeerTimesOut) {
  const auto start = std::chrono::steady_clock::now();
  const auto run = testing::run_binary(
      "tfmrun", {"--nproc_per_node", "4", "--master_port", port(2), worker(), "stall", "1"});
  if (!run) GTEST_SKIP() << "TFM_BIN is not set (run via ctest)";
  EXPECT_LT(std::chrono::steady_clock::now() - start, std::chrono::seconds(30));
  EXPECT_NE(run->status, 0);
  EXPECT_THAT(run->err, HasSubstr("the collective failed"));
  EXPECT_THAT(run->err, HasSubstr("failed (exit code 1)"));
}

}  // namespace
}  // namespace tfm
