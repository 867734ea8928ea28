#include "ops/autodiff.h"

#include <algorithm>
#include <functional>
#include <map>

#include "graph/builder.h"
#include "graph/op_args.h"
#include "ops/backward.h"
#include "tfm/error.h"

namespace tfm::ops {

using namespace graph;  // the IR this pass extends
namespace {

// Nodes that lie on a path from some `wrt` value to a seeded value: only their gradients are
// needed.
std::vector<bool> on_path(const Graph& graph, const std::vector<Seed>& seeds,
                          const std::vector<ValueId>& wrt) {
  const size_t n = graph.nodes.size();
  std::vector<bool> from_wrt(n, false), to_y(n, false);
  for (ValueId id : wrt) from_wrt[static_cast<size_t>(id)] = true;
  for (size_t i = 0; i < n; ++i) {
    for (ValueId in : graph.nodes[i].inputs)
      from_wrt[i] = from_wrt[i] || from_wrt[static_cast<size_t>(in)];
  }
  for (const Seed& s : seeds) to_y[static_cast<size_t>(s.value)] = true;
  for (size_t i = n; i-- > 0;) {
    if (!to_y[i]) continue;
    for (ValueId in : graph.nodes[i].inputs) to_y[static_cast<size_t>(in)] = true;
  }
  std::vector<bool> path(n);
  for (size_t i = 0; i < n; ++i) path[i] = from_wrt[i] && to_y[i];
  return path;
}

// The backward pass from `seeds` as `b` has it, each rule reading the forward values through
// `reads`.
std::vector<ValueId> gradients(Builder& b, const std::vector<Seed>& seeds,
                               const std::vector<ValueId>& wrt,
                               const std::function<ValueId(Builder&, ValueId)>& reads) {
  ValueId last = -1;
  for (const Seed& s : seeds) {
    if (b.shape(s.grad) != b.shape(s.value)) {
      throw Error("[autodiff] the seed gradient " + shape_str(b.shape(s.grad)) + " must match " +
                  shape_str(b.shape(s.value)));
    }
    last = std::max(last, s.value);
  }
  const std::vector<bool> path = on_path(b.graph(), seeds, wrt);
  std::vector<ValueId> grad(static_cast<size_t>(last) + 1, -1);
  for (const Seed& s : seeds) {
    ValueId& g = grad[static_cast<size_t>(s.value)];
    g = g < 0 ? s.grad : b.add(g, s.grad);
  }
  // Creation order is topological, so walking it backwards visits every consumer of a value
  // before the value itself: its gradient is complete when its turn comes.
  for (ValueId id = last; id >= 0; --id) {
    graph::Node node = b.node(id);
    if (!path[static_cast<size_t>(id)] || grad[static_cast<size_t>(id)] < 0 ||
        node.op == Op::kInput || node.op == Op::kWeight) {
      continue;
    }
    const std::vector<ValueId> inputs = node.inputs;
    for (ValueId& in : node.inputs) in = reads(b, in);
    const InputGrads input_grads = backward(b, node, grad[static_cast<size_t>(id)]);
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
  return result;
}

// Which forward values the backward rules read when nothing is recomputed, and which of those a
// step other than an elementwise chain reads (a product, attention, a norm's gradient): one that
// fuse_elementwise cannot run inside itself.
struct BackwardReads {
  std::vector<bool> read, unfused;
};

BackwardReads read_by_backward(const Graph& graph, const std::vector<Seed>& seeds,
                               const std::vector<ValueId>& wrt) {
  const size_t forward_size = graph.nodes.size();
  Builder b(graph);
  gradients(b, seeds, wrt, [](Builder&, ValueId v) { return v; });
  BackwardReads reads{std::vector<bool>(forward_size, false),
                      std::vector<bool>(forward_size, false)};
  const Graph& all = b.graph();
  for (size_t i = forward_size; i < all.nodes.size(); ++i) {
    for (ValueId in : all.nodes[i].inputs) {
      const auto u = static_cast<size_t>(in);
      if (u >= forward_size) continue;
      reads.read[u] = true;
      reads.unfused[u] = reads.unfused[u] || all.nodes[i].op != Op::kElementwise;
    }
  }
  // What a view or reshape of a value is read by, the value is read by: made again, the view
  // would need it written out.
  for (size_t i = forward_size; i-- > 0;) {
    const Node& n = graph.nodes[i];
    if ((n.op == Op::kReshape || n.op == Op::kView) && reads.unfused[i]) {
      reads.unfused[static_cast<size_t>(operand(n))] = true;
    }
  }
  return reads;
}

// Is `v` an FSDP gather, or a view of one?
bool gathered(const Graph& graph, ValueId v) {
  const Node* n = &graph.nodes[static_cast<size_t>(v)];
  while (n->op == Op::kReshape || n->op == Op::kView) {
    n = &graph.nodes[static_cast<size_t>(operand(*n))];
  }
  return n->op == Op::kGatherShards;
}

// Is running `n` again in the backward pass worth the memory it saves? Views and FSDP's gathers
// (whose whole weights then exist only around their uses, about one layer at a time) always are,
// and so are the casts of gathered weights. An elementwise value is when only elementwise chains
// of the backward pass read it: they run it inside themselves (fuse_elementwise), so it costs no
// pass over memory. Norms, RoPE and the other casts are kept: a step that computed them again
// would read their inputs and write them out anew, which costs more than the memory they hold
// (half or less of what their f32 inputs hold under autocast).
bool worth_recomputing(const Graph& graph, const Node& n, size_t id, const BackwardReads& reads) {
  switch (n.op) {
    case Op::kReshape:
    case Op::kView:
    case Op::kGatherShards:
      return true;
    case Op::kCast:
      return gathered(graph, operand(n));
    case Op::kElementwise:
      return !reads.unfused[id];
    default:
      return false;
  }
}

// Which forward values the backward pass computes again: those worth it whose inputs are there
// anyway (inputs, weights, values the backward pass keeps, or values computed again themselves).
// Recomputing such a value keeps nothing alive that was not already.
std::vector<bool> recomputed_values(const Graph& graph, const BackwardReads& reads) {
  std::vector<bool> again(graph.nodes.size(), false);
  for (size_t i = 0; i < graph.nodes.size(); ++i) {
    const Node& n = graph.nodes[i];
    if (!worth_recomputing(graph, n, i, reads)) continue;
    bool available = true;
    for (ValueId in : n.inputs) {
      const auto u = static_cast<size_t>(in);
      const Op op = graph.nodes[u].op;
      available = available && (op == Op::kInput || op == Op::kWeight || reads.read[u] || again[u]);
    }
    again[i] = available;
  }
  return again;
}

}  // namespace

std::vector<ValueId> append_backward(Graph& graph, ValueId y, ValueId dy,
                                     const std::vector<ValueId>& wrt) {
  return append_backward(graph, {{y, dy}}, wrt);
}

std::vector<ValueId> append_backward(Graph& graph, const std::vector<Seed>& seeds,
                                     const std::vector<ValueId>& wrt) {
  const std::vector<bool> again = recomputed_values(graph, read_by_backward(graph, seeds, wrt));
  std::map<ValueId, ValueId> copies;  // forward value -> its recomputation
  std::function<ValueId(Builder&, ValueId)> reads = [&](Builder& b, ValueId v) {
    if (static_cast<size_t>(v) >= again.size() || !again[static_cast<size_t>(v)]) return v;
    if (const auto it = copies.find(v); it != copies.end()) return it->second;
    const Node like = b.node(v);
    std::vector<ValueId> inputs;
    for (ValueId in : like.inputs) inputs.push_back(reads(b, in));
    return copies[v] = b.recompute(like, std::move(inputs));
  };
  Builder b(std::move(graph));
  std::vector<ValueId> result = gradients(b, seeds, wrt, reads);
  graph = b.finish();
  return result;
}

}  // namespace tfm::ops
