#include "distributed/parallel_groups.h"

#include <cstdlib>
#include <map>
#include <mutex>
#include <string>
#include <vector>

#include "tfm/error.h"

namespace tfm::distributed {
namespace {

std::string sizes(const DistributedConfig& c) {
  return "tp_size=" + std::to_string(c.tp_size) + " x fsdp_size=" + std::to_string(c.fsdp_size);
}

// LOCAL_WORLD_SIZE as tfmrun (or torchrun) sets it; the whole world where it is not set.
int local_world_size(int world) {
  const char* text = std::getenv("LOCAL_WORLD_SIZE");
  if (text == nullptr) return world;
  char* end = nullptr;
  const long value = std::strtol(text, &end, 10);
  if (*text == '\0' || *end != '\0' || value < 1) {
    throw Error(std::string("[distributed] LOCAL_WORLD_SIZE='") + text + "' is not a count");
  }
  return static_cast<int>(value);
}

std::shared_ptr<ProcessGroup> world() {
  // One rendezvous per process: the store serves MASTER_PORT once.
  static const std::shared_ptr<ProcessGroup> group =
      std::make_shared<ProcessGroup>(ProcessGroup::options_from_environment());
  return group;
}

ParallelGroups make_groups(const DistributedConfig& c) {
  ParallelGroups g;
  g.world = world();
  if (g.world->size() != c.tp_size * c.fsdp_size) {
    throw Error("[distributed] DistributedConfig " + sizes(c) + " needs " +
                std::to_string(c.tp_size * c.fsdp_size) + " processes, but WORLD_SIZE is " +
                std::to_string(g.world->size()));
  }
  // Tensor-parallel ranks are neighbours (on one node where there are several).
  const int rank = g.world->rank(), tp_index = rank % c.tp_size, replica = rank / c.tp_size;
  const std::string name = "tp" + std::to_string(c.tp_size) + "x" + std::to_string(c.fsdp_size);
  g.tp_groups.resize(static_cast<size_t>(c.fsdp_size));
  g.fsdp_groups.resize(static_cast<size_t>(c.tp_size));
  for (int r = 0; r < c.fsdp_size; ++r) {
    for (int i = 0; i < c.tp_size; ++i) {
      g.tp_groups[static_cast<size_t>(r)].push_back(r * c.tp_size + i);
      g.fsdp_groups[static_cast<size_t>(i)].push_back(r * c.tp_size + i);
    }
  }
  g.tp = g.world->subgroup(g.tp_groups[static_cast<size_t>(replica)],
                           name + ".tp" + std::to_string(replica));
  g.fsdp = g.world->subgroup(g.fsdp_groups[static_cast<size_t>(tp_index)],
                             name + ".fsdp" + std::to_string(tp_index));
  // Rank 0 serves the store: it must not run ahead (and perhaps exit) while another rank still
  // reads a subgroup's addresses from it.
  g.world->barrier();
  return g;
}

}  // namespace

const ParallelGroups& parallel_groups(const DistributedConfig& config) {
  if (config.tp_size < 1 || config.fsdp_size < 1) {
    throw Error("[distributed] DistributedConfig " + sizes(config) + ": sizes must be at least 1");
  }
  static std::mutex mutex;
  static std::map<std::pair<int, int>, ParallelGroups> made;
  const std::lock_guard<std::mutex> lock(mutex);
  const std::pair<int, int> key{config.tp_size, config.fsdp_size};
  auto it = made.find(key);
  if (it == made.end()) {
    it = made.emplace(key, config.tp_size * config.fsdp_size == 1 ? ParallelGroups{}
                                                                  : make_groups(config))
             .first;
  }
  return it->second;
}

models::Parallelism parallelism(const DistributedConfig& config) {
  // Experts split over the tensor-parallel ranks (which share a batch), or over the FSDP ranks
  // (which exchange rows by all-to-all).
  const bool over_tp = config.ep_size > 1 && config.ep_size == config.tp_size;
  const bool over_fsdp =
      config.ep_size > 1 && config.tp_size == 1 && config.ep_size == config.fsdp_size;
  if (config.ep_size != 1 && !over_tp && !over_fsdp) {
    throw Error("[distributed] ep_size=" + std::to_string(config.ep_size) +
                " must be 1, tp_size=" + std::to_string(config.tp_size) +
                " (experts split over the tensor-parallel ranks) or, with tp_size 1, fsdp_size=" +
                std::to_string(config.fsdp_size) + " (over the data-parallel ranks)");
  }
  const ParallelGroups& groups = parallel_groups(config);
  models::Parallelism p;
  p.expert_parallel = over_tp;
  p.experts_exchanged = over_fsdp;
  p.writes_files = !groups.world || groups.world->rank() == 0;
  if (config.tp_size > 1) {
    p.rank = groups.tp->rank();
    p.size = groups.tp->size();
    p.group = std::make_shared<const graph::CollectiveGroup>(
        graph::CollectiveGroup{"tp", groups.tp_groups, groups.tp});
  }
  if (config.fsdp_size > 1) {
    p.fsdp_rank = groups.fsdp->rank();
    p.fsdp_size = groups.fsdp->size();
    p.fsdp_group = std::make_shared<const graph::CollectiveGroup>(
        graph::CollectiveGroup{"fsdp", groups.fsdp_groups, groups.fsdp});
  }
  if (groups.world) p.local_world_size = local_world_size(groups.world->size());
  return p;
}

}  // namespace tfm::distributed
