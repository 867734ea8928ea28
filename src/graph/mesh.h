// Where a graph's collectives run, as a compiler takes it: each collective carries its group (the
// axis of the job's device mesh it spans and every group of ranks a collective over that axis runs
// in, XLA's replica groups), and the compile gets the device each rank computes on.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "graph/communicator.h"
#include "tfm/device.h"

namespace tfm::graph {

struct CollectiveGroup {
  std::string axis;                              // "tp", "fsdp"
  std::vector<std::vector<int>> replica_groups;  // world ranks, each group in its rank order
  // This rank's group, as a kernel backend runs the collective (gloo between CPU processes; the
  // NCCL communicator's bootstrap on GPUs).
  std::shared_ptr<Communicator> communicator;

  int size() const { return communicator->size(); }
  int rank() const { return communicator->rank(); }
};

// A group of every rank of `communicator`'s job, in rank order (a collective over the world).
std::shared_ptr<const CollectiveGroup> world_group(std::shared_ptr<Communicator> communicator,
                                                   std::string axis = "world");

// The device assignment: world rank r computes on devices[r]; this process is rank `rank`. Empty
// for a graph of one process.
struct Mesh {
  int rank = 0;
  std::vector<Device> devices;
};

// Throws unless every collective of the graph runs in groups of ranks the mesh has, and this
// rank's group among them is the one its communicator joins.
struct Graph;
void check_mesh(const Graph& graph, const Mesh& mesh);

}  // namespace tfm::graph
