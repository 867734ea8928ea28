// Graph nodes that run over a process group on CUDA (tensor parallel, FSDP): NCCL between the
// ranks, own kernels for the layouts NCCL leaves.
#pragma once

#include <optional>

#include "backends/cuda/steps.h"

namespace tfm::cuda {

// nullopt when the node is not a collective. Makes the group's NCCL twin (collectively) the
// first time a graph uses it.
std::optional<Step> make_collective_step(const graph::Graph& graph, graph::ValueId id);
size_t collective_scratch_bytes(const graph::Graph& graph, graph::ValueId id);

}  // namespace tfm::cuda
