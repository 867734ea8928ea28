// Device-independent edits of a graph that keep its creation order topological: the fusion passes
// and ops::decompose build on them.
#pragma once

#include <vector>

#include "graph/graph.h"

namespace tfm::graph {

// Inserts `nodes` before node `at` (at == nodes.size(): at the end). Every id from `at` on moves
// up by nodes.size(), in inputs, outputs and updates; the inserted nodes' inputs are taken as
// given, so they name values before `at`, or one another as at + i. Returns their ids.
std::vector<ValueId> insert_nodes(Graph& graph, ValueId at, std::vector<Node> nodes);
// Every read of `from` by a node after `to` (and by the outputs and updates) reads `to` instead.
void replace_uses(Graph& graph, ValueId from, ValueId to);

}  // namespace tfm::graph
