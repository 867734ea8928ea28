// The process groups a DistributedConfig needs: the world from the environment tfmrun (or
// torchrun) sets, made once per process, and this rank's tensor-parallel and FSDP groups.
#pragma once

#include <memory>
#include <vector>

#include "distributed/process_group.h"
#include "models/tensor_parallel.h"
#include "tfm/load_options.h"

namespace tfm::distributed {

struct ParallelGroups {
  std::shared_ptr<ProcessGroup> world;
  std::shared_ptr<ProcessGroup> tp;    // the ranks that split one copy of the model
  std::shared_ptr<ProcessGroup> fsdp;  // the ranks holding the same slices in each replica
  // Every tensor-parallel group's world ranks, and every FSDP group's (graph::CollectiveGroup).
  std::vector<std::vector<int>> tp_groups, fsdp_groups;
};

// Throws when the sizes are below 1 or WORLD_SIZE is not tp_size x fsdp_size. With both sizes 1
// no group is made and no environment is needed.
const ParallelGroups& parallel_groups(const DistributedConfig& config);
models::Parallelism parallelism(const DistributedConfig& config);

}  // namespace tfm::distributed
