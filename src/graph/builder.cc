#include "graph/builder.h"

#include "graph/effects.h"
#include "graph/op_args.h"
#include "graph/shapes.h"
#include "tfm/error.h"

namespace tfm::graph {

const Node& Builder::node(ValueId id) const {
  TFM_CHECK(id >= 0 && static_cast<size_t>(id) < graph_.nodes.size(), "unknown graph value");
  return graph_.nodes[static_cast<size_t>(id)];
}

ValueId Builder::recompute(const Node& like, std::vector<ValueId> inputs) {
  TFM_CHECK(inputs.size() == like.inputs.size(), "recompute: another number of inputs");
  Node n = like;
  n.inputs = std::move(inputs);
  return graph_.add(std::move(n));
}

ValueId Builder::add_node(Op op, std::vector<ValueId> inputs, Shape shape, std::string name) {
  Node n;
  n.op = op;
  n.inputs = std::move(inputs);
  n.shape = std::move(shape);
  n.name = std::move(name);
  return graph_.add(std::move(n));
}

void Builder::update_state(ValueId state, ValueId value) {
  for (StateUpdate& u : graph_.updates) {
    if (u.state == state) {
      u.value = value;
      return;
    }
  }
  graph_.updates.push_back({state, value});
}

ValueId Builder::input(std::string name, Shape shape, DType dtype) {
  const ValueId id = add_node(Op::kInput, {}, std::move(shape), std::move(name));
  graph_.nodes.back().dtype = dtype;
  return id;
}

ValueId Builder::state(std::string name, Shape shape, DType dtype, Tensor bound) {
  const ValueId id = input(std::move(name), std::move(shape), dtype);
  graph_.nodes.back().is_state = true;
  graph_.nodes.back().constant = std::move(bound);
  return id;
}

ValueId Builder::weight(std::string name, Tensor tensor) {
  const bool matrix = tensor.ndim() == 2;
  ValueId id = add_node(Op::kWeight, {}, tensor.shape(), std::move(name));
  graph_.nodes.back().dtype = tensor.dtype();
  graph_.nodes.back().constant = std::move(tensor);
  const bool autocast = matrix && autocast_ != DType::f32 && node(id).dtype == DType::f32;
  if (weight_shards_ && !(whole_weights_ && whole_weights_(node(id).name))) {
    id = gather_shards(id, weight_shards_);
    if (const auto rows = unpadded_rows_.find(node(id).name); rows != unpadded_rows_.end()) {
      Shape shape = node(id).shape;
      shape[0] = rows->second;
      id = view(id, 0, std::move(shape));
    }
  }
  return autocast ? cast(id, autocast_) : id;
}

ValueId Builder::embedding(ValueId table, ValueId ids) {
  // torch.autocast leaves lookups alone: the rows come from the f32 table, not from the bf16 copy
  // autocast made of it for the products (a tied output layer's).
  if (autocast_ != DType::f32 && node(table).op == Op::kCast &&
      node(operand(node(table))).dtype == DType::f32) {
    table = operand(node(table));
  }
  return add_node(Op::kEmbedding, {table, ids},
                  graph::embedding_shape(node(table).shape, node(ids).shape));
}

ValueId Builder::embedding_shard(ValueId table, ValueId ids, int64_t first_id) {
  Node like;
  like.start = first_id;
  return as_vocab_shard(embedding(table, ids), like);
}

ValueId Builder::linear(ValueId x, ValueId w, ValueId bias) {
  if (autocast_ != DType::f32 && node(x).dtype == DType::f32) x = cast(x, autocast_);
  const Shape* bias_shape = bias >= 0 ? &node(bias).shape : nullptr;
  const Shape shape = graph::linear_shape(node(x).shape, node(w).shape, bias_shape);
  const ValueId id = add_node(Op::kLinear, {}, shape, node(w).name);
  set_args(graph_.nodes.back(), LinearArgs{x, w, bias});
  return id;
}

ValueId Builder::autocast_linear(ValueId x, ValueId w, ValueId bias) {
  const ValueId y = linear(x, w, bias);
  if (autocast_ != DType::f32 && bias < 0) graph_.nodes[static_cast<size_t>(y)].dtype = autocast_;
  return y;
}

ValueId Builder::rms_norm(ValueId x, ValueId w, float eps) {
  const ValueId id = add_node(Op::kRmsNorm, {x, w},
                              graph::rms_norm_shape(node(x).shape, node(w).shape), node(w).name);
  graph_.nodes.back().eps = eps;
  return id;
}

ValueId Builder::rope(ValueId x, ValueId positions, ValueId inv_freq, float attention_scaling) {
  const ValueId id =
      add_node(Op::kRope, {x, positions, inv_freq},
               graph::rope_shape(node(x).shape, node(positions).shape, node(inv_freq).shape));
  graph_.nodes.back().scale = attention_scaling;
  return id;
}

ValueId Builder::accumulate(ValueId acc, ValueId x) {
  // The buffer added into: through earlier accumulations into it, to the value that owns it.
  ValueId owner = acc;
  while (node(owner).op == Op::kAccumulate) owner = accumulate_args(node(owner)).acc;
  const Node& into = node(owner);
  const bool computed = into.op != Op::kInput && into.op != Op::kWeight && !aliases_input(into);
  TFM_CHECK(into.is_state || computed,
            "[accumulate] the accumulator must be a state input or a computed value");
  if (node(acc).shape != node(x).shape || node(acc).dtype != DType::f32 ||
      node(x).dtype != DType::f32) {
    const auto describe = [&](ValueId id) {
      return shape_str(node(id).shape) + " " + std::string(dtype_name(node(id).dtype));
    };
    throw Error("[accumulate] '" + node(acc).name + "' is " + describe(acc) +
                ", the value added is " + describe(x) + ": both must be f32 of one shape");
  }
  const bool is_state = into.is_state;
  const ValueId id = add_node(Op::kAccumulate, {acc, x}, node(acc).shape, node(acc).name);
  if (is_state) update_state(owner, id);
  return id;
}

ValueId Builder::cache_write(ValueId cache, ValueId update, ValueId slots) {
  const ValueId state = storage_of(graph_, cache);
  TFM_CHECK(node(state).is_state, "[cache_write] the cache must be a state input");
  graph::cache_write_shape("cache_write", node(cache).shape, node(update).shape, node(slots).shape);
  if (node(update).dtype != DType::f32) throw Error("[cache_write] the update must be f32");
  const DType dtype = node(cache).dtype;
  const ValueId id =
      add_node(Op::kCacheWrite, {cache, update, slots}, node(cache).shape, node(state).name);
  graph_.nodes.back().dtype = dtype;
  update_state(state, id);
  return id;
}

ValueId Builder::attention(ValueId q, ValueId k, ValueId v, ValueId mask, ValueId slots,
                           float scale, int64_t window) {
  // Its two products compute in the autocast dtype, as torch.autocast's
  // scaled_dot_product_attention.
  if (autocast_ != DType::f32) {
    for (ValueId* operand : {&q, &k, &v}) {
      if (node(*operand).dtype == DType::f32) *operand = cast(*operand, autocast_);
    }
  }
  const ValueId id = add_node(Op::kAttention, {q, k, v, mask, slots},
                              graph::attention_shape(node(q).shape, node(k).shape, node(v).shape,
                                                     node(mask).shape, node(slots).shape));
  graph_.nodes.back().scale = scale;
  graph_.nodes.back().window = window;
  return id;
}

ValueId Builder::moe_route(ValueId logits, int64_t top_k, bool normed) {
  if (node(logits).dtype != DType::f32) throw Error("[moe_route] router logits must be f32");
  const ValueId id =
      add_node(Op::kMoeRoute, {logits}, graph::moe_route_shape(node(logits).shape, top_k));
  graph_.nodes.back().top_k = top_k;
  graph_.nodes.back().normed = normed;
  return id;
}

ValueId Builder::moe_experts(ValueId x, ValueId routing, const std::vector<ValueId>& expert_weights,
                             int64_t first_expert) {
  std::vector<Shape> shapes;
  for (ValueId w : expert_weights) shapes.push_back(node(w).shape);
  const Shape shape =
      graph::moe_experts_shape(node(x).shape, node(routing).shape, shapes, first_expert);
  if (node(x).dtype != DType::f32 || node(routing).dtype != DType::f32) {
    throw Error("[moe_experts] x and routing must be f32");
  }
  std::vector<ValueId> inputs{x, routing};
  inputs.insert(inputs.end(), expert_weights.begin(), expert_weights.end());
  const ValueId id = add_node(Op::kMoeExperts, std::move(inputs), shape);
  graph_.nodes.back().start = first_expert;
  return id;
}

ValueId Builder::router_loss(ValueId loss_scale, ValueId mask, const std::vector<ValueId>& logits,
                             int64_t top_k, float coef) {
  std::vector<Shape> shapes;
  for (ValueId l : logits) {
    if (node(l).dtype != DType::f32) throw Error("[router_loss] router logits must be f32");
    shapes.push_back(node(l).shape);
  }
  std::vector<ValueId> inputs{loss_scale, mask};
  inputs.insert(inputs.end(), logits.begin(), logits.end());
  const ValueId id =
      add_node(Op::kRouterLoss, std::move(inputs),
               graph::router_loss_shape(node(loss_scale).shape, node(mask).shape, shapes, top_k));
  graph_.nodes.back().top_k = top_k;
  graph_.nodes.back().scale = coef;
  return id;
}

ValueId Builder::slice_seq(ValueId x, int64_t start, int64_t length) {
  const ValueId id =
      add_node(Op::kSliceSeq, {x}, graph::slice_seq_shape(node(x).shape, start, length));
  graph_.nodes.back().start = start;
  return id;
}

ValueId Builder::reshape(ValueId x, Shape shape) {
  if (shape_numel(shape) != shape_numel(node(x).shape)) {
    throw Error("[reshape] " + shape_str(node(x).shape) + " cannot become " + shape_str(shape));
  }
  const DType dtype = node(x).dtype;
  const ValueId id = add_node(Op::kReshape, {x}, std::move(shape));
  graph_.nodes.back().dtype = dtype;
  return id;
}

ValueId Builder::elementwise(const char* name, std::vector<ValueId> inputs,
                             ElementwiseProgram program) {
  Shape shape = node(inputs[0]).shape;
  for (ValueId in : inputs) shape = graph::elementwise_shape(name, shape, node(in).shape);
  const ValueId id = add_node(Op::kElementwise, std::move(inputs), std::move(shape), name);
  graph_.nodes.back().program = std::move(program);
  return id;
}

ValueId Builder::add(ValueId a, ValueId b) {
  return elementwise("add", {a, b}, {{{EwCode::kLoad, 0}, {EwCode::kLoad, 1}, {EwCode::kAdd}}});
}

ValueId Builder::mul(ValueId a, ValueId b) {
  return elementwise("mul", {a, b}, {{{EwCode::kLoad, 0}, {EwCode::kLoad, 1}, {EwCode::kMul}}});
}

ValueId Builder::silu(ValueId x) {
  return elementwise("silu", {x}, {{{EwCode::kLoad, 0}, {EwCode::kSilu}}});
}

ValueId Builder::scale(ValueId x, float factor) {
  return elementwise("scale", {x}, {{{EwCode::kLoad, 0}, {EwCode::kScale, 0, factor}}});
}

ValueId Builder::silu_grad(ValueId x, ValueId dy) {
  return elementwise("silu_grad", {x, dy},
                     {{{EwCode::kLoad, 0}, {EwCode::kLoad, 1}, {EwCode::kSiluGrad}}});
}

ValueId Builder::cast(ValueId x, DType dtype) {
  const auto made = casts_.find({x, dtype});
  if (made != casts_.end()) return made->second;
  const ValueId id = add_node(Op::kCast, {x}, node(x).shape, node(x).name);
  graph_.nodes.back().dtype = dtype;
  casts_.emplace(std::pair{x, dtype}, id);
  return id;
}

ValueId Builder::at_offset(Op op, ValueId x, int64_t start, Shape shape) {
  const DType dtype = node(x).dtype;
  const ValueId id = add_node(op, {x}, std::move(shape));
  graph_.nodes.back().start = start;
  graph_.nodes.back().dtype = dtype;
  return id;
}

ValueId Builder::view(ValueId x, int64_t start, Shape shape) {
  return at_offset(Op::kView, x, start, graph::view_shape(node(x).shape, start, shape));
}

ValueId Builder::pad(ValueId x, int64_t start, Shape shape) {
  return at_offset(Op::kPad, x, start, graph::pad_shape(node(x).shape, start, shape));
}

ValueId Builder::concat_rows(const std::vector<ValueId>& parts) {
  std::vector<Shape> shapes;
  for (ValueId p : parts) shapes.push_back(node(p).shape);
  const DType dtype = parts.empty() ? DType::f32 : node(parts[0]).dtype;
  for (ValueId p : parts) {
    if (node(p).dtype != dtype) throw Error("[concat_rows] parts of different dtypes");
  }
  const ValueId id = add_node(Op::kConcatRows, parts, graph::concat_rows_shape(shapes));
  graph_.nodes.back().dtype = dtype;
  return id;
}

ValueId Builder::reduce_rows(ValueId x) {
  return add_node(Op::kReduceRows, {x}, graph::reduce_rows_shape(node(x).shape));
}

ValueId Builder::argmax(ValueId x) {
  const ValueId id = add_node(Op::kArgmax, {x}, graph::argmax_shape(node(x).shape));
  graph_.nodes.back().dtype = DType::i32;
  return id;
}

ValueId Builder::collective(Op op, ValueId x, Shape shape,
                            std::shared_ptr<const CollectiveGroup> group) {
  const ValueId id = add_node(op, {x}, std::move(shape), node(x).name);
  graph_.nodes.back().dtype = node(x).dtype;
  graph_.nodes.back().group = std::move(group);
  return id;
}

ValueId Builder::all_reduce(ValueId x, std::shared_ptr<const CollectiveGroup> group) {
  return collective(Op::kAllReduce, x, node(x).shape, std::move(group));
}

ValueId Builder::all_gather(ValueId x, std::shared_ptr<const CollectiveGroup> group) {
  const Shape shape = graph::all_gather_shape(node(x).shape, group->size());
  return collective(Op::kAllGather, x, shape, std::move(group));
}

ValueId Builder::copy_to_group(ValueId x, std::shared_ptr<const CollectiveGroup> group) {
  return collective(Op::kCopyToGroup, x, node(x).shape, std::move(group));
}

ValueId Builder::gather_shards(ValueId x, std::shared_ptr<const CollectiveGroup> group) {
  const Shape shape = graph::gather_shards_shape(node(x).shape, group->size());
  return collective(Op::kGatherShards, x, shape, std::move(group));
}

ValueId Builder::reduce_scatter(ValueId x, std::shared_ptr<const CollectiveGroup> group) {
  const Shape shape = graph::reduce_scatter_shape(node(x).shape, group->size());
  return collective(Op::kReduceScatter, x, shape, std::move(group));
}

ValueId Builder::sum_over_replicas(ValueId x, int64_t ranks_per_replica,
                                   std::shared_ptr<const CollectiveGroup> group) {
  const ValueId id = collective(Op::kSumOverReplicas, x, node(x).shape, std::move(group));
  graph_.nodes.back().start = ranks_per_replica;
  return id;
}

ValueId Builder::cross_entropy_shard(ValueId logits, ValueId targets, int64_t first_id,
                                     int64_t vocab_size,
                                     std::shared_ptr<const CollectiveGroup> group) {
  Node like;
  like.start = first_id;
  like.vocab_size = vocab_size;
  like.group = std::move(group);
  return as_vocab_shard(cross_entropy(logits, targets), like);
}

ValueId Builder::as_vocab_shard(ValueId id, const Node& like) {
  Node& n = graph_.nodes[static_cast<size_t>(id)];
  n.shard = true;
  n.start = like.start;
  n.vocab_size = like.vocab_size;
  n.group = like.group;
  return id;
}

ValueId Builder::cross_entropy(ValueId logits, ValueId targets) {
  return add_node(Op::kCrossEntropy, {logits, targets},
                  graph::cross_entropy_shape(node(logits).shape, node(targets).shape));
}

ValueId Builder::embedding_grad(ValueId dy, ValueId ids, int64_t vocab) {
  return add_node(Op::kEmbeddingGrad, {dy, ids},
                  graph::embedding_grad_shape(node(dy).shape, node(ids).shape, vocab));
}

ValueId Builder::linear_grad_input(ValueId dy, ValueId w, DType dtype) {
  const ValueId id =
      add_node(Op::kLinearGradInput, {dy, w},
               graph::linear_grad_input_shape(node(dy).shape, node(w).shape), node(w).name);
  graph_.nodes.back().dtype = dtype;
  return id;
}

ValueId Builder::linear_grad_weight(ValueId dy, ValueId x) {
  return add_node(Op::kLinearGradWeight, {dy, x},
                  graph::linear_grad_weight_shape(node(dy).shape, node(x).shape));
}

ValueId Builder::rms_norm_grad_input(ValueId x, ValueId w, ValueId dy, float eps) {
  graph::elementwise_shape("rms_norm_grad_input", node(x).shape, node(dy).shape);
  const ValueId id = add_node(Op::kRmsNormGradInput, {x, w, dy},
                              graph::rms_norm_shape(node(x).shape, node(w).shape), node(w).name);
  graph_.nodes.back().eps = eps;
  return id;
}

ValueId Builder::rms_norm_grad_weight(ValueId x, ValueId dy, float eps) {
  const Shape& xs = graph::elementwise_shape("rms_norm_grad_weight", node(x).shape, node(dy).shape);
  const ValueId id = add_node(Op::kRmsNormGradWeight, {x, dy}, {xs.back()});
  graph_.nodes.back().eps = eps;
  return id;
}

ValueId Builder::rope_grad(ValueId dy, ValueId positions, ValueId inv_freq,
                           float attention_scaling) {
  const ValueId id =
      add_node(Op::kRopeGrad, {dy, positions, inv_freq},
               graph::rope_shape(node(dy).shape, node(positions).shape, node(inv_freq).shape));
  graph_.nodes.back().scale = attention_scaling;
  return id;
}

ValueId Builder::attention_grad(ValueId q, ValueId k, ValueId v, ValueId mask, ValueId slots,
                                ValueId dy, float scale, int64_t window) {
  graph::attention_shape(node(q).shape, node(k).shape, node(v).shape, node(mask).shape,
                         node(slots).shape);
  const ValueId id = add_node(
      Op::kAttentionGrad, {q, k, v, mask, slots, dy},
      graph::attention_grad_shape(node(q).shape, node(k).shape, node(v).shape, node(dy).shape));
  // Under autocast (bf16 q and dy) the gradients come out in bf16, as torch's
  // scaled_dot_product_attention's do.
  if (node(q).dtype == DType::bf16 && node(dy).dtype == DType::bf16) {
    graph_.nodes.back().dtype = DType::bf16;
  }
  graph_.nodes.back().scale = scale;
  graph_.nodes.back().window = window;
  return id;
}

ValueId Builder::exchange_node(Op op, std::vector<ValueId> inputs, Shape shape, int64_t top_k,
                               int64_t ranks) {
  const ValueId id = add_node(op, std::move(inputs), std::move(shape));
  graph_.nodes.back().top_k = top_k;
  graph_.nodes.back().expert_ranks = ranks;
  return id;
}

ValueId Builder::moe_dispatch(ValueId x, ValueId routing, int64_t top_k, int64_t ranks) {
  return exchange_node(Op::kMoeDispatch, {x, routing},
                       graph::moe_dispatch_shape(node(x).shape, node(routing).shape, top_k, ranks),
                       top_k, ranks);
}

ValueId Builder::moe_slots(ValueId routing, int64_t top_k, int64_t ranks) {
  return exchange_node(Op::kMoeSlots, {routing},
                       graph::moe_slots_shape(node(routing).shape, top_k, ranks), top_k, ranks);
}

ValueId Builder::moe_combine(ValueId y, ValueId routing, int64_t top_k, int64_t ranks) {
  return exchange_node(Op::kMoeCombine, {y, routing},
                       graph::moe_combine_shape(node(y).shape, node(routing).shape, top_k, ranks),
                       top_k, ranks);
}

ValueId Builder::all_to_all(ValueId x, std::shared_ptr<const CollectiveGroup> group) {
  const Shape shape = graph::all_to_all_shape(node(x).shape, group->size());
  return collective(Op::kAllToAll, x, shape, std::move(group));
}

ValueId Builder::moe_grad(const Node& forward, ValueId dy) {
  if (node(dy).shape != forward.shape) {
    throw Error(std::string("[") + op_name(forward.op) + "] the gradient " +
                shape_str(node(dy).shape) + " must match the output " + shape_str(forward.shape));
  }
  std::vector<ValueId> inputs = forward.inputs;
  inputs.push_back(dy);
  int64_t numel = 0;
  Op op = Op::kMoeRouteGrad;
  switch (forward.op) {
    case Op::kMoeRoute:
      numel = shape_numel(forward.shape);
      break;
    case Op::kMoeExperts:
      op = Op::kMoeExpertsGrad;
      for (ValueId in : forward.inputs) numel += shape_numel(node(in).shape);
      break;
    case Op::kRouterLoss:
      op = Op::kRouterLossGrad;
      for (size_t i = 2; i < forward.inputs.size(); ++i)
        numel += shape_numel(node(forward.inputs[i]).shape);
      break;
    case Op::kMoeDispatch:
      op = Op::kMoeDispatchGrad;
      numel = shape_numel(node(forward.inputs[0]).shape);
      break;
    case Op::kMoeCombine:
      op = Op::kMoeCombineGrad;
      for (ValueId in : forward.inputs) numel += shape_numel(node(in).shape);
      break;
    default:
      throw Error(std::string("[moe_grad] not a mixture-of-experts op: ") + op_name(forward.op));
  }
  const ValueId id = add_node(op, std::move(inputs), {numel});
  graph_.nodes.back().top_k = forward.top_k;
  graph_.nodes.back().normed = forward.normed;
  graph_.nodes.back().scale = forward.scale;
  graph_.nodes.back().start = forward.start;
  graph_.nodes.back().expert_ranks = forward.expert_ranks;
  return id;
}

ValueId Builder::cross_entropy_grad(ValueId logits, ValueId targets, ValueId d_loss,
                                    bool in_place) {
  graph::cross_entropy_shape(node(logits).shape, node(targets).shape);
  if (node(d_loss).shape != Shape{1}) {
    throw Error("[cross_entropy_grad] d loss must be [1], got " + shape_str(node(d_loss).shape));
  }
  if (in_place && (aliases_input(node(logits)) || node(logits).op == Op::kInput ||
                   node(logits).op == Op::kWeight)) {
    throw Error("[cross_entropy_grad] can only write over logits that own their buffer");
  }
  const ValueId id = add_node(Op::kCrossEntropyGrad, {logits, targets, d_loss}, node(logits).shape);
  // Written over bf16 logits (autocast's), the gradient is bf16 too: what the backward products
  // read, rounded once.
  if (in_place) graph_.nodes.back().dtype = node(logits).dtype;
  graph_.nodes.back().in_place = in_place;
  return id;
}

ValueId Builder::adamw(ValueId param, ValueId grad, ValueId exp_avg, ValueId exp_avg_sq,
                       ValueId scalars, bool decays) {
  const Shape shape = adamw_shape(node(param).shape, node(grad).shape, node(exp_avg).shape,
                                  node(exp_avg_sq).shape, node(scalars).shape);
  for (ValueId v : {param, grad, exp_avg, exp_avg_sq, scalars}) {
    if (node(v).dtype != DType::f32) throw Error("[adamw] every operand must be f32");
  }
  const ValueId id =
      add_node(Op::kAdamW, {param, grad, exp_avg, exp_avg_sq, scalars}, shape, node(param).name);
  graph_.nodes.back().decays = decays;
  return id;
}

ValueId Builder::sum_squares(ValueId x) {
  if (node(x).dtype != DType::f32) throw Error("[sum_squares] x must be f32");
  return add_node(Op::kSumSquares, {x}, {1}, node(x).name);
}

ValueId Builder::updated(ValueId state, std::vector<ValueId> writers) {
  TFM_CHECK(node(state).is_state, "[updated] not a state input");
  const ValueId id = add_node(Op::kView, {}, node(state).shape, node(state).name);
  graph_.nodes.back().dtype = node(state).dtype;
  set_args(graph_.nodes.back(), ViewArgs{state, std::move(writers)});
  update_state(state, id);
  return id;
}

}  // namespace tfm::graph
