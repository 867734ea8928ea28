#include "graph/autodiff.h"

#include "graph/builder.h"
#include "ops/backward.h"
#include "tfm/error.h"

namespace tfm::graph {
namespace {

// Nodes that lie on a path from some `wrt` value to `y`: only their gradients are needed.
std::vector<bool> on_path(const Graph& graph, ValueId y, const std::vector<ValueId>& wrt) {
  const size_t n = graph.nodes.size();
  std::vector<bool> from_wrt(n, false), to_y(n, false);
  for (ValueId id : wrt) from_wrt[static_cast<size_t>(id)] = true;
  for (size_t i = 0; i < n; ++i) {
    for (ValueId in : graph.nodes[i].inputs)
      from_wrt[i] = from_wrt[i] || from_wrt[static_cast<size_t>(in)];
  }
  to_y[static_cast<size_t>(y)] = true;
  for (size_t i = n; i-- > 0;) {
    if (!to_y[i]) continue;
    for (ValueId in : graph.nodes[i].inputs) to_y[static_cast<size_t>(in)] = true;
  }
  std::vector<bool> path(n);
  for (size_t i = 0; i < n; ++i) path[i] = from_wrt[i] && to_y[i];
  return path;
}

}  // namespace

std::vector<ValueId> append_backward(Graph& graph, ValueId y, ValueId dy,
                                     const std::vector<ValueId>& wrt) {
  const std::vector<bool> path = on_path(graph, y, wrt);
  const auto forward_size = static_cast<ValueId>(graph.nodes.size());
  Builder b(std::move(graph));
  if (b.shape(dy) != b.shape(y)) {
    throw Error("[autodiff] the seed gradient " + shape_str(b.shape(dy)) + " must match " +
                shape_str(b.shape(y)));
  }
  std::vector<ValueId> grad(static_cast<size_t>(forward_size), -1);
  grad[static_cast<size_t>(y)] = dy;
  // Creation order is topological, so walking it backwards visits every consumer of a value
  // before the value itself: its gradient is complete when its turn comes.
  for (ValueId id = y; id >= 0; --id) {
    const Node& node = b.node(id);
    if (!path[static_cast<size_t>(id)] || grad[static_cast<size_t>(id)] < 0 ||
        node.op == Op::kInput || node.op == Op::kWeight) {
      continue;
    }
    const std::vector<ValueId> inputs = node.inputs;
    const ops::InputGrads input_grads = ops::backward(b, id, grad[static_cast<size_t>(id)]);
    for (size_t i = 0; i < inputs.size(); ++i) {
      const auto in = static_cast<size_t>(inputs[i]);
      if (input_grads[i] < 0 || !path[in]) continue;
      // A value read by several nodes receives the sum of their gradients.
      grad[in] = grad[in] < 0 ? input_grads[i] : b.add(grad[in], input_grads[i]);
    }
  }
  std::vector<ValueId> result;
  for (ValueId id : wrt) {
    if (grad[static_cast<size_t>(id)] < 0) {
      const Node& n = b.node(id);
      throw Error("[autodiff] " + std::string(op_name(n.op)) + " '" + n.name + "' " +
                  shape_str(n.shape) + " does not influence the output");
    }
    result.push_back(grad[static_cast<size_t>(id)]);
  }
  graph = b.finish();
  return result;
}

}  // namespace tfm::graph
