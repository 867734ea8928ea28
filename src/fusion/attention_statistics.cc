// save_attention_statistics (plan.h): an attention gradient reads its forward attention.
#include <cstddef>
#include <vector>

#include "fusion/passes.h"
#include "fusion/plan.h"
#include "fusion/rewrite.h"
#include "graph/op_args.h"

namespace tfm::fusion {

using namespace graph;  // the IR this layer rewrites
namespace {

// Are a and b the same value: one node, or reshapes (or views) of the same value alike? The
// backward pass reads a forward reshape through its own copy of it (graph/autodiff recomputes
// views rather than keep them).
bool same_value(const Graph& graph, ValueId a, ValueId b) {
  if (a == b) return true;
  const Node& x = graph.nodes[static_cast<size_t>(a)];
  const Node& y = graph.nodes[static_cast<size_t>(b)];
  const bool alias = x.op == Op::kReshape || x.op == Op::kView;
  if (!alias || x.op != y.op || x.shape != y.shape || x.dtype != y.dtype || x.start != y.start ||
      x.inputs.size() != y.inputs.size()) {
    return false;
  }
  for (size_t i = 0; i < x.inputs.size(); ++i) {
    if (!same_value(graph, x.inputs[i], y.inputs[i])) return false;
  }
  return true;
}

// The forward attention created before the gradient at `g` over the same operands, or -1.
ValueId forward_of(const Graph& graph, size_t g) {
  const Node& grad = graph.nodes[g];
  for (size_t f = g; f-- > 0;) {
    const Node& attention = graph.nodes[f];
    if (attention.op != Op::kAttention || attention.scale != grad.scale ||
        attention.window != grad.window) {
      continue;
    }
    const AttentionArgs a = attention_args(attention);
    const AttentionGradArgs g = attention_grad_args(grad);
    const bool same = same_value(graph, a.q, g.q) && same_value(graph, a.k, g.k) &&
                      same_value(graph, a.v, g.v) && same_value(graph, a.mask, g.mask) &&
                      same_value(graph, a.slots, g.slots);
    if (same) return static_cast<ValueId>(f);
  }
  return -1;
}

}  // namespace

void save_attention_statistics(Graph& graph, const Target&) {
  for (size_t g = 0; g < graph.nodes.size(); ++g) {
    if (graph.nodes[g].op != Op::kAttentionGrad || attention_grad_args(graph.nodes[g]).forward >= 0)
      continue;
    const ValueId f = forward_of(graph, g);
    // The gradient reads the output where it runs: nothing may write over it in between.
    if (f < 0 || written_between(graph, static_cast<size_t>(f), g, {f})) continue;
    graph.nodes[static_cast<size_t>(f)].saves_row_stats = true;
    AttentionGradArgs args = attention_grad_args(graph.nodes[g]);
    args.forward = f;
    set_args(graph.nodes[g], args);
  }
}

}  // namespace tfm::fusion
