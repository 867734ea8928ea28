// Shape rules of every op: what a node's output shape is, or an Error naming the op and the
// offending shapes. The builder calls these; backends trust them.
#pragma once

#include <vector>

#include "tfm/tensor.h"

namespace tfm::graph {

Shape embedding_shape(const Shape& table, const Shape& ids);
Shape linear_shape(const Shape& x, const Shape& w, const Shape* bias);
Shape rms_norm_shape(const Shape& x, const Shape& w);
Shape rope_shape(const Shape& x, const Shape& positions, const Shape& inv_freq);
// `op`: the op that writes the cache, for the error.
Shape cache_write_shape(const char* op, const Shape& cache, const Shape& update,
                        const Shape& slots);
Shape attention_shape(const Shape& q, const Shape& k, const Shape& v, const Shape& mask,
                      const Shape& slots);
Shape slice_seq_shape(const Shape& x, int64_t start, int64_t length);
Shape elementwise_shape(const char* op, const Shape& a, const Shape& b);
Shape view_shape(const Shape& x, int64_t start, const Shape& shape);
Shape pad_shape(const Shape& x, int64_t start, const Shape& shape);
Shape concat_rows_shape(const std::vector<Shape>& parts);
Shape reduce_rows_shape(const Shape& x);
Shape argmax_shape(const Shape& x);
Shape all_gather_shape(const Shape& x, int group_size);
Shape gather_shards_shape(const Shape& x, int group_size);
Shape reduce_scatter_shape(const Shape& x, int group_size);
Shape cross_entropy_shape(const Shape& logits, const Shape& targets);
// Mixture of experts (see Op::kMoeRoute, kMoeExperts, kRouterLoss). `weights`: each expert's gate,
// up and down weights in turn.
Shape moe_route_shape(const Shape& logits, int64_t top_k);
Shape moe_experts_shape(const Shape& x, const Shape& routing, const std::vector<Shape>& weights,
                        int64_t first_expert);
// The slots an exchange of experts over `ranks` ranks gives each rank (Op::kMoeDispatch).
int64_t moe_slots_per_rank(const Shape& routing, int64_t top_k, int64_t ranks);
Shape moe_dispatch_shape(const Shape& x, const Shape& routing, int64_t top_k, int64_t ranks);
Shape moe_slots_shape(const Shape& routing, int64_t top_k, int64_t ranks);
Shape moe_combine_shape(const Shape& y, const Shape& routing, int64_t top_k, int64_t ranks);
Shape all_to_all_shape(const Shape& x, int group_size);
Shape router_loss_shape(const Shape& loss_scale, const Shape& mask,
                        const std::vector<Shape>& logits, int64_t top_k);
// AdamW's operands: param, grad and both moments of one shape, f32 each checked by the builder.
Shape adamw_shape(const Shape& param, const Shape& grad, const Shape& exp_avg,
                  const Shape& exp_avg_sq, const Shape& scalars);
// Backward ops: the gradient has the shape of what it is the gradient of; these check the operands.
Shape embedding_grad_shape(const Shape& dy, const Shape& ids, int64_t vocab);
Shape linear_grad_input_shape(const Shape& dy, const Shape& w);
Shape linear_grad_weight_shape(const Shape& dy, const Shape& x);
// [dq | dk | dv] as one flat buffer.
Shape attention_grad_shape(const Shape& q, const Shape& k, const Shape& v, const Shape& dy);

}  // namespace tfm::graph
