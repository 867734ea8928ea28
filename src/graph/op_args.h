// Each op's inputs by name: the one place that knows their order. Backends, passes and the planner
// read a node's inputs through these views (`linear_args(node).bias`), and the builder and the
// passes make a node's input list from them (`set_args`), so changing an op's inputs is one edit
// here. A view's optional inputs are -1 where the node has none; reading a node of another op
// throws.
#pragma once

#include <array>
#include <vector>

#include "graph/graph.h"

namespace tfm::graph {

struct EmbeddingArgs {
  ValueId table, ids;
};
struct LinearArgs {
  ValueId x, w;
  ValueId bias = -1;
  ValueId residual = -1;  // added to the product as it is written (Node::residual)
};
// The fused products (kernel backends' fusion): `norm` is the input norm's weight (Node::normed).
struct GatedLinearArgs {
  ValueId x, w_gate, w_up;
  ValueId bias_gate = -1, bias_up = -1;
  ValueId norm = -1;
};
struct QkvLinearArgs {
  ValueId x;
  std::array<ValueId, 3> w;
  std::array<ValueId, 3> bias = {-1, -1, -1};
  ValueId norm = -1;
};
struct RmsNormArgs {
  ValueId x, w;
};
struct RopeArgs {
  ValueId x, positions, inv_freq;
  ValueId norm = -1;  // each head RMS-normed first (Node::normed)
};
struct PrepareAttentionArgs {
  ValueId q, k, v, positions, inv_freq, slots, k_cache, v_cache;
  ValueId q_norm = -1, k_norm = -1;
};
struct CacheWriteArgs {
  ValueId cache, update, slots;
};
struct AccumulateArgs {
  ValueId acc, x;
};
struct AttentionArgs {
  ValueId q, k, v, mask, slots;
};
struct ViewArgs {
  ValueId x;
  std::vector<ValueId> after = {};  // values the view is read only after (Op::kView)
};
struct CrossEntropyArgs {
  ValueId logits, targets;
  ValueId d_loss = -1;  // in place: the gradient is written over the logits too
};
struct EmbeddingGradArgs {
  ValueId acc = -1;  // in place: the sum the rows add into
  ValueId dy, ids;
};
struct LinearGradInputArgs {
  ValueId sum = -1;  // in place: the sum the product adds into
  ValueId dy, w;
};
struct LinearGradWeightArgs {
  ValueId acc = -1;  // in place: the accumulator the product adds into
  ValueId dy, x;
};
struct RmsNormGradInputArgs {
  ValueId x, w, dy;
  ValueId residual = -1;                  // Node::residual
  ValueId positions = -1, inv_freq = -1;  // Node::rotated: dy enters RoPE's gradient
  ValueId weight_grad = -1;               // Node::adds_weight_grad: w's gradient added into it
};
struct RmsNormGradWeightArgs {
  ValueId acc = -1;  // in place: the accumulator the sums add into
  ValueId x, dy;
};
struct RopeGradArgs {
  ValueId dy, positions, inv_freq;
};
struct AttentionGradArgs {
  ValueId q, k, v, mask, slots, dy;
  ValueId forward = -1;  // the forward attention whose row statistics it reads
};
struct CrossEntropyGradArgs {
  ValueId logits, targets, d_loss;
};
struct AdamWArgs {
  ValueId param, grad, exp_avg, exp_avg_sq, scalars;
};

EmbeddingArgs embedding_args(const Node& n);  // kEmbedding
LinearArgs linear_args(const Node& n);
GatedLinearArgs gated_linear_args(const Node& n);
QkvLinearArgs qkv_linear_args(const Node& n);
RmsNormArgs rms_norm_args(const Node& n);
RopeArgs rope_args(const Node& n);
PrepareAttentionArgs prepare_attention_args(const Node& n);
CacheWriteArgs cache_write_args(const Node& n);
AccumulateArgs accumulate_args(const Node& n);
AttentionArgs attention_args(const Node& n);
ViewArgs view_args(const Node& n);
CrossEntropyArgs cross_entropy_args(const Node& n);
EmbeddingGradArgs embedding_grad_args(const Node& n);
LinearGradInputArgs linear_grad_input_args(const Node& n);
LinearGradWeightArgs linear_grad_weight_args(const Node& n);
RmsNormGradInputArgs rms_norm_grad_input_args(const Node& n);
RmsNormGradWeightArgs rms_norm_grad_weight_args(const Node& n);
RopeGradArgs rope_grad_args(const Node& n);
AttentionGradArgs attention_grad_args(const Node& n);
CrossEntropyGradArgs cross_entropy_grad_args(const Node& n);
AdamWArgs adamw_args(const Node& n);
// The one input of an op that takes one (reshape, slice_seq, cast, pad, reduce_rows, argmax,
// sum_squares, the collectives).
ValueId operand(const Node& n);

// Sets the node's inputs, and the flags that say which optional ones it has, from a view.
void set_args(Node& n, const LinearArgs& a);
void set_args(Node& n, const GatedLinearArgs& a);
void set_args(Node& n, const QkvLinearArgs& a);
void set_args(Node& n, const RopeArgs& a);
void set_args(Node& n, const PrepareAttentionArgs& a);
void set_args(Node& n, const ViewArgs& a);
void set_args(Node& n, const CrossEntropyArgs& a);
void set_args(Node& n, const EmbeddingGradArgs& a);
void set_args(Node& n, const LinearGradInputArgs& a);
void set_args(Node& n, const LinearGradWeightArgs& a);
void set_args(Node& n, const RmsNormGradInputArgs& a);
void set_args(Node& n, const RmsNormGradWeightArgs& a);
void set_args(Node& n, const AttentionGradArgs& a);

// The operands of the forward attention an attention gradient is the gradient of.
AttentionArgs attention_operands(const AttentionGradArgs& a);

// A product node's weights (kLinear, kGatedLinear, kQkvLinear), in input order.
std::vector<ValueId> product_weights(const Node& n);

}  // namespace tfm::graph
