// Steps for the training ops (the loss and the backward ops autodiff emits), kept apart from the
// inference steps: make_step asks here before giving up on a node.
#pragma once

#include <optional>

#include "backends/cuda/steps.h"
#include "graph/graph.h"

namespace tfm::cuda {

// The step of a training op; nullopt for any other op and for a vocabulary shard (tensor
// parallel training runs on the cpu), which make_step then refuses.
std::optional<Step> make_training_step(const graph::Graph& graph, graph::ValueId id);
// The scratch a training op's step needs; 0 for any other op.
size_t training_scratch_bytes(const graph::Graph& graph, graph::ValueId id);

}  // namespace tfm::cuda
