// What a node writes besides its own output, said in one place: the planner, the passes and every
// backend ask these functions, never an op's flags.
#pragma once

#include <cstddef>
#include <vector>

#include "graph/graph.h"

namespace tfm::graph {

// The positions of the inputs a node writes into (in place): a cache written at its slots, an
// accumulator or a sum added into, logits overwritten by their loss's gradient, a norm weight's
// gradient accumulator. Empty for a node that writes only its own output.
std::vector<size_t> written_inputs(const Node& node);
// Does the node's output share memory with input 0 instead of owning a buffer? Reshapes, views
// and copies to a group do, and so does every node that writes input 0 and returns it.
bool aliases_input(const Node& node);
// The node whose buffer a value lives in: through views, reshapes and in-place steps to the node
// that owns the memory (a state input, for a state's updated value).
ValueId storage_of(const Graph& graph, ValueId v);
// The buffers (storage_of) a node writes into besides its own.
std::vector<ValueId> written_buffers(const Graph& graph, const Node& node);
// Checks that each of graph.updates names a state input and a value that lives in its buffer, or
// (after a kernel backend's folds) the step that writes into it last; throws naming the first
// that does not.
void check_updates(const Graph& graph);

}  // namespace tfm::graph
