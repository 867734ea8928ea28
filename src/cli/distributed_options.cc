#include "cli/distributed_options.h"

#include <cstdlib>
#include <string>

#include "cli/count_validators.h"

namespace tfm::cli {

void add_distributed_options(CLI::App* cmd, DistributedConfig& config) {
  cmd->add_option("--tp-size", config.tp_size,
                  "Tensor-parallel ranks (start with tfmrun; WORLD_SIZE = tp x fsdp; on the pjrt "
                  "device, one process partitions its programs over tp x fsdp devices)")
      ->check(at_least(1));
  cmd->add_option("--fsdp-size", config.fsdp_size, "Data-parallel (FSDP) ranks")
      ->check(at_least(1));
  cmd->add_option("--ep-size", config.ep_size,
                  "Expert-parallel ranks of a mixture-of-experts model: its experts split over "
                  "the tensor-parallel ranks (--tp-size) or, without them, over the FSDP ranks, "
                  "which exchange rows by all-to-all (--fsdp-size)")
      ->check(at_least(1));
}

bool prints_results() {
  const char* rank = std::getenv("RANK");
  return rank == nullptr || std::string(rank) == "0";
}

}  // namespace tfm::cli
