// The backward rule of each op family: given a node and the gradient flowing into its output,
// the gradient flowing into each of its inputs, built as graph nodes. Rules live next to the op's
// meaning (src/ops/<family>.cc); graph/autodiff applies them in reverse order.
#pragma once

#include <vector>

#include "graph/builder.h"

namespace tfm::ops {

// One entry per input of the node: the gradient's value, or -1 where none flows (integer inputs,
// positions, masks, RoPE tables).
using InputGrads = std::vector<graph::ValueId>;

InputGrads backward(graph::Builder& b, graph::ValueId node, graph::ValueId dy);

// What a backward rule reads for a weight operand `w`: a weight gathered from FSDP shards (perhaps
// then cut to its unpadded rows, or cast) is gathered again here, so the forward's whole copy is
// freed after its last forward use and only about one layer's parameters are whole at a time.
graph::ValueId regathered(graph::Builder& b, graph::ValueId w);

InputGrads embedding_backward(graph::Builder& b, const graph::Node& n, graph::ValueId dy);
InputGrads linear_backward(graph::Builder& b, const graph::Node& n, graph::ValueId dy);
InputGrads rms_norm_backward(graph::Builder& b, const graph::Node& n, graph::ValueId dy);
InputGrads rope_backward(graph::Builder& b, const graph::Node& n, graph::ValueId dy);
InputGrads attention_backward(graph::Builder& b, const graph::Node& n, graph::ValueId dy);
InputGrads elementwise_backward(graph::Builder& b, const graph::Node& n, graph::ValueId dy);
InputGrads cross_entropy_backward(graph::Builder& b, const graph::Node& n, graph::ValueId dy);
InputGrads reshape_backward(graph::Builder& b, const graph::Node& n, graph::ValueId dy);
InputGrads cast_backward(graph::Builder& b, const graph::Node& n, graph::ValueId dy);

}  // namespace tfm::ops
