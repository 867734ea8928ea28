#include "support/run_binary.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>

extern char** environ;

namespace tfm::testing {
namespace {

namespace fs = std::filesystem;

std::string read_file(const fs::path& path) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream text;
  text << in.rdbuf();
  return text.str();
}

}  // namespace

std::optional<Run> run_binary(const std::string& program, const std::vector<std::string>& args) {
  return run_binary(program, args, {});
}

std::optional<Run> run_binary(const std::string& program, const std::vector<std::string>& args,
                              const EnvChanges& env) {
  std::vector<std::string> variables;
  for (char** e = environ; *e != nullptr; ++e) {
    const std::string entry(*e);
    if (env.count(entry.substr(0, entry.find('='))) == 0) variables.push_back(entry);
  }
  for (const auto& [name, value] : env) {
    if (value) variables.push_back(name + "=" + *value);
  }
  std::vector<char*> envp;
  for (std::string& v : variables) envp.push_back(v.data());
  envp.push_back(nullptr);
  const char* tfm = std::getenv("TFM_BIN");
  if (tfm == nullptr) return std::nullopt;
  const std::string binary = (fs::path(tfm).parent_path() / program).string();
  if (!fs::exists(binary)) return std::nullopt;
  const fs::path dir =
      fs::temp_directory_path() / ("tfm_cli_test_" + std::to_string(::getpid()) + "_" +
                                   ::testing::UnitTest::GetInstance()->current_test_info()->name());
  fs::create_directories(dir);
  const std::string out_path = (dir / "stdout").string(), err_path = (dir / "stderr").string();
  posix_spawn_file_actions_t actions;
  posix_spawn_file_actions_init(&actions);
  posix_spawn_file_actions_addopen(&actions, STDOUT_FILENO, out_path.c_str(),
                                   O_WRONLY | O_CREAT | O_TRUNC, 0644);
  posix_spawn_file_actions_addopen(&actions, STDERR_FILENO, err_path.c_str(),
                                   O_WRONLY | O_CREAT | O_TRUNC, 0644);
  std::vector<std::string> all = {binary};
  all.insert(all.end(), args.begin(), args.end());
  std::vector<char*> argv;
  for (std::string& a : all) argv.push_back(a.data());
  argv.push_back(nullptr);
  pid_t pid = 0;
  Run run;
  if (posix_spawn(&pid, binary.c_str(), &actions, nullptr, argv.data(), envp.data()) == 0) {
    int status = 0;
    ::waitpid(pid, &status, 0);
    run.status = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
  }
  posix_spawn_file_actions_destroy(&actions);
  run.out = read_file(out_path);
  run.err = read_file(err_path);
  fs::remove_all(dir);
  return run;
}

std::string binary_path(const std::string& program) {
  const char* tfm = std::getenv("TFM_BIN");
  return tfm == nullptr ? "" : (fs::path(tfm).parent_path() / program).string();
}

namespace {

// Can a listening socket take `port` now? False while another test's store listens there.
bool port_is_free(int port) {
  const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  if (fd < 0) return false;
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_ANY);
  addr.sin_port = htons(static_cast<uint16_t>(port));
  const bool free = ::bind(fd, reinterpret_cast<const sockaddr*>(&addr), sizeof addr) == 0;
  ::close(fd);
  return free;
}

}  // namespace

std::string test_port(int offset) {
  // Below the kernel's ephemeral range (32768 on), where the collectives' own connections get
  // their local ports; spread by process and offset, and skipping ports a listener holds.
  constexpr int kFirst = 20000, kCount = 12000;
  const int start = static_cast<int>((static_cast<long>(::getpid()) * 131 + offset * 17) % kCount);
  for (int i = 0; i < kCount; ++i) {
    const int port = kFirst + (start + i * 7) % kCount;
    if (port_is_free(port)) return std::to_string(port);
  }
  return std::to_string(kFirst + start);
}

}  // namespace tfm::testing
