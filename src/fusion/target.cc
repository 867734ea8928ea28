#include "fusion/target.h"

#include "graph/op_args.h"

namespace tfm::fusion {

bool default_writes_bf16(const graph::Graph& graph, const graph::Node& n) {
  using graph::Op;
  if (n.op == Op::kAttention) {
    return graph.nodes[static_cast<size_t>(graph::attention_args(n).q)].dtype == DType::bf16;
  }
  return n.op == Op::kRmsNorm || n.op == Op::kElementwise || n.op == Op::kRope ||
         n.op == Op::kRopeGrad || n.op == Op::kCrossEntropyGrad || n.op == Op::kRmsNormGradInput;
}

}  // namespace tfm::fusion
