// The training graph's ops as StableHLO: each backward op autodiff emits, the loss and the views
// that split and pad gradients. Only the basic forms: the folded ones (in place, with residuals,
// rotated) are made by a kernel backend's passes, which a compiler backend does not run.
#include "backends/pjrt/emitter.h"
#include "graph/op_args.h"
#include "tfm/error.h"

namespace tfm::pjrt {

using graph::Node;
using graph::ValueId;

Value Emitter::flat(const Value& x) { return w_.reshape(x, {shape_numel(x.shape)}); }

Value Emitter::sum_to_rows(const Value& x) {
  return w_.reduce(x, w_.constant(0, "f32"), "add", leading_dims(rank_of(x) - 1));
}

// d table [V, H]: each token's dy row added into its id's row (a scatter that adds).
Value Emitter::embedding_grad(const Node& n) {
  const graph::EmbeddingGradArgs a = graph::embedding_grad_args(n);
  refuse_vocabulary_shard(n, "embedding gradient");
  const Value dy = f32(a.dy);
  const int64_t hidden = dy.shape.back(), count = shape_numel(dy.shape) / hidden;
  const Value rows = w_.reshape(dy, {count, hidden});
  const Value ids = w_.reshape(value(a.ids), {count, 1});
  const Value zeros = w_.splat(0, n.shape, "f32");
  const std::string scalar = tensor_type({}, "f32");
  const Value result{w_.fresh(), n.shape, "f32"};
  const std::string sum = w_.fresh(), lhs = w_.fresh(), rhs = w_.fresh();
  w_.raw("    " + result.name + " = \"stablehlo.scatter\"(" + zeros.name + ", " + ids.name + ", " +
         rows.name + ") ({\n    ^bb0(" + lhs + ": " + scalar + ", " + rhs + ": " + scalar +
         "):\n      " + sum + " = \"stablehlo.add\"(" + lhs + ", " + rhs + ") : (" + scalar + ", " +
         scalar + ") -> " + scalar + "\n      \"stablehlo.return\"(" + sum + ") : (" + scalar +
         ") -> ()\n    }) {scatter_dimension_numbers = #stablehlo.scatter<update_window_dims = "
         "[1], inserted_window_dims = [0], scatter_dims_to_operand_dims = [0], index_vector_dim = "
         "1>, indices_are_sorted = false, unique_indices = false} : (" +
         tensor_type(zeros) + ", " + tensor_type(ids) + ", " + tensor_type(rows) + ") -> " +
         tensor_type(result) + "\n");
  return as_node_type(result, n);
}

// dx [..., K] = dy [..., N] @ w [N, K].
Value Emitter::linear_grad_input(const Node& n) {
  const graph::LinearGradInputArgs a = graph::linear_grad_input_args(n);
  const Value dy = f32(a.dy);
  return as_node_type(w_.dot_general(dy, f32(a.w), {}, {}, {rank_of(dy) - 1}, {0}), n);
}

// dw [N, K] = dy^T @ x over every row.
Value Emitter::linear_grad_weight(const Node& n) {
  const graph::LinearGradWeightArgs a = graph::linear_grad_weight_args(n);
  const Value dy = f32(a.dy), x = f32(a.x);
  const int64_t out = dy.shape.back(), in = x.shape.back(), rows = shape_numel(dy.shape) / out;
  const Value dy_rows = w_.reshape(dy, {rows, out}), x_rows = w_.reshape(x, {rows, in});
  return as_node_type(w_.dot_general(dy_rows, x_rows, {}, {}, {0}, {0}), n);
}

// With r = 1 / sqrt(mean(x^2) + eps): dx = r * w * dy - x * r^3 * mean(w * dy * x).
Value Emitter::rms_norm_grad_input(const Node& n) {
  const graph::RmsNormGradInputArgs a = graph::rms_norm_grad_input_args(n);
  const Value x = f32(a.x), dy = f32(a.dy);
  const Value inv_rms = inverse_rms(x, n.eps);
  const Value w_dy = w_.binary("multiply", w_.broadcast(f32(a.w), x.shape, {rank_of(x) - 1}), dy);
  const Value dot = row_mean(w_.binary("multiply", w_dy, x));
  const Value cubed = w_.binary("multiply", w_.binary("multiply", inv_rms, inv_rms), inv_rms);
  const Value coef = per_row(w_.binary("multiply", cubed, dot), x.shape);
  const Value dx = w_.binary("subtract", w_.binary("multiply", per_row(inv_rms, x.shape), w_dy),
                             w_.binary("multiply", x, coef));
  return as_node_type(dx, n);
}

// dw = the sum over rows of dy * x * r.
Value Emitter::rms_norm_grad_weight(const Node& n) {
  const graph::RmsNormGradWeightArgs a = graph::rms_norm_grad_weight_args(n);
  const Value x = f32(a.x), dy = f32(a.dy);
  const Value normed = w_.binary("multiply", x, per_row(inverse_rms(x, n.eps), x.shape));
  return as_node_type(sum_to_rows(w_.binary("multiply", dy, normed)), n);
}

// [dq | dk | dv] flat. With P the probabilities and dO the output's gradient (grouped heads):
// dV = P^T dO, dP = dO V^T, dS = P * (dP - rowsum(dP * P)) * scale, dQ = dS K, dK = dS^T Q; a
// KV head's gradients sum over the query heads of its group.
Value Emitter::attention_grad(const Node& n) {
  const graph::AttentionGradArgs a = graph::attention_grad_args(n);
  const Value q = f32(a.q), k = f32(a.k), v = f32(a.v), dy = f32(a.dy);
  const int64_t batch = q.shape[0], seq = q.shape[1], q_heads = q.shape[2], dim = q.shape[3];
  const int64_t kv_heads = k.shape[2], group = q_heads / kv_heads;
  const Shape grouped_shape{batch, seq, kv_heads, group, dim};
  const Value grouped = w_.reshape(q, grouped_shape);
  const Value p =
      attention_probabilities(grouped, k, a.mask, a.slots, n.scale, n.window);  // [B,Hkv,S,G,L]
  const Value d_out = w_.reshape(dy, grouped_shape);                            // [B,S,Hkv,G,D]
  // dV [B, Hkv, L, D] = sum over S, G of P * dO.
  const Value dv = w_.dot_general(p, d_out, {0, 1}, {0, 2}, {2, 3}, {1, 3});
  // dP [B, Hkv, S, G, L] = dO . V over D.
  const Value dp = w_.dot_general(d_out, v, {0, 2}, {0, 2}, {4}, {3});
  const Value row = w_.reduce(w_.binary("multiply", dp, p), w_.constant(0, "f32"), "add", {4});
  const Value centered = w_.binary("subtract", dp, w_.broadcast(row, dp.shape, {0, 1, 2, 3}));
  const Value ds = multiply_by(w_.binary("multiply", p, centered), n.scale);
  // dQ [B, Hkv, S, G, D] = dS . K over L; dK [B, Hkv, L, D] = dS . Q over S, G.
  const Value dq = w_.dot_general(ds, k, {0, 1}, {0, 2}, {4}, {1});
  const Value dk = w_.dot_general(ds, grouped, {0, 1}, {0, 2}, {2, 3}, {1, 3});
  const Value dq_ordered = w_.transpose(dq, {0, 2, 1, 3, 4});  // [B, S, Hkv, G, D]
  const Value dk_ordered = w_.transpose(dk, {0, 2, 1, 3});     // [B, L, Hkv, D]
  const Value dv_ordered = w_.transpose(dv, {0, 2, 1, 3});
  return as_node_type(w_.concatenate({flat(dq_ordered), flat(dk_ordered), flat(dv_ordered)}, 0), n);
}

void Emitter::refuse_vocabulary_shard(const Node& n, const char* what) {
  if (n.shard) {
    throw Error(std::string("PJRT backend: a vocabulary-sharded ") + what + " ('" + n.name +
                "') is not emitted yet");
  }
}

Emitter::LossRows Emitter::loss_rows(ValueId logits_id, ValueId targets_id) {
  const Value all = f32(logits_id);
  const int64_t vocab = all.shape.back(), rows = shape_numel(all.shape) / vocab;
  const Value targets = w_.reshape(value(targets_id), {rows});
  const Value counted =
      w_.compare("NE", targets, w_.splat(graph::kIgnoreIndex, targets.shape, "i32"));
  const Shape shape{rows, vocab};
  const Value is_target = w_.compare("EQ", w_.iota(shape, 1), w_.broadcast(targets, shape, {0}));
  return {w_.reshape(all, shape), targets, counted, is_target};
}

Value Emitter::log_sum_exp(const Value& logits) {
  const Value row_max = w_.reduce(logits, w_.infinity(true), "maximum", {1});
  const Value shifted = w_.binary("subtract", logits, w_.broadcast(row_max, logits.shape, {0}));
  const Value sum = w_.reduce(w_.unary("exponential", shifted), w_.constant(0, "f32"), "add", {1});
  return w_.binary("add", w_.unary("log", sum), row_max);
}

// The sum over rows whose target is not kIgnoreIndex of log-sum-exp - logits[target]; the
// target's logit picked by comparing with an iota (no gather).
Value Emitter::cross_entropy(const Node& n) {
  const graph::CrossEntropyArgs a = graph::cross_entropy_args(n);
  refuse_vocabulary_shard(n, "cross-entropy");
  const LossRows r = loss_rows(a.logits, a.targets);
  const Value& logits = r.logits;
  const int64_t rows = logits.shape[0];
  const Value picked = w_.reduce(w_.select(r.is_target, logits, w_.splat(0, logits.shape, "f32")),
                                 w_.constant(0, "f32"), "add", {1});
  const Value losses = w_.select(r.counted, w_.binary("subtract", log_sum_exp(logits), picked),
                                 w_.splat(0, {rows}, "f32"));
  const Value total = w_.reduce(losses, w_.constant(0, "f32"), "add", {0});
  return as_node_type(w_.reshape(total, {1}), n);
}

// d logits = (softmax - onehot(target)) * d_loss, zero rows where the target is ignored.
Value Emitter::cross_entropy_grad(const Node& n) {
  const graph::CrossEntropyGradArgs a = graph::cross_entropy_grad_args(n);
  refuse_vocabulary_shard(n, "cross-entropy gradient");
  const LossRows r = loss_rows(a.logits, a.targets);
  const Value& logits = r.logits;
  const Shape& shape = logits.shape;
  const Value softmax = w_.unary(
      "exponential", w_.binary("subtract", logits, w_.broadcast(log_sum_exp(logits), shape, {0})));
  const Value grad =
      w_.binary("subtract", softmax,
                w_.select(r.is_target, w_.splat(1, shape, "f32"), w_.splat(0, shape, "f32")));
  const Value counted = w_.broadcast(r.counted, shape, {0});
  const Value d_loss = w_.broadcast(w_.reshape(f32(a.d_loss), {}), shape, {});
  const Value scaled =
      w_.select(counted, w_.binary("multiply", grad, d_loss), w_.splat(0, shape, "f32"));
  return as_node_type(w_.reshape(scaled, n.shape), n);
}

// `shape` elements of x from element `start`, x as the in-place writes before the view left it.
Value Emitter::view(const Node& n) {
  const Value x = current(graph::view_args(n).x);
  const int64_t count = shape_numel(n.shape);
  return w_.reshape(w_.slice(flat(x), {n.start}, {n.start + count}), n.shape);
}

// x's elements from element `start` of `shape`, zeros around them.
Value Emitter::pad(const Node& n) {
  const Value x = flat(value(graph::operand(n)));
  const int64_t total = shape_numel(n.shape), count = x.shape[0];
  std::vector<Value> parts;
  if (n.start > 0) parts.push_back(w_.splat(0, {n.start}, x.element));
  parts.push_back(x);
  if (n.start + count < total) parts.push_back(w_.splat(0, {total - n.start - count}, x.element));
  return w_.reshape(parts.size() == 1 ? x : w_.concatenate(parts, 0), n.shape);
}

Value Emitter::concat_rows(const Node& n) {
  std::vector<Value> parts;
  for (ValueId id : n.inputs) parts.push_back(as_node_type(value(id), n));
  return parts.size() == 1 ? parts[0] : w_.concatenate(parts, 0);
}

}  // namespace tfm::pjrt
