// Where a graph's collectives run, as a compiler takes it: each collective carries its group (the
// axis of the job's device mesh it spans and every group of ranks a collective over that axis runs
// in, XLA's replica groups), and the compile gets the device each rank computes on.
#pragma once

#include <functional>
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
struct Node;
void check_mesh(const Graph& graph, const Mesh& mesh);

// One graph of one process run as a program partitioned over several devices by a compiler
// backend (XLA's SPMD partitioner): the alternative to one process per rank. The devices form a
// mesh of named axes; the graph's inputs, state and weights are split over some of them, and the
// compiler places the computation and its collectives. How values are split changes where they
// lie, never what the program computes.
struct MeshAxis {
  std::string name;  // "fsdp", "tp"
  int size = 1;
  bool operator==(const MeshAxis&) const = default;
};
struct Partitioning {
  std::vector<MeshAxis> axes;  // major first: device d has the row-major coordinates of d
  // For a graph input or weight: the mesh axes each of its axes is split over, major first.
  std::function<std::vector<std::vector<std::string>>(const Node&)> split;

  int devices() const {
    int n = 1;
    for (const MeshAxis& a : axes) n *= a.size;
    return n;
  }
  // Every axis, major first: a value split over all of them is cut in equal runs over every
  // device in device order (how a buffer of parts, the Trainer's flat parameters, is split).
  std::vector<std::string> every_axis() const {
    std::vector<std::string> names;
    for (const MeshAxis& a : axes) names.push_back(a.name);
    return names;
  }
};

}  // namespace tfm::graph
