// What tfmrun does once its flags are parsed: start this node's ranks of a job with torchrun's
// environment, pass their output through with a rank prefix, and end the job when any rank fails.
#pragma once

#include <string>
#include <vector>

namespace tfm::run {

struct JobSpec {
  int nproc_per_node = 1;
  int nnodes = 1;
  int node_rank = 0;
  std::string master_addr = "127.0.0.1";
  int master_port = 29500;
  std::vector<std::string> command;  // the program and its arguments
  double kill_grace_s = 5.0;         // SIGTERM, then SIGKILL after this long
};

// The environment variables torchrun gives local rank `local_rank`.
std::vector<std::pair<std::string, std::string>> rank_environment(const JobSpec& spec,
                                                                  int local_rank);

// Runs the job to its end and returns tfmrun's exit status: 0 when every rank exited 0;
// otherwise 1, after stopping the other ranks and printing which rank failed and how.
int launch(const JobSpec& spec);

}  // namespace tfm::run
