// The CPU steps of the collectives (graph::Op::kAllReduce .. kAllToAll), over the node's process
// group (gloo between processes).
#pragma once

#include <functional>
#include <vector>

#include "graph/graph.h"

namespace tfm::cpu {

// As make_step (steps.h), for a collective node.
std::function<void()> make_collective_step(const graph::Graph& graph, graph::ValueId id,
                                           std::vector<void*>& ptrs);

}  // namespace tfm::cpu
