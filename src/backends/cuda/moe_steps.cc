#include "backends/cuda/moe_steps.h"

#include <algorithm>

#include "backends/cuda/moe.h"
#include "tfm/error.h"

namespace tfm::cuda {
namespace {

using graph::Node;
using graph::Op;
using graph::ValueId;

// The most experts a row of `routing` chooses, known from the op that made it: a router's top_k,
// one for an exchange's slots (graph::Op::kMoeSlots); else every expert held.
int64_t routed_per_row(const graph::Graph& graph, ValueId routing, int64_t held) {
  for (;;) {
    const Node& n = node_of(graph, routing);
    if (n.op == Op::kMoeRoute) return std::min(n.top_k, held);
    if (n.op == Op::kMoeSlots) return 1;
    if (n.op != Op::kAllToAll && n.op != Op::kReshape) return held;
    routing = n.inputs[0];
  }
}

MoeExpertsShape experts_shape(const graph::Graph& graph, const Node& n) {
  const Shape& x = node_of(graph, n.inputs[0]).shape;
  const Shape& routing = node_of(graph, n.inputs[1]).shape;
  const auto held = static_cast<int64_t>(n.inputs.size() - 2) / 3;
  return {x[0],       x[1],   node_of(graph, n.inputs[2]).shape[0],
          routing[1], n.start, held,
          x[0] * routed_per_row(graph, n.inputs[1], held)};
}

}  // namespace

size_t moe_scratch_bytes(const graph::Graph& graph, ValueId id) {
  const Node& n = node_of(graph, id);
  return n.op == Op::kMoeExperts ? moe_experts_scratch_bytes(experts_shape(graph, n)) : 0;
}

std::optional<Step> make_moe_step(const graph::Graph& graph, ValueId id) {
  const Node& n = node_of(graph, id);
  const size_t out = slot(id);
  switch (n.op) {
    case Op::kMoeRoute: {
      const Shape& logits = node_of(graph, n.inputs[0]).shape;
      const int64_t rows = logits[0], experts = logits[1], top_k = n.top_k;
      const bool normed = n.normed;
      const size_t in = slot(n.inputs[0]);
      return [=](StepContext& c) {
        moe_route(f32_at(c, in), rows, experts, top_k, normed, f32_at(c, out), c.stream);
      };
    }
    case Op::kMoeExperts: {
      const MoeExpertsShape shape = experts_shape(graph, n);
      const DType dtype = node_of(graph, n.inputs[2]).dtype;
      std::vector<size_t> weights;
      for (size_t i = 2; i < n.inputs.size(); ++i) {
        if (node_of(graph, n.inputs[i]).dtype != dtype) {
          throw Error("[cuda moe_experts] every expert weight must have one dtype, got " +
                      graph.describe(n.inputs[i]));
        }
        weights.push_back(slot(n.inputs[i]));
      }
      const size_t x = slot(n.inputs[0]), routing = slot(n.inputs[1]);
      return [=](StepContext& c) {
        MoeExpertWeights w{{}, {}, {}, dtype};
        for (size_t i = 0; i < weights.size(); i += 3) {
          w.gate.push_back(c.ptrs[weights[i]]);
          w.up.push_back(c.ptrs[weights[i + 1]]);
          w.down.push_back(c.ptrs[weights[i + 2]]);
        }
        moe_experts(f32_at(c, x), f32_at(c, routing), w, shape, c.scratch, f32_at(c, out),
                    c.stream);
      };
    }
    default:
      return std::nullopt;
  }
}

}  // namespace tfm::cuda
