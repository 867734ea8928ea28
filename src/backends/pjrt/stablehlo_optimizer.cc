// The optimizer graph's ops as StableHLO (training/adamw.h, training/grad_clip.h): AdamW over
// views of the flat parameters and moments, written in place on a kernel backend, here the new
// values of those parts, placed into the state's update; and the sum of squares the gradient
// norm is made of.
#include "backends/pjrt/emitter.h"
#include "graph/op_args.h"
#include "ops/adamw.h"
#include "tfm/error.h"

namespace tfm::pjrt {

using graph::Node;
using graph::Op;
using graph::ValueId;

std::optional<std::pair<ValueId, int64_t>> Emitter::state_part(ValueId id) const {
  int64_t start = 0;
  while (true) {
    const Node& n = node(id);
    if (n.op == Op::kInput && n.is_state) return std::make_pair(id, start);
    if (n.op == Op::kView) {
      start += n.start;
      id = graph::view_args(n).x;
    } else if (n.op == Op::kReshape) {
      id = graph::operand(n);
    } else {
      return std::nullopt;
    }
  }
}

void Emitter::record_write(ValueId written, const Value& values, const Node& writer) {
  const auto part = state_part(written);
  if (!part) {
    throw Error(std::string("PJRT backend: ") + graph::op_name(writer.op) + " ('" + writer.name +
                "') writes in place into '" + node(written).name +
                "', which is not a part of a state input");
  }
  writes_[part->first].emplace_back(part->second, flat(values));
}

Value Emitter::written_over(const Value& base,
                            const std::vector<std::pair<int64_t, Value>>& parts) {
  Value result = base;
  for (const auto& [start, part] : parts) {
    const Value typed = w_.convert(part, base.element);
    result = typed.shape == base.shape ? typed : w_.update_slice(result, typed, {start});
  }
  return result;
}

Value Emitter::current(ValueId id) {
  auto it = writes_.find(id);
  if (it == writes_.end()) return value(id);
  const Value& state = value(id);
  values_[static_cast<size_t>(id)] = w_.reshape(written_over(flat(state), it->second), state.shape);
  writes_.erase(it);
  return value(id);
}

// torch.optim.AdamW's step in its op order (ops/adamw.h): without its fused multiply-adds, which
// StableHLO does not spell (a compiler may fuse them).
Value Emitter::adamw(const Node& n) {
  const graph::AdamWArgs a = graph::adamw_args(n);
  const Value p = f32(a.param), g_unscaled = f32(a.grad), m = f32(a.exp_avg), v = f32(a.exp_avg_sq);
  const Value scalars = f32(a.scalars);
  const Shape& shape = p.shape;
  const auto scalar = [&](int64_t i) {
    return w_.broadcast(w_.reshape(w_.slice(scalars, {i}, {i + 1}), {}), shape, {});
  };
  const auto mul = [&](const Value& x, const Value& y) { return w_.binary("multiply", x, y); };
  const auto add = [&](const Value& x, const Value& y) { return w_.binary("add", x, y); };
  const Value g = mul(g_unscaled, scalar(ops::kAdamWGradScale));
  const Value param = n.decays ? mul(p, scalar(ops::kAdamWDecay)) : p;
  const Value small_weight =
      w_.compare("NE", scalar(ops::kAdamWSmallWeight), w_.splat(0, shape, "f32"));
  const Value new_m = add(mul(scalar(ops::kAdamWLerpCoeff), w_.binary("subtract", g, m)),
                          w_.select(small_weight, m, g));
  const Value new_v =
      add(mul(mul(scalar(ops::kAdamWSqWeight), g), g), mul(v, scalar(ops::kAdamWBeta2)));
  const Value denom =
      add(w_.binary("divide", w_.unary("sqrt", new_v), scalar(ops::kAdamWBiasCorrection2Sqrt)),
          scalar(ops::kAdamWEps));
  const Value new_p =
      add(param, w_.binary("divide", mul(scalar(ops::kAdamWNegStepSize), new_m), denom));
  record_write(a.param, new_p, n);
  record_write(a.exp_avg, new_m, n);
  record_write(a.exp_avg_sq, new_v, n);
  return as_node_type(new_p, n);
}

// In f32, in the order the compiler reduces (a kernel backend sums in double over fixed chunks):
// the gradient norm it makes is within f32 rounding of theirs.
Value Emitter::sum_squares(const Node& n) {
  const Value x = flat(f32(graph::operand(n)));
  const Value sum = w_.reduce(w_.binary("multiply", x, x), w_.constant(0, "f32"), "add", {0});
  return as_node_type(w_.reshape(sum, {1}), n);
}

}  // namespace tfm::pjrt
