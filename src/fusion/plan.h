// A graph specialized for one shape by a kernel backend: scheduled, with every intermediate
// placed in one arena by liveness.
#pragma once

#include <cstdint>
#include <vector>

#include "graph/graph.h"

namespace tfm::fusion {

// Where the second result of a paired elementwise step (pair_elementwise_siblings), a norm
// gradient's bf16 copy (fold_narrow_copies) or an attention's rows' statistics
// (save_attention_statistics) starts in the node's buffer, in bytes: after the first, at the
// next multiple of `alignment` (the target's).
int64_t second_result_bytes(const graph::Node& node, size_t alignment);
// Bytes a node writes: its shape's elements, and its second result where it has one.
size_t output_bytes(const graph::Node& node, size_t alignment);

struct Plan {
  graph::Graph graph;
  std::vector<graph::ValueId> schedule;  // nodes to run, in order (inputs and weights excluded)
  std::vector<int64_t> offset;           // per node: byte offset in the arena, -1 when it owns none
  size_t arena_bytes = 0;
  size_t alignment = 256;  // of every offset
};

// Schedules the graph (the nodes its outputs and state updates need, in creation order, free
// updates as early as they can run) and places every buffer in one arena, each at a multiple of
// `alignment`.
Plan plan_memory(graph::Graph graph, size_t alignment);

// State updates nothing else depends on: values no other node reads, written into a state input
// that no other node reads either (a gradient added into where it is kept). The update's input 0
// must be the state itself, as the builder's accumulations and fold_accumulations' have it; the
// updates the later folds make (a norm gradient's, a view of a chain) are judged by that too, so
// passes that look for free updates run before them. They may run as soon as their inputs exist,
// which frees those inputs early; the plan schedules them so.
std::vector<bool> free_effects(const graph::Graph& graph);

}  // namespace tfm::fusion
