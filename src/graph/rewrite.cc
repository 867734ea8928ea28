#include "graph/rewrite.h"

#include <algorithm>

#include "tfm/error.h"

namespace tfm::graph {

std::vector<ValueId> insert_nodes(Graph& graph, ValueId at, std::vector<Node> nodes) {
  TFM_CHECK(at >= 0 && static_cast<size_t>(at) <= graph.nodes.size(), "insert_nodes: bad place");
  const auto count = static_cast<ValueId>(nodes.size());
  const auto moved = [&](ValueId v) { return v >= at ? v + count : v; };
  for (Node& n : graph.nodes) {
    for (ValueId& in : n.inputs) in = moved(in);
  }
  for (ValueId& out : graph.outputs) out = moved(out);
  for (StateUpdate& u : graph.updates) {
    u.state = moved(u.state);
    u.value = moved(u.value);
  }
  graph.nodes.insert(graph.nodes.begin() + at, std::make_move_iterator(nodes.begin()),
                     std::make_move_iterator(nodes.end()));
  std::vector<ValueId> ids(nodes.size());
  for (size_t i = 0; i < ids.size(); ++i) ids[i] = at + static_cast<ValueId>(i);
  return ids;
}

void replace_uses(Graph& graph, ValueId from, ValueId to) {
  for (size_t i = static_cast<size_t>(to) + 1; i < graph.nodes.size(); ++i) {
    std::vector<ValueId>& inputs = graph.nodes[i].inputs;
    std::replace(inputs.begin(), inputs.end(), from, to);
  }
  std::replace(graph.outputs.begin(), graph.outputs.end(), from, to);
  for (StateUpdate& u : graph.updates) u.value = u.value == from ? to : u.value;
}

}  // namespace tfm::graph
