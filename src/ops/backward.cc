#include "ops/backward.h"

#include "graph/op_args.h"
#include "tfm/error.h"

namespace tfm::ops {

using graph::Op;

InputGrads backward(graph::Builder& b, graph::Node n, graph::ValueId dy) {
  switch (n.op) {
    case Op::kEmbedding:
      return embedding_backward(b, n, dy);
    case Op::kLinear:
      return linear_backward(b, n, dy);
    case Op::kRmsNorm:
      return rms_norm_backward(b, n, dy);
    case Op::kRope:
      return rope_backward(b, n, dy);
    case Op::kAttention:
      return attention_backward(b, n, dy);
    case Op::kElementwise:
      return elementwise_backward(b, n, dy);
    case Op::kCrossEntropy:
      return cross_entropy_backward(b, n, dy);
    case Op::kReshape:
      return reshape_backward(b, n, dy);
    case Op::kCast:
      return cast_backward(b, n, dy);
    case Op::kMoeRoute:
    case Op::kMoeExperts:
    case Op::kRouterLoss:
    case Op::kMoeDispatch:
    case Op::kMoeSlots:
    case Op::kMoeCombine:
      return moe_backward(b, n, dy);
    // Rows sent to rank r came back from it: the gradient goes the way back.
    case Op::kAllToAll:
      return {b.all_to_all(dy, n.group)};
    case Op::kView:
      return {b.pad(dy, n.start, b.shape(graph::view_args(n).x))};
    // Megatron-LM's pair: what follows an all_reduce runs on every rank alike, so its gradient
    // passes through; a value copied into a split layer gets the sum of every rank's gradient.
    case Op::kAllReduce:
      return {dy};
    case Op::kCopyToGroup:
      return {b.all_reduce(dy, n.group)};
    // A gathered parameter's gradient is every rank's, summed, and cut back to this rank's rows.
    case Op::kGatherShards:
      return {b.reduce_scatter(dy, n.group)};
    default:
      break;
  }
  throw Error(std::string("[autodiff] no backward rule for ") + graph::op_name(n.op) +
              (n.name.empty() ? "" : " '" + n.name + "'"));
}

InputGrads reshape_backward(graph::Builder& b, const graph::Node& n, graph::ValueId dy) {
  return {b.reshape(dy, b.shape(graph::operand(n)))};
}

// A cast passes its gradient straight through (as torch's autocast does), in the input's dtype,
// but for the values whose backward reads a bf16 gradient as it is.
InputGrads cast_backward(graph::Builder& b, const graph::Node& n, graph::ValueId dy) {
  const graph::ValueId x = graph::operand(n);
  const DType in = b.node(x).dtype, grad = b.node(dy).dtype;
  const bool kept = grad == in || (grad == DType::bf16 && reads_bf16_gradient(b, x));
  return {kept ? dy : b.cast(dy, in)};
}

bool is_attention_output(const graph::Builder& b, graph::ValueId v) {
  if (b.node(v).op == graph::Op::kReshape) v = graph::operand(b.node(v));
  return b.node(v).op == graph::Op::kAttention;
}

bool reads_bf16_gradient(const graph::Builder& b, graph::ValueId v) {
  return is_attention_output(b, v) || b.node(v).op == graph::Op::kRope;
}

}  // namespace tfm::ops
