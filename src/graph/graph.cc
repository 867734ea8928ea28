#include "graph/graph.h"

#include <algorithm>

namespace tfm::graph {

const char* op_name(Op op) {
  switch (op) {
    case Op::kInput:
      return "input";
    case Op::kWeight:
      return "weight";
    case Op::kEmbedding:
      return "embedding";
    case Op::kLinear:
      return "linear";
    case Op::kGatedLinear:
      return "gated_linear";
    case Op::kQkvLinear:
      return "qkv_linear";
    case Op::kRmsNorm:
      return "rms_norm";
    case Op::kRope:
      return "rope";
    case Op::kPrepareAttention:
      return "prepare_attention";
    case Op::kCacheWrite:
      return "cache_write";
    case Op::kAccumulate:
      return "accumulate";
    case Op::kAttention:
      return "attention";
    case Op::kSliceSeq:
      return "slice_seq";
    case Op::kReshape:
      return "reshape";
    case Op::kElementwise:
      return "elementwise";
    case Op::kView:
      return "view";
    case Op::kPad:
      return "pad";
    case Op::kConcatRows:
      return "concat_rows";
    case Op::kReduceRows:
      return "reduce_rows";
    case Op::kCrossEntropy:
      return "cross_entropy";
    case Op::kCast:
      return "cast";
    case Op::kArgmax:
      return "argmax";
    case Op::kAllReduce:
      return "all_reduce";
    case Op::kAllGather:
      return "all_gather";
    case Op::kCopyToGroup:
      return "copy_to_group";
    case Op::kGatherShards:
      return "gather_shards";
    case Op::kReduceScatter:
      return "reduce_scatter";
    case Op::kSumOverReplicas:
      return "sum_over_replicas";
    case Op::kAllToAll:
      return "all_to_all";
    case Op::kMoeDispatch:
      return "moe_dispatch";
    case Op::kMoeSlots:
      return "moe_slots";
    case Op::kMoeCombine:
      return "moe_combine";
    case Op::kMoeDispatchGrad:
      return "moe_dispatch_grad";
    case Op::kMoeCombineGrad:
      return "moe_combine_grad";
    case Op::kEmbeddingGrad:
      return "embedding_grad";
    case Op::kLinearGradInput:
      return "linear_grad_input";
    case Op::kLinearGradWeight:
      return "linear_grad_weight";
    case Op::kRmsNormGradInput:
      return "rms_norm_grad_input";
    case Op::kRmsNormGradWeight:
      return "rms_norm_grad_weight";
    case Op::kRopeGrad:
      return "rope_grad";
    case Op::kAttentionGrad:
      return "attention_grad";
    case Op::kCrossEntropyGrad:
      return "cross_entropy_grad";
    case Op::kAdamW:
      return "adamw";
    case Op::kSumSquares:
      return "sum_squares";
    case Op::kMoeRoute:
      return "moe_route";
    case Op::kMoeExperts:
      return "moe_experts";
    case Op::kRouterLoss:
      return "router_loss";
    case Op::kMoeRouteGrad:
      return "moe_route_grad";
    case Op::kMoeExpertsGrad:
      return "moe_experts_grad";
    case Op::kRouterLossGrad:
      return "router_loss_grad";
  }
  return "?";
}

bool is_backward(Op op) {
  switch (op) {
    case Op::kEmbeddingGrad:
    case Op::kLinearGradInput:
    case Op::kLinearGradWeight:
    case Op::kRmsNormGradInput:
    case Op::kRmsNormGradWeight:
    case Op::kRopeGrad:
    case Op::kAttentionGrad:
    case Op::kCrossEntropyGrad:
    case Op::kMoeRouteGrad:
    case Op::kMoeExpertsGrad:
    case Op::kRouterLossGrad:
    case Op::kMoeDispatchGrad:
    case Op::kMoeCombineGrad:
      return true;
    default:
      return false;
  }
}

ValueId Graph::add(Node node) {
  nodes.push_back(std::move(node));
  return static_cast<ValueId>(nodes.size() - 1);
}

std::vector<ValueId> Graph::inputs() const {
  std::vector<ValueId> ids;
  for (size_t i = 0; i < nodes.size(); ++i) {
    if (nodes[i].op == Op::kInput) ids.push_back(static_cast<ValueId>(i));
  }
  return ids;
}

std::string Graph::describe(ValueId id) const {
  const Node& n = nodes[static_cast<size_t>(id)];
  return std::string(op_name(n.op)) + (n.name.empty() ? "" : " '" + n.name + "'") + " " +
         shape_str(n.shape) + " " + std::string(dtype_name(n.dtype));
}

int program_depth(const ElementwiseProgram& program) {
  int depth = 0, deepest = 0;
  for (const EwInstr& instr : program.instrs) {
    if (instr.code == EwCode::kLoad) deepest = std::max(deepest, ++depth);
    if (instr.code == EwCode::kAdd || instr.code == EwCode::kMul || instr.code == EwCode::kSiluGrad)
      --depth;
  }
  return deepest;
}

}  // namespace tfm::graph
