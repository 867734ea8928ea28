// The CPU steps of the mixture-of-experts ops (graph::Op::kMoeRoute .. kRouterLossGrad).
#pragma once

#include <functional>
#include <vector>

#include "graph/graph.h"

namespace tfm::cpu {

// As make_step (steps.h), for a mixture-of-experts node.
std::function<void()> make_moe_step(const graph::Graph& graph, graph::ValueId id,
                                    std::vector<void*>& ptrs);

}  // namespace tfm::cpu
