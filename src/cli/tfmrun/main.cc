// tfmrun: torchrun's launcher for tfm programs.
//   tfmrun --nproc_per_node 4 [--nnodes 2 --node_rank 0 --master_addr H --master_port P] PROGRAM
//   ...
#include <CLI/CLI.hpp>
#include <cstdio>
#include <exception>

#include "cli/count_validators.h"
#include "cli/tfmrun/launcher.h"

int main(int argc, char** argv) {
  tfm::run::JobSpec spec;
  CLI::App app{"Start the ranks of a distributed tfm job, as torchrun does"};
  app.add_option("--nproc_per_node,--nproc-per-node", spec.nproc_per_node, "Ranks on this node")
      ->check(tfm::cli::at_least(1))
      ->capture_default_str();
  app.add_option("--nnodes", spec.nnodes, "Nodes in the job")
      ->check(tfm::cli::at_least(1))
      ->capture_default_str();
  app.add_option("--node_rank,--node-rank", spec.node_rank, "This node's index")
      ->check(tfm::cli::at_least(0))
      ->capture_default_str();
  app.add_option("--master_addr,--master-addr", spec.master_addr, "Address of rank 0's node")
      ->capture_default_str();
  app.add_option("--master_port,--master-port", spec.master_port, "Port of the rendezvous store")
      ->check(CLI::Range(1, 65535))
      ->capture_default_str();
  app.prefix_command();  // from the program on, every argument belongs to the program
  app.footer("PROGRAM [ARGS...]: the program each rank runs");
  CLI11_PARSE(app, argc, argv);
  spec.command = app.remaining();
  if (spec.command.empty()) {
    std::fprintf(stderr, "tfmrun: give the program to run (tfmrun --help)\n");
    return 2;
  }
  if (spec.node_rank >= spec.nnodes) {
    std::fprintf(stderr, "tfmrun: --node_rank %d must be below --nnodes %d\n", spec.node_rank,
                 spec.nnodes);
    return 2;
  }
  try {
    return tfm::run::launch(spec);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "tfmrun: error: %s\n", e.what());
    return 1;
  }
}
