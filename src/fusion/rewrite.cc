#include "fusion/rewrite.h"

#include <algorithm>

#include "graph/effects.h"

namespace tfm::fusion {

using namespace graph;  // the IR this layer rewrites

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
  for (const StateUpdate& u : graph.updates) ++uses[static_cast<size_t>(u.value)];
  return uses;
}

std::vector<bool> read_by_elementwise_only(const Graph& graph, const std::vector<bool>& dead) {
  std::vector<bool> only(graph.nodes.size(), true);
  for (size_t i = 0; i < graph.nodes.size(); ++i) {
    if (dead[i] || graph.nodes[i].op == Op::kElementwise) continue;
    for (ValueId in : graph.nodes[i].inputs) only[static_cast<size_t>(in)] = false;
  }
  for (ValueId out : graph.outputs) only[static_cast<size_t>(out)] = false;
  for (const StateUpdate& u : graph.updates) only[static_cast<size_t>(u.value)] = false;
  return only;
}

bool written_between(const Graph& graph, size_t from, size_t to,
                     const std::vector<ValueId>& reads) {
  std::vector<ValueId> owners;
  for (ValueId v : reads) owners.push_back(storage_of(graph, v));
  const auto read = [&](ValueId v) {
    return std::find(owners.begin(), owners.end(), storage_of(graph, v)) != owners.end();
  };
  for (size_t i = from + 1; i < to; ++i) {
    for (ValueId buffer : written_buffers(graph, graph.nodes[i])) {
      if (read(buffer)) return true;
    }
  }
  return false;
}

bool computes_gradients(const Graph& graph) {
  return std::any_of(graph.nodes.begin(), graph.nodes.end(),
                     [](const Node& n) { return is_backward(n.op); });
}

std::vector<std::vector<ValueId>> readers_of(const Graph& graph, const std::vector<bool>& dead) {
  std::vector<std::vector<ValueId>> readers(graph.nodes.size());
  for (size_t i = 0; i < graph.nodes.size(); ++i) {
    if (dead[i]) continue;
    for (ValueId in : graph.nodes[i].inputs) {
      std::vector<ValueId>& r = readers[static_cast<size_t>(in)];
      if (r.empty() || r.back() != static_cast<ValueId>(i)) r.push_back(static_cast<ValueId>(i));
    }
  }
  return readers;
}

bool is_single(const Node& node, EwCode code) {
  if (node.op != Op::kElementwise || node.program.results != 1) return false;
  const std::vector<EwInstr>& p = node.program.instrs;
  const size_t loads = p.size() - 1;
  if (p.empty() || p.back().code != code || loads != node.inputs.size()) return false;
  for (size_t i = 0; i < loads; ++i) {
    if (p[i].code != EwCode::kLoad || p[i].operand != static_cast<int>(i)) return false;
  }
  return true;
}

void fold_adds_into_steps(Graph& graph, bool (*takes)(const Node& step),
                          void (*adding)(Node& step, ValueId other)) {
  const std::vector<int> uses = count_uses(graph, std::vector<bool>(graph.nodes.size(), false));
  const auto at = [&](ValueId v) -> Node& { return graph.nodes[static_cast<size_t>(v)]; };
  for (size_t a = 0; a < graph.nodes.size(); ++a) {
    Node& add = graph.nodes[a];
    if (!is_single(add, EwCode::kAdd) || add.dtype != DType::f32 || add.inputs.size() != 2) {
      continue;
    }
    for (size_t slot = 0; slot < 2; ++slot) {
      const ValueId s = add.inputs[slot], other = add.inputs[1 - slot];
      Node& step = at(s);
      if (!takes(step) || step.dtype != DType::f32 || uses[static_cast<size_t>(s)] != 1 ||
          step.shape != add.shape || at(other).dtype != DType::f32 ||
          at(other).shape != add.shape ||
          written_between(graph, static_cast<size_t>(s), a, step.inputs)) {
        continue;
      }
      Node fused = step;
      adding(fused, other);
      add = std::move(fused);
      leave_for_dead(step);
      break;
    }
  }
}

void leave_for_dead(Node& node) {
  const Shape shape = node.shape;
  node = Node{};
  node.op = Op::kElementwise;
  node.shape = shape;
}

}  // namespace tfm::fusion
