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

// `node` is a copy of the forward node whose inputs may name recomputed values (graph/autodiff);
// it is taken by value because the rules add nodes, which may move the graph's node storage.
InputGrads backward(graph::Builder& b, graph::Node node, graph::ValueId dy);

InputGrads embedding_backward(graph::Builder& b, const graph::Node& n, graph::ValueId dy);
InputGrads linear_backward(graph::Builder& b, const graph::Node& n, graph::ValueId dy);
InputGrads rms_norm_backward(graph::Builder& b, const graph::Node& n, graph::ValueId dy);
InputGrads rope_backward(graph::Builder& b, const graph::Node& n, graph::ValueId dy);
InputGrads attention_backward(graph::Builder& b, const graph::Node& n, graph::ValueId dy);
InputGrads elementwise_backward(graph::Builder& b, const graph::Node& n, graph::ValueId dy);
InputGrads cross_entropy_backward(graph::Builder& b, const graph::Node& n, graph::ValueId dy);
InputGrads reshape_backward(graph::Builder& b, const graph::Node& n, graph::ValueId dy);
InputGrads cast_backward(graph::Builder& b, const graph::Node& n, graph::ValueId dy);
InputGrads moe_backward(graph::Builder& b, const graph::Node& n, graph::ValueId dy);

// Is `v` attention's output (or a reshape of it, the output product's rows)? Under autocast its
// gradient stays bf16, as torch's scaled_dot_product_attention reads it: the output product
// writes it so (linear_backward) and the cast before that product passes it on as it is
// (cast_backward).
bool is_attention_output(const graph::Builder& b, graph::ValueId v);
// Does `v`'s backward rule read a bf16 gradient as it is? Attention's output's does, and RoPE's
// (the rotated q and k, whose gradients attention's backward writes in bf16 under autocast, as
// torch's does): a cast before them passes a bf16 gradient on unwidened.
bool reads_bf16_gradient(const graph::Builder& b, graph::ValueId v);

}  // namespace tfm::ops
