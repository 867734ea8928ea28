#include "backends/cuda/moe_steps.h"

#include <algorithm>

#include "backends/cuda/moe.h"
#include "graph/shapes.h"
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

// A kMoeExperts node's (or its gradient's) sizes; the gradient's dy comes after the weights.
MoeExpertsShape experts_shape(const graph::Graph& graph, const Node& n) {
  const Shape& x = node_of(graph, n.inputs[0]).shape;
  const Shape& routing = node_of(graph, n.inputs[1]).shape;
  const size_t weights = n.inputs.size() - 2 - (n.op == Op::kMoeExpertsGrad ? 1 : 0);
  const auto held = static_cast<int64_t>(weights / 3);
  return {x[0],    x[1], node_of(graph, n.inputs[2]).shape[0],           routing[1],
          n.start, held, x[0] * routed_per_row(graph, n.inputs[1], held)};
}

// The experts' weights' buffers, looked up when the step runs, all of one dtype.
struct ExpertWeightSlots {
  std::vector<size_t> slots;
  DType dtype;

  ExpertWeightSlots(const graph::Graph& graph, const Node& n, int64_t held)
      : dtype(node_of(graph, n.inputs[2]).dtype) {
    for (size_t i = 2; i < 2 + 3 * static_cast<size_t>(held); ++i) {
      if (node_of(graph, n.inputs[i]).dtype != dtype) {
        throw Error("[cuda moe_experts] every expert weight must have one dtype, got " +
                    graph.describe(n.inputs[i]));
      }
      slots.push_back(slot(n.inputs[i]));
    }
  }

  MoeExpertWeights resolve(StepContext& c) const {
    MoeExpertWeights w{{}, {}, {}, dtype};
    for (size_t i = 0; i < slots.size(); i += 3) {
      w.gate.push_back(c.ptrs[slots[i]]);
      w.up.push_back(c.ptrs[slots[i + 1]]);
      w.down.push_back(c.ptrs[slots[i + 2]]);
    }
    return w;
  }
};

// A router loss's (or its gradient's) layers' logits: its inputs after loss_scale and mask, before
// any d loss.
std::vector<size_t> router_logit_slots(const Node& n) {
  std::vector<size_t> slots;
  const size_t end = n.inputs.size() - (n.op == Op::kRouterLossGrad ? 1 : 0);
  for (size_t i = 2; i < end; ++i) slots.push_back(slot(n.inputs[i]));
  return slots;
}

RouterLossShape router_loss_shape(const graph::Graph& graph, const Node& n) {
  const Shape& logits = node_of(graph, n.inputs[2]).shape;
  if (router_logit_slots(n).size() > static_cast<size_t>(kMaxRouterLayers)) {
    throw Error("[cuda router_loss] " + std::to_string(router_logit_slots(n).size()) +
                " mixture-of-experts layers; its kernels take at most " +
                std::to_string(kMaxRouterLayers) + ": train this model with device_map=\"cpu\"");
  }
  return {logits[0], logits[1], n.top_k, n.scale};
}

// An exchange op's routing input: its first, or its second after x or y.
ValueId exchange_routing(const Node& n) {
  return n.op == Op::kMoeSlots ? n.inputs[0] : n.inputs[1];
}

bool is_exchange(Op op) {
  return op == Op::kMoeDispatch || op == Op::kMoeSlots || op == Op::kMoeCombine ||
         op == Op::kMoeDispatchGrad || op == Op::kMoeCombineGrad;
}

ExchangeShape exchange_shape(const graph::Graph& graph, const Node& n) {
  const Shape& routing = node_of(graph, exchange_routing(n)).shape;
  const int64_t hidden = n.op == Op::kMoeSlots ? 0 : node_of(graph, n.inputs[0]).shape[1];
  return {routing[0], routing[1], n.expert_ranks,
          graph::moe_slots_per_rank(routing, n.top_k, n.expert_ranks), hidden};
}

ExchangeOp exchange_op(Op op) {
  switch (op) {
    case Op::kMoeDispatch:
      return ExchangeOp::kDispatch;
    case Op::kMoeSlots:
      return ExchangeOp::kSlots;
    case Op::kMoeCombine:
      return ExchangeOp::kCombine;
    case Op::kMoeDispatchGrad:
      return ExchangeOp::kDispatchGrad;
    default:
      return ExchangeOp::kCombineGrad;
  }
}

}  // namespace

size_t moe_scratch_bytes(const graph::Graph& graph, ValueId id) {
  const Node& n = node_of(graph, id);
  switch (n.op) {
    case Op::kMoeExperts:
    case Op::kMoeExpertsGrad:
      return moe_experts_scratch_bytes(experts_shape(graph, n), n.op == Op::kMoeExpertsGrad);
    case Op::kRouterLoss:
    case Op::kRouterLossGrad:
      return router_loss_scratch_bytes(router_loss_shape(graph, n), router_logit_slots(n).size());
    default:
      return is_exchange(n.op) ? exchange_scratch_bytes(exchange_shape(graph, n)) : 0;
  }
}

std::optional<Step> make_moe_step(const graph::Graph& graph, ValueId id) {
  const Node& n = node_of(graph, id);
  const size_t out = slot(id);
  switch (n.op) {
    case Op::kMoeRoute:
    case Op::kMoeRouteGrad: {
      const Shape& logits = node_of(graph, n.inputs[0]).shape;
      const int64_t rows = logits[0], experts = logits[1], top_k = n.top_k;
      const bool normed = n.normed;
      const size_t in = slot(n.inputs[0]);
      if (n.op == Op::kMoeRoute) {
        return [=](StepContext& c) {
          moe_route(f32_at(c, in), rows, experts, top_k, normed, f32_at(c, out), c.stream);
        };
      }
      const size_t d_routing = slot(n.inputs[1]);
      return [=](StepContext& c) {
        moe_route_grad(f32_at(c, in), f32_at(c, d_routing), rows, experts, top_k, normed,
                       f32_at(c, out), c.stream);
      };
    }
    case Op::kMoeExperts:
    case Op::kMoeExpertsGrad: {
      const MoeExpertsShape shape = experts_shape(graph, n);
      const ExpertWeightSlots weights(graph, n, shape.held);
      const size_t x = slot(n.inputs[0]), routing = slot(n.inputs[1]);
      if (n.op == Op::kMoeExperts) {
        return [=](StepContext& c) {
          moe_experts(f32_at(c, x), f32_at(c, routing), weights.resolve(c), shape, c.scratch,
                      f32_at(c, out), c.stream);
        };
      }
      const size_t dy = slot(n.inputs.back());
      return [=](StepContext& c) {
        moe_experts_grad(f32_at(c, x), f32_at(c, routing), weights.resolve(c), f32_at(c, dy), shape,
                         c.scratch, f32_at(c, out), c.stream);
      };
    }
    case Op::kRouterLoss:
    case Op::kRouterLossGrad: {
      const RouterLossShape shape = router_loss_shape(graph, n);
      const std::vector<size_t> layers = router_logit_slots(n);
      const size_t loss_scale = slot(n.inputs[0]), mask = slot(n.inputs[1]);
      const bool grad = n.op == Op::kRouterLossGrad;
      const size_t d_loss = slot(n.inputs.back());
      return [=](StepContext& c) {
        std::vector<const float*> logits;
        for (size_t l : layers) logits.push_back(f32_at(c, l));
        if (grad) {
          router_loss_grad(logits, i32_at(c, mask), f32_at(c, loss_scale), f32_at(c, d_loss), shape,
                           c.scratch, f32_at(c, out), c.stream);
        } else {
          router_loss(logits, i32_at(c, mask), f32_at(c, loss_scale), shape, c.scratch,
                      f32_at(c, out), c.stream);
        }
      };
    }
    default:
      break;
  }
  if (!is_exchange(n.op)) return std::nullopt;
  const ExchangeShape shape = exchange_shape(graph, n);
  const ExchangeOp op = exchange_op(n.op);
  const size_t routing = slot(exchange_routing(n)), first = slot(n.inputs[0]),
               dy = slot(n.inputs.back());
  const bool grad = op == ExchangeOp::kDispatchGrad || op == ExchangeOp::kCombineGrad;
  return [=](StepContext& c) {
    moe_exchange(op, f32_at(c, first), f32_at(c, routing), grad ? f32_at(c, dy) : nullptr, shape,
                 c.scratch, f32_at(c, out), c.stream);
  };
}

}  // namespace tfm::cuda
