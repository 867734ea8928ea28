// What the fusion passes share: who reads a value, where it lives, and
// whether a step may move later past the in-place writes in between.
#pragma once

#include <cstddef>
#include <vector>

#include "graph/graph.h"

namespace tfm::fusion {

using graph::Graph;
using graph::Node;
using graph::ValueId;

// Does the node read its input `slot`? An elementwise node whose producer was inlined keeps the
// slot (until the inputs are compacted) but no longer loads it.
bool reads_slot(const Node& node, size_t slot);
// How many times each value is read (outputs and state updates count), by the nodes not `dead`.
std::vector<int> count_uses(const Graph& graph, const std::vector<bool>& dead);
// Is every use of each value by an elementwise node (not an output, an effect or another op), of
// the nodes not `dead`?
std::vector<bool> read_by_elementwise_only(const Graph& graph, const std::vector<bool>& dead);
// Does a node created after `from` and before `to` write in place into the buffer of one of
// `reads`? A step reading them may move from `from` to `to` only where none does.
bool written_between(const Graph& graph, size_t from, size_t to, const std::vector<ValueId>& reads);
// Does the graph compute gradients (a backward op anywhere)? The product and attention fusions
// leave such graphs alone: the fused ops have no backward rule, and autodiff has chosen which of
// their forward values the backward pass keeps.
bool computes_gradients(const Graph& graph);
// The nodes that read each value (once per node), of the nodes not `dead`.
std::vector<std::vector<ValueId>> readers_of(const Graph& graph, const std::vector<bool>& dead);
// Is the elementwise node one instruction over its loads: `code` over inputs 0 (and 1)?
bool is_single(const Node& node, graph::EwCode code);
// Each elementwise add of two f32 values of one shape, one of them an f32 step that `takes` and
// that the add alone reads, becomes that step adding the other value as it writes (`adding` gives
// the step the other value as its residual). The step moves to where the add ran, so it folds only
// where nothing writes its inputs in between: a residual connection into the product before it, the
// residual stream's gradient into a norm's gradient.
void fold_adds_into_steps(Graph& graph, bool (*takes)(const Node& step),
                          void (*adding)(Node& step, ValueId other));
// A node whose work another took over: no inputs, nothing reads it, so no plan schedules it.
void leave_for_dead(Node& node);

}  // namespace tfm::fusion
