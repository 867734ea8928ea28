#include "backends/pjrt/stablehlo.h"

#include <map>
#include <regex>

#include "backends/pjrt/emitter.h"
#include "graph/op_args.h"
#include "tfm/error.h"

namespace tfm::pjrt {

using graph::Graph;
using graph::Node;
using graph::Op;
using graph::ValueId;

Value Emitter::multiply_by(const Value& x, double factor) {
  if (factor == 1.0) return x;
  return w_.binary("multiply", x, w_.splat(factor, x.shape, x.element));
}

Value Emitter::embedding(const Node& n) {
  const graph::EmbeddingArgs a = graph::embedding_args(n);
  refuse_vocabulary_shard(n, "embedding");
  const Value& table = value(a.table);
  const Value& ids = value(a.ids);
  const int64_t r = rank_of(ids);
  Shape shape = ids.shape;
  shape.push_back(table.shape[1]);
  const Value rows =
      w_.op("gather", {table, ids}, shape, table.element,
            "{dimension_numbers = #stablehlo.gather<offset_dims = [" + std::to_string(r) +
                "], collapsed_slice_dims = [0], start_index_map = [0], index_vector_dim = " +
                std::to_string(r) + ">, slice_sizes = " + i64_array({1, table.shape[1]}) +
                ", indices_are_sorted = false}");
  return as_node_type(rows, n);
}

Value Emitter::linear(const Node& n) {
  const graph::LinearArgs a = graph::linear_args(n);
  const Value x = f32(a.x);
  const int64_t r = rank_of(x);
  Value y = w_.dot_general(x, f32(a.w), {}, {}, {r - 1}, {1});
  if (a.bias >= 0) y = w_.binary("add", y, w_.broadcast(f32(a.bias), y.shape, {r - 1}));
  if (a.residual >= 0) y = w_.binary("add", y, f32(a.residual));
  return as_node_type(y, n);
}

Value Emitter::row_mean(const Value& x) {
  const int64_t r = rank_of(x);
  return multiply_by(w_.reduce(x, w_.constant(0, "f32"), "add", {r - 1}),
                     1.0 / static_cast<double>(x.shape.back()));
}

Value Emitter::per_row(const Value& v, const Shape& shape) {
  return w_.broadcast(v, shape, leading_dims(static_cast<int64_t>(shape.size()) - 1));
}

Value Emitter::inverse_rms(const Value& x, float eps) {
  const Value mean_sq = row_mean(w_.binary("multiply", x, x));
  return w_.unary("rsqrt", w_.binary("add", mean_sq, w_.splat(eps, mean_sq.shape, "f32")));
}

Value Emitter::rms_norm(const Value& x, ValueId weight, float eps) {
  return w_.binary("multiply", w_.binary("multiply", x, per_row(inverse_rms(x, eps), x.shape)),
                   w_.broadcast(f32(weight), x.shape, {rank_of(x) - 1}));
}

// Rotate-half RoPE (x [B, S, H, D]): x * cos + rotate_half(x) * sin, the angles position x
// inv_freq in f32 as transformers computes them; its gradient is the rotation by minus the angle.
Value Emitter::rotate(const Value& x, ValueId positions, ValueId inv_freq, float scale,
                      double sign) {
  const int64_t batch = x.shape[0], seq = x.shape[1], half = x.shape[3] / 2;
  const Shape angle_shape{batch, seq, half};
  const Value angles = w_.binary("multiply", w_.broadcast(f32(positions), angle_shape, {0, 1}),
                                 w_.broadcast(f32(inv_freq), angle_shape, {2}));
  auto table = [&](const char* fn, double factor) {
    const Value t = multiply_by(w_.unary(fn, angles), factor);
    return w_.broadcast(w_.concatenate({t, t}, 2), x.shape, {0, 1, 3});
  };
  const Value cos = table("cosine", scale), sin = table("sine", sign * scale);
  const Shape& s = x.shape;
  const Value first = w_.slice(x, {0, 0, 0, 0}, {s[0], s[1], s[2], half});
  const Value second = w_.slice(x, {0, 0, 0, half}, {s[0], s[1], s[2], 2 * half});
  const Value rotated = w_.concatenate({w_.unary("negate", second), first}, 3);
  return w_.binary("add", w_.binary("multiply", x, cos), w_.binary("multiply", rotated, sin));
}

Value Emitter::rope(const Node& n) {
  const graph::RopeArgs a = graph::rope_args(n);
  Value x = f32(a.x);
  if (a.norm >= 0) x = rms_norm(x, a.norm, n.eps);
  return as_node_type(rotate(x, a.positions, a.inv_freq, n.scale, 1.0), n);
}

// The update's token s written at slot slots[s] of every row: a scatter at indices that are
// data (one executable for every position).
Value Emitter::cache_write(const Node& n) {
  const graph::CacheWriteArgs a = graph::cache_write_args(n);
  const Value& cache = value(a.cache);
  const Value update = w_.convert(value(a.update), cache.element);
  const Value& slots = value(a.slots);
  const Value indices = w_.reshape(slots, {slots.shape[0], 1});
  const std::string scalar = tensor_type({}, cache.element);
  const Value result{w_.fresh(), cache.shape, cache.element};
  const std::string old_value = w_.fresh(), new_value = w_.fresh();
  w_.raw("    " + result.name + " = \"stablehlo.scatter\"(" + cache.name + ", " + indices.name +
         ", " + update.name + ") ({\n    ^bb0(" + old_value + ": " + scalar + ", " + new_value +
         ": " + scalar + "):\n      \"stablehlo.return\"(" + new_value + ") : (" + scalar +
         ") -> ()\n    }) {scatter_dimension_numbers = #stablehlo.scatter<update_window_dims = "
         "[0, 2, 3], inserted_window_dims = [1], scatter_dims_to_operand_dims = [1], "
         "index_vector_dim = 1>, indices_are_sorted = false, unique_indices = false} : (" +
         tensor_type(cache) + ", " + tensor_type(indices) + ", " + tensor_type(update) + ") -> " +
         tensor_type(result) + "\n");
  return result;
}

// Softmax attention with grouped KV heads. Key j is seen by query i iff j <= slots[i] and
// mask[b, j]; a query that sees no key yields zeros, as ops::reference::attention.
Value Emitter::attention_probabilities(const Value& grouped, const Value& k, ValueId mask_id,
                                       ValueId slots, float scale, int64_t window) {
  const int64_t seq = grouped.shape[1], len = k.shape[1];
  // [B, Hkv, S, G, L]
  const Value scores = multiply_by(w_.dot_general(grouped, k, {0, 2}, {0, 2}, {4}, {3}), scale);
  const Shape& shape = scores.shape;
  const Value key = w_.iota({seq, len}, 1);
  const Value last = w_.broadcast(value(slots), {seq, len}, {0});
  Value seen = w_.compare("LE", key, last);
  if (window > 0) {
    const Value distance = w_.binary("subtract", last, key);
    seen = w_.binary(
        "and", seen,
        w_.compare("LT", distance, w_.splat(static_cast<double>(window), {seq, len}, "i32")));
  }
  const Value causal = w_.broadcast(seen, shape, {2, 4});
  const Value& mask = value(mask_id);
  const Value kept =
      w_.broadcast(w_.compare("NE", mask, w_.splat(0, mask.shape, mask.element)), shape, {0, 4});
  const Value visible = w_.binary("and", causal, kept);
  const Value masked = w_.select(visible, scores, w_.broadcast(w_.infinity(true), shape, {}));
  const Value row_max = w_.reduce(masked, w_.infinity(true), "maximum", {4});
  // A row with no visible key has max -inf: any finite floor makes its exponentials 0, not NaN.
  const Value floor = w_.splat(-std::numeric_limits<float>::max(), row_max.shape, "f32");
  const Value shift = w_.broadcast(w_.binary("maximum", row_max, floor), shape, {0, 1, 2, 3});
  const Value p = w_.unary("exponential", w_.binary("subtract", masked, shift));
  // A visible row's sum is at least 1 (its largest term is exp(0)); an empty row's is 0, and
  // dividing its zeros by 1 leaves them.
  const Value sum = w_.reduce(p, w_.constant(0, "f32"), "add", {4});
  const Value denom = w_.binary("maximum", sum, w_.splat(1, sum.shape, "f32"));
  return w_.binary("divide", p, w_.broadcast(denom, shape, {0, 1, 2, 3}));
}

Value Emitter::attention(const Node& n) {
  const graph::AttentionArgs a = graph::attention_args(n);
  const Value q = f32(a.q), k = f32(a.k), v = f32(a.v);
  const int64_t batch = q.shape[0], seq = q.shape[1], q_heads = q.shape[2], dim = q.shape[3];
  const int64_t kv_heads = k.shape[2], group = q_heads / kv_heads;
  const Value grouped = w_.reshape(q, {batch, seq, kv_heads, group, dim});
  const Value p = attention_probabilities(grouped, k, a.mask, a.slots, n.scale, n.window);
  // [B, Hkv, S, G, D]
  const Value out = w_.dot_general(p, v, {0, 1}, {0, 2}, {4}, {1});
  const Value ordered = w_.transpose(out, {0, 2, 1, 3, 4});
  return as_node_type(w_.reshape(ordered, {batch, seq, q_heads, dim}), n);
}

// 1 / (1 + exp(-x)): Neuron's operator list has no logistic.
Value Emitter::sigmoid(const Value& x) {
  const Value one = w_.splat(1, x.shape, x.element);
  return w_.binary("divide", one,
                   w_.binary("add", one, w_.unary("exponential", w_.unary("negate", x))));
}

Value Emitter::elementwise(const Node& n) {
  std::vector<Value> stack;
  auto pop = [&] {
    Value top = stack.back();
    stack.pop_back();
    return top;
  };
  for (const graph::EwInstr& instr : n.program.instrs) {
    switch (instr.code) {
      case graph::EwCode::kLoad:
        stack.push_back(f32(n.inputs[static_cast<size_t>(instr.operand)]));
        break;
      case graph::EwCode::kAdd: {
        const Value b = pop();
        stack.push_back(w_.binary("add", pop(), b));
        break;
      }
      case graph::EwCode::kMul: {
        const Value b = pop();
        stack.push_back(w_.binary("multiply", pop(), b));
        break;
      }
      case graph::EwCode::kSilu: {
        const Value x = pop();
        stack.push_back(w_.binary("multiply", x, sigmoid(x)));
        break;
      }
      case graph::EwCode::kScale:
        stack.push_back(multiply_by(pop(), instr.scalar));
        break;
      case graph::EwCode::kSiluGrad: {
        // dy * s * (1 + x * (1 - s)), s = sigmoid(x)
        const Value dy = pop(), x = pop();
        const Value s = sigmoid(x);
        const Value one = w_.splat(1, x.shape, "f32");
        const Value slope =
            w_.binary("add", one, w_.binary("multiply", x, w_.binary("subtract", one, s)));
        stack.push_back(w_.binary("multiply", w_.binary("multiply", dy, s), slope));
        break;
      }
    }
  }
  if (stack.size() != 1 || n.program.results != 1) {
    throw Error("PJRT backend: elementwise '" + n.name + "' leaves " +
                std::to_string(stack.size()) + " values (a fused program)");
  }
  return as_node_type(stack.back(), n);
}

// The first index of the largest value, without a variadic reduce: the max, then the least
// index holding it.
Value Emitter::argmax(const Node& n) {
  const Value x = f32(graph::operand(n));
  const int64_t r = rank_of(x), width = x.shape.back();
  const Value largest = w_.reduce(x, w_.infinity(true), "maximum", {r - 1});
  const Value is_largest = w_.compare("EQ", x, w_.broadcast(largest, x.shape, leading_dims(r - 1)));
  const Value index =
      w_.select(is_largest, w_.iota(x.shape, r - 1), w_.splat(width, x.shape, "i32"));
  return w_.reduce(index, w_.constant(static_cast<double>(width), "i32"), "minimum", {r - 1});
}

Value Emitter::emit_node(const Node& n) {
  // The folded forms (added in place, with a residual or a rotation folded in) are made by a
  // kernel backend's passes; a graph handed to a compiler holds none. A loss gradient written
  // over its logits (autodiff's, where nothing else reads them) is the same value.
  if ((n.in_place && n.op != Op::kCrossEntropyGrad) || n.adds_weight_grad || n.rotated ||
      (n.residual && n.op == Op::kRmsNormGradInput)) {
    throw Error(std::string("PJRT backend: op ") + graph::op_name(n.op) + " ('" + n.name +
                "') in a folded form, which only a kernel backend's passes make");
  }
  switch (n.op) {
    case Op::kEmbedding:
      return embedding(n);
    case Op::kLinear:
      return linear(n);
    case Op::kRmsNorm: {
      const graph::RmsNormArgs a = graph::rms_norm_args(n);
      return as_node_type(rms_norm(f32(a.x), a.w, n.eps), n);
    }
    case Op::kRope:
      return rope(n);
    case Op::kCacheWrite:
      return cache_write(n);
    case Op::kAttention:
      return attention(n);
    case Op::kElementwise:
      return elementwise(n);
    case Op::kReshape:
      return w_.reshape(value(graph::operand(n)), n.shape);
    case Op::kCast:
      return as_node_type(value(graph::operand(n)), n);
    case Op::kSliceSeq: {
      const Value& x = value(graph::operand(n));
      std::vector<int64_t> start(x.shape.size(), 0), limit(x.shape.begin(), x.shape.end());
      start[1] = n.start;
      limit[1] = n.start + n.shape[1];
      return w_.slice(x, start, limit);
    }
    case Op::kArgmax:
      return argmax(n);
    case Op::kAccumulate: {
      const graph::AccumulateArgs a = graph::accumulate_args(n);
      return as_node_type(w_.binary("add", f32(a.acc), f32(a.x)), n);
    }
    case Op::kView:
      return view(n);
    case Op::kPad:
      return pad(n);
    case Op::kConcatRows:
      return concat_rows(n);
    case Op::kReduceRows:
      return as_node_type(sum_to_rows(f32(graph::operand(n))), n);
    case Op::kEmbeddingGrad:
      return embedding_grad(n);
    case Op::kLinearGradInput:
      return linear_grad_input(n);
    case Op::kLinearGradWeight:
      return linear_grad_weight(n);
    case Op::kRmsNormGradInput:
      return rms_norm_grad_input(n);
    case Op::kRmsNormGradWeight:
      return rms_norm_grad_weight(n);
    case Op::kRopeGrad: {
      const graph::RopeGradArgs a = graph::rope_grad_args(n);
      return as_node_type(rotate(f32(a.dy), a.positions, a.inv_freq, n.scale, -1.0), n);
    }
    case Op::kAttentionGrad:
      return attention_grad(n);
    case Op::kCrossEntropy:
      return cross_entropy(n);
    case Op::kCrossEntropyGrad:
      return cross_entropy_grad(n);
    case Op::kAdamW:
      return adamw(n);
    case Op::kSumSquares:
      return sum_squares(n);
    case Op::kMoeRoute:
      return moe_route(n);
    case Op::kMoeRouteGrad:
      return moe_route_grad(n);
    case Op::kMoeExperts:
      return moe_experts(n);
    case Op::kMoeExpertsGrad:
      return moe_experts_grad(n);
    case Op::kRouterLoss:
      return router_loss(n);
    case Op::kRouterLossGrad:
      return router_loss_grad(n);
    default:
      throw Error(std::string("PJRT backend: op ") + graph::op_name(n.op) + " ('" + n.name +
                  "') is not emitted yet");
  }
}

std::vector<std::vector<ValueId>> Emitter::group_arguments() const {
  std::vector<ValueId> order = graph_.inputs();
  for (size_t i = 0; i < graph_.nodes.size(); ++i) {
    if (graph_.nodes[i].op == Op::kWeight) order.push_back(static_cast<ValueId>(i));
  }
  std::vector<std::vector<ValueId>> arguments;
  std::map<int, size_t> argument_of_buffer;
  for (const ValueId id : order) {
    auto placed = placements_.find(id);
    if (placed == placements_.end()) {
      arguments.push_back({id});
      continue;
    }
    auto [it, fresh] = argument_of_buffer.emplace(placed->second.buffer, arguments.size());
    if (fresh) arguments.emplace_back();
    arguments[it->second].push_back(id);
  }
  return arguments;
}

std::vector<Value> Emitter::updated_arguments(const std::vector<Value>& arguments, Module& module,
                                              std::map<size_t, size_t>& aliased) {
  std::map<ValueId, ValueId> update_of;  // state input -> its updated value
  for (const graph::StateUpdate& u : graph_.updates) update_of[u.state] = u.value;
  std::vector<Value> results;
  for (size_t a = 0; a < arguments.size(); ++a) {
    std::vector<std::pair<int64_t, Value>> parts;
    for (const ValueId id : module.arguments[a]) {
      auto u = update_of.find(id);
      if (u == update_of.end()) continue;
      auto placed = placements_.find(id);
      parts.emplace_back(placed == placements_.end() ? 0 : placed->second.start,
                         flat(value(u->second)));
    }
    if (parts.empty()) continue;
    aliased[a] = graph_.outputs.size() + results.size();
    module.updated_arguments.push_back(a);
    results.push_back(w_.reshape(written_over(flat(arguments[a]), parts), arguments[a].shape));
  }
  return results;
}

Module Emitter::emit() {
  Module module;
  module.arguments = group_arguments();
  std::vector<Value> arguments;
  for (size_t a = 0; a < module.arguments.size(); ++a) {
    const Node& first = node(module.arguments[a][0]);
    auto placed = placements_.find(module.arguments[a][0]);
    const Shape shape = placed == placements_.end() ? first.shape : Shape{placed->second.size};
    arguments.push_back({"%arg" + std::to_string(a), shape, element_type(first.dtype)});
    for (const ValueId id : module.arguments[a]) {
      const Node& n = node(id);
      TFM_CHECK(n.dtype == first.dtype, "PJRT emitter: one buffer of one dtype ('" + n.name + "')");
      if (placed == placements_.end()) {
        values_[static_cast<size_t>(id)] = arguments.back();
        continue;
      }
      const int64_t start = placements_.at(id).start;
      values_[static_cast<size_t>(id)] =
          w_.reshape(w_.slice(arguments.back(), {start}, {start + shape_numel(n.shape)}), n.shape);
    }
  }
  for (size_t i = 0; i < graph_.nodes.size(); ++i) {
    const Node& n = graph_.nodes[i];
    if (n.op == Op::kInput || n.op == Op::kWeight) continue;
    values_[i] = emit_node(n);
    TFM_CHECK(values_[i].shape == n.shape, "PJRT emitter: the shape of " + graph_.describe(i));
  }
  std::vector<Value> results;
  for (const ValueId id : graph_.outputs) results.push_back(value(id));
  std::map<size_t, size_t> aliased;  // argument -> the result that replaces it
  for (Value& v : updated_arguments(arguments, module, aliased)) results.push_back(v);
  module.outputs = graph_.outputs.size();
  std::string names, types;
  for (size_t i = 0; i < results.size(); ++i) {
    names += (i ? ", " : "") + results[i].name;
    types += (i ? ", " : "") + tensor_type(results[i]);
  }
  module.text =
      "module @tfm attributes {mhlo.num_partitions = " + std::to_string(partitions_.devices) +
      " : i32, mhlo.num_replicas = 1 : i32} {\n  func.func public @main" +
      signature(module, arguments, results, aliased) + " {\n" + w_.body() + "    \"func.return\"(" +
      names + ") : (" + types + ") -> ()\n  }\n}\n";
  return module;
}

std::string Emitter::signature(const Module& module, const std::vector<Value>& arguments,
                               const std::vector<Value>& results,
                               const std::map<size_t, size_t>& aliased) const {
  const bool partitioned = partitions_.devices > 1;
  const auto sharding_of = [&](size_t argument) -> std::string {
    auto it = partitions_.arguments.find(module.arguments[argument][0]);
    return it == partitions_.arguments.end() ? "{replicated}" : it->second;
  };
  std::vector<std::string> result_sharding(results.size(), "{replicated}");
  std::string text = "(";
  for (size_t a = 0; a < arguments.size(); ++a) {
    std::vector<std::string> attributes;
    if (partitioned) attributes.push_back("mhlo.sharding = \"" + sharding_of(a) + "\"");
    auto it = aliased.find(a);
    if (it != aliased.end()) {
      attributes.push_back("tf.aliasing_output = " + std::to_string(it->second) + " : i32");
      result_sharding[it->second] = sharding_of(a);
    }
    text += (a ? ", " : "") + arguments[a].name + ": " + tensor_type(arguments[a]);
    for (size_t i = 0; i < attributes.size(); ++i) {
      text += (i ? ", " : " {") + attributes[i] + (i + 1 == attributes.size() ? "}" : "");
    }
  }
  text += ") -> (";
  for (size_t i = 0; i < results.size(); ++i) {
    text += (i ? ", " : "") + tensor_type(results[i]);
    if (partitioned) text += " {mhlo.sharding = \"" + result_sharding[i] + "\"}";
  }
  return text + ")";
}

Module emit_stablehlo(const Graph& graph, const Placements& placements,
                      const Partitions& partitions) {
  return Emitter(graph, placements, partitions).emit();
}

std::set<std::string> op_names(const std::string& text) {
  static const std::regex quoted("\"((stablehlo|func)\\.[a-z_]+)\"");
  std::set<std::string> names;
  for (auto it = std::sregex_iterator(text.begin(), text.end(), quoted);
       it != std::sregex_iterator(); ++it) {
    names.insert((*it)[1]);
  }
  return names;
}

const std::set<std::string>& neuron_ops() {
  static const std::set<std::string> ops = {
      "func.return",           "stablehlo.add",
      "stablehlo.and",         "stablehlo.broadcast_in_dim",
      "stablehlo.compare",     "stablehlo.concatenate",
      "stablehlo.constant",    "stablehlo.convert",
      "stablehlo.cosine",      "stablehlo.divide",
      "stablehlo.dot_general", "stablehlo.dynamic_update_slice",
      "stablehlo.exponential", "stablehlo.gather",
      "stablehlo.iota",        "stablehlo.log",
      "stablehlo.maximum",     "stablehlo.minimum",
      "stablehlo.multiply",    "stablehlo.negate",
      "stablehlo.reduce",      "stablehlo.reshape",
      "stablehlo.return",      "stablehlo.rsqrt",
      "stablehlo.scatter",     "stablehlo.select",
      "stablehlo.sine",        "stablehlo.slice",
      "stablehlo.sqrt",        "stablehlo.subtract",
      "stablehlo.transpose",
  };
  return ops;
}

}  // namespace tfm::pjrt
