// tfmrun (next to $TFM_BIN) as torchrun: the environment each rank gets, rank-prefixed output, and
// a failing rank ending the whole job with a message naming it.
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <set>
#include <sstream>
#include <thread>

#include "support/run_binary.h"

namespace tfm {
namespace {

using ::testing::HasSubstr;
using testing::Run;

constexpr const char* kNoBinary = "TFM_BIN is not set (run the tests via ctest)";

std::optional<Run> tfmrun(const std::vector<std::string>& args) {
  return testing::run_binary("tfmrun", args);
}

bool alive(pid_t pid) { return ::kill(pid, 0) == 0; }

// A launcher killed outright (SIGKILL: no handler of its runs) takes its ranks with it: each rank
// is sent SIGTERM as its parent dies, where it used to run on orphaned. The rank prints its pid,
// then becomes a long sleep.
TEST(Tfmrun, KilledLauncherStopsItsRanks) {
  const std::string launcher = testing::binary_path("tfmrun");
  if (launcher.empty()) GTEST_SKIP() << kNoBinary;
  int out[2];
  ASSERT_EQ(::pipe(out), 0);
  const pid_t pid = ::fork();
  ASSERT_GE(pid, 0);
  if (pid == 0) {
    ::dup2(out[1], 1);
    ::close(out[0]);
    ::execl(launcher.c_str(), "tfmrun", "--nproc_per_node", "1", "sh", "-c",
            "echo pid $$; exec sleep 60", static_cast<char*>(nullptr));
    ::_exit(127);
  }
  ::close(out[1]);
  std::string line;
  char c = 0;
  while (::read(out[0], &c, 1) == 1 && c != '\n') line += c;
  ::close(out[0]);
  const size_t at = line.find("pid ");
  ASSERT_NE(at, std::string::npos) << line;
  const pid_t rank = static_cast<pid_t>(std::stol(line.substr(at + 4)));
  ASSERT_TRUE(alive(rank));
  ::kill(pid, SIGKILL);
  ::waitpid(pid, nullptr, 0);
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(10);
  // The rank is the launcher's child no more: reaped by init once it dies.
  while (alive(rank) && std::chrono::steady_clock::now() < deadline) {
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  EXPECT_FALSE(alive(rank)) << "rank " << rank << " outlived its launcher";
  if (alive(rank)) ::kill(rank, SIGKILL);
}

// torchrun's variables for --nnodes 2 --nproc_per_node 2, seen from node 1: global ranks 2 and 3.
TEST(Tfmrun, GivesEachRankTorchrunsEnvironment) {
  const auto run = tfmrun({"--nnodes", "2", "--node_rank", "1", "--nproc_per_node", "2",
                           "--master_addr", "10.1.2.3", "--master_port", "29555", "sh", "-c",
                           "echo $RANK $LOCAL_RANK $WORLD_SIZE $LOCAL_WORLD_SIZE $MASTER_ADDR "
                           "$MASTER_PORT"});
  if (!run) GTEST_SKIP() << kNoBinary;
  ASSERT_EQ(run->status, 0) << run->err;
  std::set<std::string> lines;
  std::istringstream out(run->out);
  for (std::string line; std::getline(out, line);) lines.insert(line);
  EXPECT_EQ(lines, (std::set<std::string>{"[rank2]: 2 0 4 2 10.1.2.3 29555",
                                          "[rank3]: 3 1 4 2 10.1.2.3 29555"}));
}

// The cores are shared out among the node's ranks unless OMP_NUM_THREADS is set.
// A count of no ranks is named with the rule it breaks (CLI11's own check printed a 300-digit
// range).
TEST(Tfmrun, NoRanksIsNamed) {
  const auto run = tfmrun({"--nproc_per_node", "0", "true"});
  if (!run) GTEST_SKIP() << kNoBinary;
  EXPECT_NE(run->status, 0);
  EXPECT_THAT(run->err, ::testing::HasSubstr("--nproc_per_node: must be 1 or more, got 0"));
}

TEST(Tfmrun, SharesTheCoresOutAmongRanks) {
  const auto run = tfmrun({"--nproc_per_node", "2", "sh", "-c", "echo threads $OMP_NUM_THREADS"});
  if (!run) GTEST_SKIP() << kNoBinary;
  ASSERT_EQ(run->status, 0) << run->err;
  const int each = std::max(1, static_cast<int>(std::thread::hardware_concurrency()) / 2);
  EXPECT_THAT(run->out, HasSubstr("[rank1]: threads " + std::to_string(each) + "\n"));
  EXPECT_THAT(run->err, HasSubstr("OMP_NUM_THREADS=" + std::to_string(each)));
}

TEST(Tfmrun, PrefixesBothStreamsAndPartialLines) {
  const auto run = tfmrun({"--nproc_per_node", "2", "sh", "-c", "echo out; printf 'tail' >&2"});
  if (!run) GTEST_SKIP() << kNoBinary;
  ASSERT_EQ(run->status, 0);
  EXPECT_THAT(run->out, HasSubstr("[rank0]: out\n"));
  EXPECT_THAT(run->out, HasSubstr("[rank1]: out\n"));
  EXPECT_THAT(run->err, HasSubstr("[rank1]: tail\n"));
}

TEST(Tfmrun, AFailingRankStopsTheOthers) {
  const auto start = std::chrono::steady_clock::now();
  const auto run =
      tfmrun({"--nproc_per_node", "3", "sh", "-c", "if [ $RANK = 1 ]; then exit 3; fi; sleep 60"});
  if (!run) GTEST_SKIP() << kNoBinary;
  EXPECT_LT(std::chrono::steady_clock::now() - start, std::chrono::seconds(20));
  EXPECT_EQ(run->status, 1);
  EXPECT_THAT(run->err, HasSubstr("rank 1 failed (exit code 3)"));
}

TEST(Tfmrun, AKilledRankIsNamedWithItsSignal) {
  const auto run = tfmrun(
      {"--nproc_per_node", "2", "sh", "-c", "if [ $RANK = 0 ]; then kill -9 $$; fi; sleep 60"});
  if (!run) GTEST_SKIP() << kNoBinary;
  EXPECT_EQ(run->status, 1);
  EXPECT_THAT(run->err, HasSubstr("rank 0 failed (killed by signal 9"));
}

// A rank that ignores SIGTERM is killed after the grace period instead of hanging the job.
TEST(Tfmrun, StopsARankThatIgnoresTerm) {
  const auto start = std::chrono::steady_clock::now();
  const auto run = tfmrun({"--nproc_per_node", "2", "sh", "-c",
                           "trap '' TERM; if [ $RANK = 1 ]; then sleep 0.5; exit 4; fi; "
                           "while true; do sleep 1; done"});
  if (!run) GTEST_SKIP() << kNoBinary;
  EXPECT_LT(std::chrono::steady_clock::now() - start, std::chrono::seconds(20));
  EXPECT_EQ(run->status, 1);
  EXPECT_THAT(run->err, HasSubstr("rank 1 failed (exit code 4)"));
}

TEST(Tfmrun, NamesAProgramThatCannotStart) {
  const auto run = tfmrun({"--nproc_per_node", "2", "/nonexistent/program"});
  if (!run) GTEST_SKIP() << kNoBinary;
  EXPECT_NE(run->status, 0);
  EXPECT_THAT(run->err, HasSubstr("/nonexistent/program"));
}

}  // namespace
}  // namespace tfm
