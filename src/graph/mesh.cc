#include "graph/mesh.h"

#include <algorithm>

#include "graph/graph.h"
#include "tfm/error.h"

namespace tfm::graph {

std::shared_ptr<const CollectiveGroup> world_group(std::shared_ptr<Communicator> communicator,
                                                   std::string axis) {
  std::vector<int> ranks(static_cast<size_t>(communicator->size()));
  for (size_t i = 0; i < ranks.size(); ++i) ranks[i] = static_cast<int>(i);
  return std::make_shared<const CollectiveGroup>(
      CollectiveGroup{std::move(axis), {std::move(ranks)}, std::move(communicator)});
}

void check_mesh(const Graph& graph, const Mesh& mesh) {
  const auto world = static_cast<int>(mesh.devices.size());
  for (const Node& n : graph.nodes) {
    if (!n.group) continue;
    const CollectiveGroup& g = *n.group;
    const std::string what = std::string(op_name(n.op)) + " over '" + g.axis + "'";
    bool mine = false;
    for (const std::vector<int>& ranks : g.replica_groups) {
      if (static_cast<int>(ranks.size()) != g.size()) {
        throw Error("[mesh] " + what + ": a group of " + std::to_string(ranks.size()) +
                    " ranks in collectives of " + std::to_string(g.size()));
      }
      for (int r : ranks) {
        if (r < 0 || r >= world) {
          throw Error("[mesh] " + what + " names rank " + std::to_string(r) + " of a mesh of " +
                      std::to_string(world) + " devices");
        }
      }
      const auto at = std::find(ranks.begin(), ranks.end(), mesh.rank);
      mine = mine || (at != ranks.end() && at - ranks.begin() == g.rank());
    }
    if (!mine) {
      throw Error("[mesh] " + what + ": rank " + std::to_string(mesh.rank) +
                  " is in no group at its place " + std::to_string(g.rank()));
    }
  }
}

}  // namespace tfm::graph
