// Steps for the mixture-of-experts ops (graph::Op::kMoeRoute, kMoeExperts, kRouterLoss, the
// exchange ops kMoeDispatch, kMoeSlots, kMoeCombine, and their gradients): make_step asks here
// before giving up on a node.
#pragma once

#include <optional>

#include "backends/cuda/steps.h"
#include "graph/graph.h"

namespace tfm::cuda {

// The step of a mixture-of-experts op; nullopt for any other op.
std::optional<Step> make_moe_step(const graph::Graph& graph, graph::ValueId id);
// The scratch its step needs; 0 for any other op.
size_t moe_scratch_bytes(const graph::Graph& graph, graph::ValueId id);

}  // namespace tfm::cuda
