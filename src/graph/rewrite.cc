#include "graph/rewrite.h"

#include <algorithm>

namespace tfm::graph {

bool reads_slot(const Node& node, size_t slot) {
  if (node.op != Op::kElementwise) return true;
  return std::any_of(node.program.instrs.begin(), node.program.instrs.end(), [&](const EwInstr& i) {
    return i.code == EwCode::kLoad && static_cast<size_t>(i.operand) == slot;
  });
}

std::vector<int> count_uses(const Graph& graph, const std::vector<bool>& dead) {
  std::vector<int> uses(graph.nodes.size(), 0);
  for (size_t i = 0; i < graph.nodes.size(); ++i) {
    if (dead[i]) continue;
    const Node& node = graph.nodes[i];
    for (size_t slot = 0; slot < node.inputs.size(); ++slot) {
      if (reads_slot(node, slot)) ++uses[static_cast<size_t>(node.inputs[slot])];
    }
  }
  for (ValueId out : graph.outputs) ++uses[static_cast<size_t>(out)];
  for (ValueId effect : graph.effects) ++uses[static_cast<size_t>(effect)];
  return uses;
}

std::vector<bool> read_by_elementwise_only(const Graph& graph, const std::vector<bool>& dead) {
  std::vector<bool> only(graph.nodes.size(), true);
  for (size_t i = 0; i < graph.nodes.size(); ++i) {
    if (dead[i] || graph.nodes[i].op == Op::kElementwise) continue;
    for (ValueId in : graph.nodes[i].inputs) only[static_cast<size_t>(in)] = false;
  }
  for (ValueId out : graph.outputs) only[static_cast<size_t>(out)] = false;
  for (ValueId effect : graph.effects) only[static_cast<size_t>(effect)] = false;
  return only;
}

ValueId storage_of(const Graph& graph, ValueId v) {
  while (aliases_input(graph.nodes[static_cast<size_t>(v)])) {
    v = graph.nodes[static_cast<size_t>(v)].inputs[0];
  }
  return v;
}

bool written_between(const Graph& graph, size_t from, size_t to,
                     const std::vector<ValueId>& reads) {
  std::vector<ValueId> owners;
  for (ValueId v : reads) owners.push_back(storage_of(graph, v));
  const auto read = [&](ValueId v) {
    return std::find(owners.begin(), owners.end(), storage_of(graph, v)) != owners.end();
  };
  for (size_t i = from + 1; i < to; ++i) {
    const Node& n = graph.nodes[i];
    if ((n.op == Op::kAccumulate || (aliases_input(n) && n.in_place)) && read(n.inputs[0])) {
      return true;
    }
    if (n.op == Op::kPrepareAttention && (read(n.inputs[6]) || read(n.inputs[7]))) return true;
    if (n.op == Op::kCrossEntropy && n.in_place && read(n.inputs[0])) return true;
  }
  return false;
}

void leave_for_dead(Node& node) {
  const Shape shape = node.shape;
  node = Node{};
  node.op = Op::kElementwise;
  node.shape = shape;
}

}  // namespace tfm::graph
