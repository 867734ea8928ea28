#include "cli/tfmrun/launcher.h"

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <map>
#include <stdexcept>
#include <thread>

extern char** environ;

namespace tfm::run {
namespace {

struct Stream {
  int fd;
  int rank;
  FILE* sink;
  std::string partial;  // the text after the last newline, waiting for the rest of its line
};

struct Rank {
  pid_t pid = -1;
  bool done = false;
};

volatile sig_atomic_t g_stop_signal = 0;

void on_signal(int signal) { g_stop_signal = signal; }

void emit(Stream& s, const char* data, size_t n) {
  s.partial.append(data, n);
  size_t start = 0;
  for (size_t nl; (nl = s.partial.find('\n', start)) != std::string::npos; start = nl + 1) {
    std::fprintf(s.sink, "[rank%d]: %.*s\n", s.rank, static_cast<int>(nl - start),
                 s.partial.data() + start);
  }
  s.partial.erase(0, start);
  std::fflush(s.sink);
}

void flush_partial(Stream& s) {
  if (!s.partial.empty()) emit(s, "\n", 1);
}

// The node's cores shared out among its ranks, unless the caller set OMP_NUM_THREADS: ranks that
// each start a thread per core would oversubscribe the node (torchrun sets 1 for the same reason).
int threads_per_rank(const JobSpec& spec) {
  const int cores = static_cast<int>(std::thread::hardware_concurrency());
  return std::max(1, cores / spec.nproc_per_node);
}

pid_t spawn_rank(const JobSpec& spec, int local_rank, int out_fd, int err_fd) {
  std::map<std::string, std::string> env;
  for (char** e = environ; *e != nullptr; ++e) {
    const std::string entry = *e;
    const size_t eq = entry.find('=');
    if (eq != std::string::npos) env[entry.substr(0, eq)] = entry.substr(eq + 1);
  }
  for (auto& [key, value] : rank_environment(spec, local_rank)) env[key] = value;
  if (!env.count("OMP_NUM_THREADS"))
    env["OMP_NUM_THREADS"] = std::to_string(threads_per_rank(spec));
  std::vector<std::string> env_strings;
  for (auto& [key, value] : env) env_strings.push_back(key + "=" + value);
  std::vector<char*> envp, argv;
  for (auto& s : env_strings) envp.push_back(s.data());
  envp.push_back(nullptr);
  std::vector<std::string> args = spec.command;
  for (auto& s : args) argv.push_back(s.data());
  argv.push_back(nullptr);

  // Each rank leads its own process group, so stopping a rank also stops what it started (a
  // shell's children, worker processes) and nothing lingers holding its output open; and it is
  // sent SIGTERM when the launcher dies, even by SIGKILL, rather than left running orphaned.
  const pid_t launcher = ::getpid();
  const std::string failure = "tfmrun: cannot start '" + spec.command[0] + "'\n";
  const pid_t pid = ::fork();
  if (pid < 0) throw std::runtime_error(std::string("cannot fork: ") + std::strerror(errno));
  if (pid == 0) {
    // Only async-signal-safe calls between fork and exec.
    ::setpgid(0, 0);
    ::prctl(PR_SET_PDEATHSIG, SIGTERM);
    if (::getppid() != launcher) ::_exit(127);  // the launcher died before the line above
    ::dup2(out_fd, 1);
    ::dup2(err_fd, 2);
    ::execvpe(argv[0], argv.data(), envp.data());
    [[maybe_unused]] const ssize_t written = ::write(2, failure.data(), failure.size());
    ::_exit(127);
  }
  ::setpgid(pid, pid);  // also here: the group exists before the launcher signals it
  return pid;
}

std::string describe_status(int status) {
  if (WIFSIGNALED(status)) {
    return std::string("killed by signal ") + std::to_string(WTERMSIG(status)) + " (" +
           strsignal(WTERMSIG(status)) + ")";
  }
  return "exit code " + std::to_string(WEXITSTATUS(status));
}

void signal_all(const std::vector<Rank>& ranks, int signal) {
  for (const Rank& r : ranks) ::kill(-r.pid, signal);
}

}  // namespace

std::vector<std::pair<std::string, std::string>> rank_environment(const JobSpec& spec,
                                                                  int local_rank) {
  const int rank = spec.node_rank * spec.nproc_per_node + local_rank;
  return {{"RANK", std::to_string(rank)},
          {"LOCAL_RANK", std::to_string(local_rank)},
          {"WORLD_SIZE", std::to_string(spec.nnodes * spec.nproc_per_node)},
          {"LOCAL_WORLD_SIZE", std::to_string(spec.nproc_per_node)},
          {"GROUP_RANK", std::to_string(spec.node_rank)},
          {"MASTER_ADDR", spec.master_addr},
          {"MASTER_PORT", std::to_string(spec.master_port)}};
}

int launch(const JobSpec& spec) {
  struct sigaction action {};
  action.sa_handler = on_signal;
  sigaction(SIGINT, &action, nullptr);
  sigaction(SIGTERM, &action, nullptr);

  if (std::getenv("OMP_NUM_THREADS") == nullptr && spec.nproc_per_node > 1) {
    std::fprintf(stderr,
                 "tfmrun: OMP_NUM_THREADS=%d for each of the %d processes (set it to choose)\n",
                 threads_per_rank(spec), spec.nproc_per_node);
  }
  std::vector<Rank> ranks(static_cast<size_t>(spec.nproc_per_node));
  std::vector<Stream> streams;
  for (int local = 0; local < spec.nproc_per_node; ++local) {
    int out[2], err[2];
    if (::pipe2(out, O_CLOEXEC) != 0 || ::pipe2(err, O_CLOEXEC) != 0) {
      throw std::runtime_error(std::string("cannot create a pipe: ") + std::strerror(errno));
    }
    const int rank = spec.node_rank * spec.nproc_per_node + local;
    ranks[static_cast<size_t>(local)].pid = spawn_rank(spec, local, out[1], err[1]);
    ::close(out[1]);
    ::close(err[1]);
    streams.push_back({out[0], rank, stdout, {}});
    streams.push_back({err[0], rank, stderr, {}});
  }

  int failed_rank = -1, result = 0;
  std::string failure;
  auto kill_deadline = std::chrono::steady_clock::time_point::max();
  size_t running = ranks.size();
  // Once every rank has exited, output still in the pipes is read for at most this long: a
  // process a rank left behind must not keep the job alive by holding the pipe open.
  constexpr auto kDrain = std::chrono::seconds(2);
  auto drain_deadline = std::chrono::steady_clock::time_point::max();
  while (running > 0 || (!streams.empty() && std::chrono::steady_clock::now() < drain_deadline)) {
    std::vector<pollfd> fds;
    for (const Stream& s : streams) fds.push_back({s.fd, POLLIN, 0});
    ::poll(fds.data(), fds.size(), 100);
    for (size_t i = fds.size(); i-- > 0;) {
      if ((fds[i].revents & (POLLIN | POLLHUP | POLLERR)) == 0) continue;
      char buffer[4096];
      const ssize_t n = ::read(streams[i].fd, buffer, sizeof buffer);
      if (n > 0) {
        emit(streams[i], buffer, static_cast<size_t>(n));
      } else if (n == 0 || errno != EINTR) {
        flush_partial(streams[i]);
        ::close(streams[i].fd);
        streams.erase(streams.begin() + static_cast<std::ptrdiff_t>(i));
      }
    }
    for (size_t local = 0; local < ranks.size(); ++local) {
      Rank& r = ranks[local];
      int status = 0;
      if (r.done || ::waitpid(r.pid, &status, WNOHANG) != r.pid) continue;
      r.done = true;
      --running;
      const bool ok = WIFEXITED(status) && WEXITSTATUS(status) == 0;
      if (!ok && failed_rank < 0 && g_stop_signal == 0) {
        failed_rank = spec.node_rank * spec.nproc_per_node + static_cast<int>(local);
        failure = describe_status(status);
        result = 1;
        // One rank is gone: the others would wait on it in a collective. Stop them.
        signal_all(ranks, SIGTERM);
        kill_deadline = std::chrono::steady_clock::now() +
                        std::chrono::duration_cast<std::chrono::steady_clock::duration>(
                            std::chrono::duration<double>(spec.kill_grace_s));
      }
    }
    if (g_stop_signal != 0 && result == 0) {
      result = 1;
      failure = "tfmrun received signal " + std::to_string(g_stop_signal);
      signal_all(ranks, g_stop_signal);
      kill_deadline = std::chrono::steady_clock::now() +
                      std::chrono::duration_cast<std::chrono::steady_clock::duration>(
                          std::chrono::duration<double>(spec.kill_grace_s));
    }
    if (running == 0 && drain_deadline == std::chrono::steady_clock::time_point::max()) {
      drain_deadline = std::chrono::steady_clock::now() + kDrain;
    }
    if (running > 0 && std::chrono::steady_clock::now() > kill_deadline) {
      signal_all(ranks, SIGKILL);
      kill_deadline = std::chrono::steady_clock::time_point::max();
    }
  }
  for (Stream& s : streams) {
    flush_partial(s);
    ::close(s.fd);
  }
  if (failed_rank >= 0) {
    std::fprintf(stderr, "tfmrun: rank %d failed (%s); the other ranks were stopped\n", failed_rank,
                 failure.c_str());
  } else if (result != 0) {
    std::fprintf(stderr, "tfmrun: %s; the ranks were stopped\n", failure.c_str());
  }
  return result;
}

}  // namespace tfm::run
