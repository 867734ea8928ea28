// What models call to describe a computation in basic ops. Each call checks shapes (src/ops/shapes)
// and adds one node; nothing runs until a backend compiles the graph. The fused ops a kernel
// backend runs are made by its passes (src/fusion), never here.
#pragma once

#include <array>
#include <functional>
#include <map>
#include <string>
#include <utility>

#include "graph/graph.h"

namespace tfm::graph {

class Builder {
 public:
  Builder() = default;
  explicit Builder(Graph graph) : graph_(std::move(graph)) {}  // to extend a graph (autodiff)

  ValueId input(std::string name, Shape shape, DType dtype);
  // A caller-owned buffer, e.g. a KV cache. `bound`: the tensor every run will be given for it,
  // where known when the graph is built (Node::constant).
  ValueId state(std::string name, Shape shape, DType dtype, Tensor bound = {});
  ValueId weight(std::string name, Tensor tensor);

  ValueId embedding(ValueId table, ValueId ids);
  // `table` holds ids [first_id, first_id + rows) of a vocabulary split across ranks.
  ValueId embedding_shard(ValueId table, ValueId ids, int64_t first_id);
  // x @ w^T + bias.
  ValueId linear(ValueId x, ValueId w, ValueId bias = -1);
  // linear(x, w, bias) whose output, under autocast and without a bias, comes out in the autocast
  // dtype, as torch.autocast's products do: for values that only steps widening what they load
  // read (elementwise chains, the loss).
  ValueId autocast_linear(ValueId x, ValueId w, ValueId bias = -1);
  ValueId rms_norm(ValueId x, ValueId w, float eps);
  ValueId rope(ValueId x, ValueId positions, ValueId inv_freq, float attention_scaling);
  // acc += x, in place (acc: an f32 value of x's shape, a state input or one that nothing reads
  // after this); on a state input the result is the state's update (Graph::updates), so it runs
  // though nothing reads it.
  ValueId accumulate(ValueId acc, ValueId x);
  // The KV cache `cache` (a state input, or its last update) with `update`'s tokens written at
  // `slots`, in place: the state's update, and what attention then reads.
  ValueId cache_write(ValueId cache, ValueId update, ValueId slots);
  // Under autocast, q, k and v are read through casts to the autocast dtype.
  // `window` > 0: sliding-window attention (Op::kAttention).
  ValueId attention(ValueId q, ValueId k, ValueId v, ValueId mask, ValueId slots, float scale,
                    int64_t window = 0);
  // Mixture of experts (Op::kMoeRoute, kMoeExperts, kRouterLoss): `expert_weights` holds each
  // expert's gate, up and down weights in turn; `coef` scales the load-balancing loss.
  ValueId moe_route(ValueId logits, int64_t top_k, bool normed);
  // `first_expert`: the routing column of the first expert given (expert parallelism).
  ValueId moe_experts(ValueId x, ValueId routing, const std::vector<ValueId>& expert_weights,
                      int64_t first_expert = 0);
  ValueId router_loss(ValueId loss_scale, ValueId mask, const std::vector<ValueId>& logits,
                      int64_t top_k, float coef);
  // Experts split over `ranks` ranks that exchange rows (Op::kMoeDispatch, kMoeSlots,
  // kMoeCombine, kAllToAll).
  ValueId moe_dispatch(ValueId x, ValueId routing, int64_t top_k, int64_t ranks);
  ValueId moe_slots(ValueId routing, int64_t top_k, int64_t ranks);
  ValueId moe_combine(ValueId y, ValueId routing, int64_t top_k, int64_t ranks);
  ValueId all_to_all(ValueId x, std::shared_ptr<const CollectiveGroup> group);
  ValueId slice_seq(ValueId x, int64_t start, int64_t length);
  ValueId reshape(ValueId x, Shape shape);
  ValueId add(ValueId a, ValueId b);
  ValueId mul(ValueId a, ValueId b);
  ValueId silu(ValueId x);
  ValueId scale(ValueId x, float factor);
  ValueId view(ValueId x, int64_t start, Shape shape);
  ValueId pad(ValueId x, int64_t start, Shape shape);
  ValueId concat_rows(const std::vector<ValueId>& parts);
  ValueId reduce_rows(ValueId x);
  ValueId argmax(ValueId x);
  ValueId all_reduce(ValueId x, std::shared_ptr<const CollectiveGroup> group);
  ValueId all_gather(ValueId x, std::shared_ptr<const CollectiveGroup> group);
  ValueId copy_to_group(ValueId x, std::shared_ptr<const CollectiveGroup> group);
  ValueId gather_shards(ValueId x, std::shared_ptr<const CollectiveGroup> group);
  ValueId reduce_scatter(ValueId x, std::shared_ptr<const CollectiveGroup> group);
  ValueId sum_over_replicas(ValueId x, int64_t ranks_per_replica,
                            std::shared_ptr<const CollectiveGroup> group);
  // Cross-entropy of logits that are columns [first_id, first_id + V) of a vocabulary of
  // `vocab_size` ids split over `group` (columns past vocab_size are padding): every rank gets the
  // whole loss.
  ValueId cross_entropy_shard(ValueId logits, ValueId targets, int64_t first_id, int64_t vocab_size,
                              std::shared_ptr<const CollectiveGroup> group);
  ValueId cross_entropy(ValueId logits, ValueId targets);
  ValueId cast(ValueId x, DType dtype);
  // One AdamW step of `param` in place (the moments too); `scalars` the step's [kAdamWScalars].
  ValueId adamw(ValueId param, ValueId grad, ValueId exp_avg, ValueId exp_avg_sq, ValueId scalars,
                bool decays);
  ValueId sum_squares(ValueId x);
  // State input `state` as `writers` (steps writing into views of it in place) left it: its
  // update (Graph::updates).
  ValueId updated(ValueId state, std::vector<ValueId> writers);

  // torch.autocast for matrix products: from here on, every matrix weight and every linear's input
  // is read through a cast to `dtype` (and so are the gradients the backward products read), while
  // the weights themselves, the other activations and all gradients stay f32 (bf16 training: f32
  // master weights, bf16 products accumulated in f32).
  void autocast(DType dtype) { autocast_ = dtype; }
  // FSDP: from here on, every weight is this rank's block of rows of the parameter, gathered over
  // `group` where it is used (and again where the backward pass uses it); the weights named in
  // `unpadded_rows` are cut to that many rows after the gather (their last blocks are padded).
  // `whole`: the names of weights each rank holds whole instead (experts split over the ranks).
  void shard_weights(std::shared_ptr<const CollectiveGroup> group,
                     std::map<std::string, int64_t> unpadded_rows = {},
                     std::function<bool(const std::string&)> whole = {}) {
    weight_shards_ = std::move(group);
    unpadded_rows_ = std::move(unpadded_rows);
    whole_weights_ = std::move(whole);
  }

  // The backward ops autodiff emits (see Op).
  ValueId silu_grad(ValueId x, ValueId dy);
  ValueId embedding_grad(ValueId dy, ValueId ids, int64_t vocab);
  // dx in `dtype`: f32, or bf16 where what reads it widens it (ops::linear_backward).
  ValueId linear_grad_input(ValueId dy, ValueId w, DType dtype = DType::f32);
  ValueId linear_grad_weight(ValueId dy, ValueId x);
  ValueId rms_norm_grad_input(ValueId x, ValueId w, ValueId dy, float eps);
  ValueId rms_norm_grad_weight(ValueId x, ValueId dy, float eps);
  ValueId rope_grad(ValueId dy, ValueId positions, ValueId inv_freq, float attention_scaling);
  ValueId attention_grad(ValueId q, ValueId k, ValueId v, ValueId mask, ValueId slots, ValueId dy,
                         float scale, int64_t window = 0);
  // The gradient of a kMoeRoute, kMoeExperts, kRouterLoss, kMoeDispatch or kMoeCombine node
  // `forward` (its inputs followed by dy; the shape each Op's comment gives).
  ValueId moe_grad(const Node& forward, ValueId dy);
  // `in_place`: written over `logits`, in their dtype, which nothing may read afterwards.
  ValueId cross_entropy_grad(ValueId logits, ValueId targets, ValueId d_loss,
                             bool in_place = false);
  // A node computing what `like` computes, from `inputs` (values equal to like's own inputs): a
  // forward value computed again in the backward pass.
  ValueId recompute(const Node& like, std::vector<ValueId> inputs);
  // Marks a just-made node as working on `like`'s vocabulary shard (start, vocab_size, group).
  ValueId as_vocab_shard(ValueId id, const Node& like);

  const Node& node(ValueId id) const;
  const Shape& shape(ValueId id) const { return node(id).shape; }
  void output(ValueId id) { graph_.outputs.push_back(id); }
  const Graph& graph() const { return graph_; }
  Graph finish() { return std::move(graph_); }

 private:
  ValueId add_node(Op op, std::vector<ValueId> inputs, Shape shape, std::string name = {});
  // Records that `value` is what state input `state` holds after the run (so far).
  void update_state(ValueId state, ValueId value);
  ValueId elementwise(const char* name, std::vector<ValueId> inputs, ElementwiseProgram program);
  ValueId collective(Op op, ValueId x, Shape shape, std::shared_ptr<const CollectiveGroup> group);
  // A node of an exchange of rows between expert-parallel ranks (Op::kMoeDispatch ...).
  ValueId exchange_node(Op op, std::vector<ValueId> inputs, Shape shape, int64_t top_k,
                        int64_t ranks);
  // A view or pad node: `shape`, x's elements from element `start` on, x's dtype.
  ValueId at_offset(Op op, ValueId x, int64_t start, Shape shape);

  Graph graph_;
  DType autocast_ = DType::f32;
  std::shared_ptr<const CollectiveGroup> weight_shards_;
  std::map<std::string, int64_t> unpadded_rows_;
  std::function<bool(const std::string&)> whole_weights_;
  // Every cast made so far, by (value, dtype): products that share an input (q, k and v of one
  // normed row) read one copy, and the backward pass computes that copy again once.
  std::map<std::pair<ValueId, DType>, ValueId> casts_;
};

}  // namespace tfm::graph
