#include "graph/effects.h"

#include <algorithm>

#include "tfm/error.h"

namespace tfm::graph {

std::vector<size_t> written_inputs(const Node& node) {
  switch (node.op) {
    case Op::kAccumulate:
    case Op::kCacheWrite:
      return {0};
    case Op::kPrepareAttention:
      return {6, 7};  // the k and v caches (prepare_attention_args)
    case Op::kAdamW:
      return {0, 2, 3};  // the parameters and both moments (adamw_args)
    case Op::kEmbeddingGrad:
    case Op::kLinearGradInput:
    case Op::kLinearGradWeight:
    case Op::kRmsNormGradWeight:
    case Op::kCrossEntropyGrad:
    case Op::kCrossEntropy:
      return node.in_place ? std::vector<size_t>{0} : std::vector<size_t>{};
    case Op::kRmsNormGradInput:
      return node.adds_weight_grad ? std::vector<size_t>{node.inputs.size() - 1}
                                   : std::vector<size_t>{};
    default:
      return {};
  }
}

bool aliases_input(const Node& node) {
  if (node.op == Op::kReshape || node.op == Op::kView || node.op == Op::kCopyToGroup) return true;
  // A loss written with its gradient returns the loss; the gradient is the logits' buffer.
  if (node.op == Op::kCrossEntropy) return false;
  const std::vector<size_t> written = written_inputs(node);
  return !written.empty() && written.front() == 0;
}

ValueId storage_of(const Graph& graph, ValueId v) {
  while (aliases_input(graph.nodes[static_cast<size_t>(v)])) {
    v = graph.nodes[static_cast<size_t>(v)].inputs[0];
  }
  return v;
}

std::vector<ValueId> written_buffers(const Graph& graph, const Node& node) {
  std::vector<ValueId> buffers;
  for (size_t i : written_inputs(node)) buffers.push_back(storage_of(graph, node.inputs[i]));
  return buffers;
}

void check_updates(const Graph& graph) {
  for (const StateUpdate& u : graph.updates) {
    const Node& state = graph.nodes.at(static_cast<size_t>(u.state));
    if (state.op != Op::kInput || !state.is_state) {
      throw Error("[graph] an update names " + graph.describe(u.state) + ", not a state input");
    }
    const std::vector<ValueId> written =
        written_buffers(graph, graph.nodes.at(static_cast<size_t>(u.value)));
    if (storage_of(graph, u.value) != u.state &&
        std::find(written.begin(), written.end(), u.state) == written.end()) {
      throw Error("[graph] the update of state '" + state.name + "' is " + graph.describe(u.value) +
                  ", which neither lives in its buffer nor writes it");
    }
  }
}

}  // namespace tfm::graph
