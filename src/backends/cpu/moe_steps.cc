#include "backends/cpu/moe_steps.h"

#include "backends/cpu/kernels.h"
#include "backends/cpu/moe_kernels.h"
#include "graph/shapes.h"
#include "ops/moe.h"
#include "tfm/error.h"

namespace tfm::cpu {
namespace {

using graph::Node;
using graph::Op;
using graph::ValueId;

float* at(std::vector<void*>& ptrs, ValueId v) {
  return static_cast<float*>(ptrs[static_cast<size_t>(v)]);
}

// A kMoeExperts node's (or its gradient's) shape and weights, looked up when the step runs.
struct ExpertsOperands {
  MoeShape shape;
  std::vector<ValueId> weights;
  DType dtype;

  std::vector<ExpertWeights> resolve(std::vector<void*>& ptrs) const {
    std::vector<ExpertWeights> w;
    for (size_t i = 0; i < weights.size(); i += 3) {
      w.push_back({ptrs[static_cast<size_t>(weights[i])], ptrs[static_cast<size_t>(weights[i + 1])],
                   ptrs[static_cast<size_t>(weights[i + 2])], dtype});
    }
    return w;
  }
};

ExpertsOperands experts_operands(const graph::Graph& graph, const Node& n) {
  const auto shape = [&](ValueId v) -> const Shape& {
    return graph.nodes[static_cast<size_t>(v)].shape;
  };
  const Shape& x = shape(n.inputs[0]);
  const Shape& routing = shape(n.inputs[1]);
  // The weights follow x and routing; a gradient's dy comes last.
  const auto weights =
      static_cast<int64_t>(n.inputs.size()) - 2 - (n.op == graph::Op::kMoeExpertsGrad ? 1 : 0);
  ExpertsOperands o{{x[0], x[1], routing[1], shape(n.inputs[2])[0], n.start, weights / 3},
                    std::vector<ValueId>(n.inputs.begin() + 2, n.inputs.begin() + 2 + weights),
                    graph.nodes[static_cast<size_t>(n.inputs[2])].dtype};
  for (ValueId w : o.weights) {
    if (graph.nodes[static_cast<size_t>(w)].dtype != o.dtype) {
      throw Error("[moe_experts] every expert weight must have one dtype, got " +
                  graph.describe(w));
    }
  }
  return o;
}

// The router loss' layers' logits (its inputs after loss_scale and mask, before any d loss).
std::vector<ValueId> router_logits(const Node& n, bool grad) {
  return {n.inputs.begin() + 2, n.inputs.end() - (grad ? 1 : 0)};
}

// The steps of an exchange of rows between expert-parallel ranks: the routing input decides
// every slot (ops::exchange_slots) when the step runs.
std::function<void()> exchange_step(const graph::Graph& graph, ValueId id,
                                    std::vector<void*>& ptrs) {
  const Node& n = graph.nodes[static_cast<size_t>(id)];
  const auto shape = [&](ValueId v) -> const Shape& {
    return graph.nodes[static_cast<size_t>(v)].shape;
  };
  const Op op = n.op;
  const ValueId routing = op == Op::kMoeSlots ? n.inputs[0] : n.inputs[1];
  const int64_t rows = shape(routing)[0], experts = shape(routing)[1];
  const int64_t ranks = n.expert_ranks;
  const int64_t per_rank = graph::moe_slots_per_rank(shape(routing), n.top_k, ranks);
  const int64_t slot_count = ranks * per_rank;
  // Hidden size: of x (dispatch) or of the slots' rows (combine).
  const int64_t hidden = op == Op::kMoeSlots ? 0 : shape(n.inputs[0])[1];
  const ValueId first = n.inputs[0], dy = n.inputs.back();
  return [=, &ptrs] {
    const float* r = at(ptrs, routing);
    const std::vector<int64_t> slots = ops::exchange_slots(r, rows, experts, ranks, per_rank);
    const Exchange e{slots, rows, experts, experts / ranks};
    float* out = at(ptrs, id);
    switch (op) {
      case Op::kMoeDispatch:
        return moe_dispatch(at(ptrs, first), e, hidden, slot_count, out);
      case Op::kMoeSlots:
        return moe_slots(e, slot_count, out);
      case Op::kMoeCombine:
        return moe_combine(at(ptrs, first), r, e, hidden, out);
      case Op::kMoeDispatchGrad:
        return moe_dispatch_grad(at(ptrs, dy), e, hidden, out);
      default:
        return moe_combine_grad(at(ptrs, first), r, at(ptrs, dy), e, hidden, slot_count, out);
    }
  };
}

}  // namespace

std::function<void()> make_moe_step(const graph::Graph& graph, ValueId id,
                                    std::vector<void*>& ptrs) {
  const Node& n = graph.nodes[static_cast<size_t>(id)];
  const int64_t top_k = n.top_k;
  const bool normed = n.normed;
  const float coef = n.scale;
  switch (n.op) {
    case Op::kMoeRoute:
    case Op::kMoeRouteGrad: {
      const Shape& logits = graph.nodes[static_cast<size_t>(n.inputs[0])].shape;
      const int64_t rows = logits[0], experts = logits[1];
      const ValueId in = n.inputs[0], d_routing = n.op == Op::kMoeRouteGrad ? n.inputs[1] : -1;
      return [=, &ptrs] {
        const float* l = at(ptrs, in);
        float* out = at(ptrs, id);
#pragma omp parallel for schedule(static) if (rows * experts > kParallelMinElements)
        for (int64_t r = 0; r < rows; ++r) {
          if (d_routing < 0) {
            ops::route_row(l + r * experts, experts, top_k, normed, out + r * experts);
          } else {
            ops::route_row_grad(l + r * experts, at(ptrs, d_routing) + r * experts, experts, top_k,
                                normed, out + r * experts);
          }
        }
      };
    }
    case Op::kMoeExperts:
    case Op::kMoeExpertsGrad: {
      const ExpertsOperands o = experts_operands(graph, n);
      const ValueId x = n.inputs[0], routing = n.inputs[1];
      const ValueId dy = n.op == Op::kMoeExpertsGrad ? n.inputs.back() : -1;
      return [=, &ptrs] {
        if (dy < 0) {
          moe_experts(at(ptrs, x), at(ptrs, routing), o.resolve(ptrs), o.shape, at(ptrs, id));
        } else {
          moe_experts_grad(at(ptrs, x), at(ptrs, routing), o.resolve(ptrs), at(ptrs, dy), o.shape,
                           at(ptrs, id));
        }
      };
    }
    case Op::kRouterLoss:
    case Op::kRouterLossGrad: {
      const bool grad = n.op == Op::kRouterLossGrad;
      const std::vector<ValueId> layers = router_logits(n, grad);
      const Shape& shape = graph.nodes[static_cast<size_t>(layers[0])].shape;
      const int64_t rows = shape[0], experts = shape[1];
      const ValueId loss_scale = n.inputs[0], mask = n.inputs[1];
      const ValueId d_loss = grad ? n.inputs.back() : -1;
      return [=, &ptrs] {
        std::vector<const float*> logits;
        for (ValueId l : layers) logits.push_back(at(ptrs, l));
        const auto* keep = static_cast<const int32_t*>(ptrs[static_cast<size_t>(mask)]);
        // The loss joins a sum over targets: divided by the scale that sum's gradient carries.
        const double factor = coef / static_cast<double>(*at(ptrs, loss_scale));
        if (!grad) {
          *at(ptrs, id) =
              static_cast<float>(factor * ops::router_loss(logits, keep, rows, experts, top_k));
          return;
        }
        std::vector<float*> d_logits;
        for (size_t l = 0; l < layers.size(); ++l)
          d_logits.push_back(at(ptrs, id) + l * rows * experts);
        ops::router_loss_grad(logits, keep, rows, experts, top_k, factor * *at(ptrs, d_loss),
                              d_logits);
      };
    }
    case Op::kMoeDispatch:
    case Op::kMoeSlots:
    case Op::kMoeCombine:
    case Op::kMoeDispatchGrad:
    case Op::kMoeCombineGrad:
      return exchange_step(graph, id, ptrs);
    default:
      break;
  }
  throw Error(std::string("[cpu] not a mixture-of-experts op: ") + graph::op_name(n.op));
}

}  // namespace tfm::cpu
