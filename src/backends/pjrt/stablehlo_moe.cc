// The mixture-of-experts ops as StableHLO. A compiled program's shapes are fixed, so each expert
// here runs over every row and its output is kept where the row chose it: the results of the
// kernel backends' gathered products, at the cost of all experts' arithmetic.
#include "backends/pjrt/emitter.h"

namespace tfm::pjrt {

using graph::Node;
using graph::ValueId;

namespace {

Shape column(const Shape& rows) { return {rows[0], 1}; }

}  // namespace

Value Emitter::row_sum(const Value& x) {
  const Value sum = w_.reduce(x, w_.constant(0, "f32"), "add", {1});
  return w_.broadcast(sum, x.shape, {0});
}

Value Emitter::softmax_rows(const Value& logits) {
  const Value largest = w_.reduce(logits, w_.infinity(true), "maximum", {1});
  const Value e = w_.unary("exponential",
                           w_.binary("subtract", logits, w_.broadcast(largest, logits.shape, {0})));
  return w_.binary("divide", e, row_sum(e));
}

// Each row's top_k largest logits (the first of equals first), as a pred [T, E]: the largest
// taken top_k times, each taken one set aside.
Value Emitter::chosen_experts(const Value& logits, int64_t top_k) {
  const Shape& shape = logits.shape;
  const int64_t experts = shape[1];
  const Value index = w_.iota(shape, 1);
  Value left = logits;
  Value chosen = w_.compare("NE", index, index);
  for (int64_t k = 0; k < top_k; ++k) {
    const Value largest =
        w_.broadcast(w_.reduce(left, w_.infinity(true), "maximum", {1}), shape, {0});
    const Value first = w_.reduce(
        w_.select(w_.compare("EQ", left, largest), index, w_.splat(experts, shape, "i32")),
        w_.constant(static_cast<double>(experts), "i32"), "minimum", {1});
    const Value pick = w_.compare("EQ", index, w_.broadcast(first, shape, {0}));
    chosen = w_.binary("or", chosen, pick);
    left = w_.select(pick, w_.broadcast(w_.infinity(true), shape, {}), left);
  }
  return chosen;
}

Value Emitter::routing_weights(const Value& logits, int64_t top_k, bool normed) {
  const Value p = softmax_rows(logits);
  const Value kept = w_.select(chosen_experts(logits, top_k), p, w_.splat(0, p.shape, "f32"));
  return normed ? w_.binary("divide", kept, row_sum(kept)) : kept;
}

Value Emitter::moe_route(const Node& n) {
  return routing_weights(f32(n.inputs[0]), n.top_k, n.normed);
}

Value Emitter::moe_route_grad(const Node& n) {
  const Value logits = f32(n.inputs[0]);
  const Value w = routing_weights(logits, n.top_k, n.normed);
  const Value zeros = w_.splat(0, w.shape, "f32");
  const Value chosen = w_.compare("NE", w, zeros);
  const Value g = w_.select(chosen, f32(n.inputs[1]), zeros);
  const Value dot = row_sum(w_.binary("multiply", w, g));
  // As ops::route_row_grad: the chosen softmax when renormalized, the whole one when not.
  const Value p = n.normed ? w : softmax_rows(logits);
  return flat(w_.binary("multiply", p, w_.binary("subtract", g, dot)));
}

// One expert's products over every row: gate and up [T, I], silu(gate) x up, down [T, H].
Emitter::ExpertRows Emitter::expert_rows(const Value& x, ValueId gate_w, ValueId up_w,
                                         ValueId down_w) {
  ExpertRows e;
  e.gate = w_.dot_general(x, f32(gate_w), {}, {}, {1}, {1});
  e.up = w_.dot_general(x, f32(up_w), {}, {}, {1}, {1});
  e.act = w_.binary("multiply", w_.binary("multiply", e.gate, sigmoid(e.gate)), e.up);
  e.down = w_.dot_general(e.act, f32(down_w), {}, {}, {1}, {1});
  return e;
}

// Expert e's routing column [T, 1] broadcast over `shape`, and where it is not 0.
Emitter::ExpertColumn Emitter::expert_column(const Value& routing, int64_t e, const Shape& shape) {
  const Value r =
      w_.reshape(w_.slice(routing, {0, e}, {routing.shape[0], e + 1}), {routing.shape[0]});
  const Value wide = w_.broadcast(r, shape, {0});
  return {wide, w_.compare("NE", wide, w_.splat(0, shape, "f32"))};
}

Value Emitter::moe_experts(const Node& n) {
  const Value x = f32(n.inputs[0]), routing = f32(n.inputs[1]);
  const auto held = static_cast<int64_t>(n.inputs.size() - 2) / 3;
  const Value zeros = w_.splat(0, x.shape, "f32");
  Value y = zeros;
  for (int64_t e = 0; e < held; ++e) {
    const auto in = [&](int64_t k) { return n.inputs[static_cast<size_t>(2 + 3 * e + k)]; };
    const ExpertRows rows = expert_rows(x, in(0), in(1), in(2));
    const ExpertColumn r = expert_column(routing, n.start + e, x.shape);
    // Rows that did not choose the expert take nothing from it, not even a NaN.
    y = w_.binary("add", y, w_.select(r.routed, w_.binary("multiply", r.weight, rows.down), zeros));
  }
  return y;
}

Value Emitter::moe_experts_grad(const Node& n) {
  const Value x = f32(n.inputs[0]), routing = f32(n.inputs[1]), dy = f32(n.inputs.back());
  const int64_t experts = routing.shape[1];
  const auto held = static_cast<int64_t>(n.inputs.size() - 3) / 3;
  Value dx = w_.splat(0, x.shape, "f32");
  // The routing columns of experts not held get no gradient here.
  std::vector<Value> d_routing(static_cast<size_t>(experts), w_.splat(0, column(x.shape), "f32"));
  std::vector<Value> d_weights;
  for (int64_t e = 0; e < held; ++e) {
    const auto in = [&](int64_t k) { return n.inputs[static_cast<size_t>(2 + 3 * e + k)]; };
    const ExpertRows o = expert_rows(x, in(0), in(1), in(2));
    const ExpertColumn r = expert_column(routing, n.start + e, x.shape);
    const Value zeros = w_.splat(0, x.shape, "f32");
    const Value d_out = w_.select(r.routed, w_.binary("multiply", r.weight, dy), zeros);
    const Value d_r = w_.select(r.routed, w_.binary("multiply", dy, o.down), zeros);
    d_routing[static_cast<size_t>(n.start + e)] =
        w_.reshape(w_.reduce(d_r, w_.constant(0, "f32"), "add", {1}), column(x.shape));
    // d down [H, I] = d_out^T act; d act = d_out down.
    const Value d_down = w_.dot_general(d_out, o.act, {}, {}, {0}, {0});
    const Value d_act = w_.dot_general(d_out, f32(in(2)), {}, {}, {1}, {0});
    const Value s = sigmoid(o.gate);
    const Value one = w_.splat(1, s.shape, "f32");
    const Value d_up = w_.binary("multiply", d_act, w_.binary("multiply", o.gate, s));
    const Value silu_grad = w_.binary(
        "multiply", s,
        w_.binary("add", one, w_.binary("multiply", o.gate, w_.binary("subtract", one, s))));
    const Value d_gate = w_.binary("multiply", w_.binary("multiply", d_act, o.up), silu_grad);
    d_weights.push_back(flat(w_.dot_general(d_gate, x, {}, {}, {0}, {0})));
    d_weights.push_back(flat(w_.dot_general(d_up, x, {}, {}, {0}, {0})));
    d_weights.push_back(flat(d_down));
    dx = w_.binary("add", dx, w_.dot_general(d_gate, f32(in(0)), {}, {}, {1}, {0}));
    dx = w_.binary("add", dx, w_.dot_general(d_up, f32(in(1)), {}, {}, {1}, {0}));
  }
  std::vector<Value> parts{flat(dx), flat(w_.concatenate(d_routing, 1))};
  parts.insert(parts.end(), d_weights.begin(), d_weights.end());
  return w_.concatenate(parts, 0);
}

// What the router loss and its gradient share: per layer the softmax and the kept rows' choices,
// and over all layers each expert's chosen share and mean probability.
Emitter::RouterShares Emitter::router_shares(const Node& n, size_t layers) {
  RouterShares s;
  const Value first = f32(n.inputs[2]);
  const Shape& shape = first.shape;
  const Value mask = w_.convert(w_.reshape(value(n.inputs[1]), {shape[0]}), "f32");
  s.kept_rows = w_.broadcast(mask, shape, {0});
  const Value zeros = w_.splat(0, shape, "f32");
  Value chosen_sum = zeros, prob_sum = zeros;
  for (size_t l = 0; l < layers; ++l) {
    const Value logits = f32(n.inputs[2 + l]);
    const Value p = softmax_rows(logits);
    s.probabilities.push_back(p);
    const Value chosen = w_.select(chosen_experts(logits, n.top_k), s.kept_rows, zeros);
    chosen_sum = w_.binary("add", chosen_sum, chosen);
    prob_sum = w_.binary("add", prob_sum, w_.binary("multiply", p, s.kept_rows));
  }
  // Rows kept in every layer; a mask keeping none leaves the sums 0, divided by 1.
  const Value kept = w_.reduce(mask, w_.constant(0, "f32"), "add", {0});
  s.kept =
      w_.binary("maximum", multiply_by(kept, static_cast<double>(layers)), w_.constant(1, "f32"));
  const Value per_expert_kept = w_.broadcast(s.kept, {shape[1]}, {});
  s.chosen_share = w_.binary("divide", w_.reduce(chosen_sum, w_.constant(0, "f32"), "add", {0}),
                             per_expert_kept);
  s.mean_probability =
      w_.binary("divide", w_.reduce(prob_sum, w_.constant(0, "f32"), "add", {0}), per_expert_kept);
  return s;
}

Value Emitter::router_loss(const Node& n) {
  const size_t layers = n.inputs.size() - 2;
  const RouterShares s = router_shares(n, layers);
  const int64_t experts = s.chosen_share.shape[0];
  const Value sum = w_.reduce(w_.binary("multiply", s.chosen_share, s.mean_probability),
                              w_.constant(0, "f32"), "add", {0});
  const Value loss = multiply_by(sum, static_cast<double>(experts) * n.scale);
  return w_.binary("divide", w_.reshape(loss, {1}), f32(n.inputs[0]));
}

Value Emitter::router_loss_grad(const Node& n) {
  const size_t layers = n.inputs.size() - 3;
  const RouterShares s = router_shares(n, layers);
  const Shape& shape = s.probabilities[0].shape;
  const int64_t experts = shape[1];
  // d loss / d p[e] = factor x experts x chosen share[e] / kept rows, on the kept rows.
  const Value factor = w_.binary("divide", f32(n.inputs.back()), f32(n.inputs[0]));
  const Value scaled = multiply_by(w_.reshape(factor, {}), static_cast<double>(experts) * n.scale);
  const Value per_expert = w_.binary(
      "divide", w_.binary("multiply", s.chosen_share, w_.broadcast(scaled, {experts}, {})),
      w_.broadcast(s.kept, {experts}, {}));
  const Value g = w_.broadcast(per_expert, shape, {1});
  std::vector<Value> parts;
  for (const Value& p : s.probabilities) {
    const Value dot = row_sum(w_.binary("multiply", p, g));
    const Value d = w_.binary("multiply", p, w_.binary("subtract", g, dot));
    parts.push_back(flat(w_.binary("multiply", d, s.kept_rows)));
  }
  return parts.size() == 1 ? parts[0] : w_.concatenate(parts, 0);
}

}  // namespace tfm::pjrt
