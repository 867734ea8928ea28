// The StableHLO emitter's state and its ops, one method an op (stablehlo.cc: inference ops and
// the module; stablehlo_training.cc: the backward ops and the loss; stablehlo_optimizer.cc:
// AdamW, the gradient norm's sum of squares and the writes into parts of a state). Internal to
// backends/pjrt.
#pragma once

#include <map>
#include <optional>
#include <utility>
#include <vector>

#include "backends/pjrt/mlir_writer.h"
#include "backends/pjrt/stablehlo.h"
#include "graph/graph.h"

namespace tfm::pjrt {

inline int64_t rank_of(const Value& v) { return static_cast<int64_t>(v.shape.size()); }

inline std::vector<int64_t> leading_dims(int64_t count) {
  std::vector<int64_t> dims;
  for (int64_t i = 0; i < count; ++i) dims.push_back(i);
  return dims;
}

class Emitter {
 public:
  Emitter(const graph::Graph& graph, const Placements& placements, const Partitions& partitions)
      : graph_(graph),
        placements_(placements),
        partitions_(partitions),
        values_(graph.nodes.size()) {}

  Module emit();

 private:
  const graph::Node& node(graph::ValueId id) const { return graph_.nodes[static_cast<size_t>(id)]; }
  const Value& value(graph::ValueId id) const { return values_[static_cast<size_t>(id)]; }
  Value f32(graph::ValueId id) { return w_.convert(value(id), "f32"); }
  Value as_node_type(const Value& v, const graph::Node& n) {
    return w_.convert(v, element_type(n.dtype));
  }

  Value emit_node(const graph::Node& n);
  Value embedding(const graph::Node& n);
  Value linear(const graph::Node& n);
  Value rms_norm(const Value& x32, graph::ValueId weight, float eps);
  Value row_mean(const Value& x);                     // the mean over the last axis
  Value per_row(const Value& v, const Shape& shape);  // a row value broadcast over `shape`
  Value inverse_rms(const Value& x, float eps);       // 1 / sqrt(mean(x^2) + eps), per row
  Value rope(const graph::Node& n);
  // x [B, S, H, D] rotated by `sign` x the angles positions x inv_freq, times `scale`.
  Value rotate(const Value& x, graph::ValueId positions, graph::ValueId inv_freq, float scale,
               double sign);
  Value cache_write(const graph::Node& n);
  Value attention(const graph::Node& n);
  // Attention's probabilities [B, Hkv, S, G, L] (each visible row summing to 1, an empty row
  // zeros) of q grouped as [B, S, Hkv, G, D]; `window` > 0: sliding-window attention.
  Value attention_probabilities(const Value& grouped_q, const Value& k, graph::ValueId mask,
                                graph::ValueId slots, float scale, int64_t window);
  Value elementwise(const graph::Node& n);
  Value argmax(const graph::Node& n);
  Value multiply_by(const Value& x, double factor);
  Value sigmoid(const Value& x);
  Value sum_to_rows(const Value& x);  // the sum over every axis but the last: [N]

  // Training (stablehlo_training.cc).
  Value embedding_grad(const graph::Node& n);
  Value linear_grad_input(const graph::Node& n);
  Value linear_grad_weight(const graph::Node& n);
  Value rms_norm_grad_input(const graph::Node& n);
  Value rms_norm_grad_weight(const graph::Node& n);
  Value attention_grad(const graph::Node& n);
  Value cross_entropy(const graph::Node& n);
  Value cross_entropy_grad(const graph::Node& n);
  Value view(const graph::Node& n);
  Value pad(const graph::Node& n);
  Value concat_rows(const graph::Node& n);
  Value log_sum_exp(const Value& logits);  // each row's of f32 logits [R, V]: [R]
  // A loss's logits as f32 rows [R, V], its targets [R], which rows count (pred [R]: the target
  // is not kIgnoreIndex) and where each row's target is (pred [R, V]).
  struct LossRows {
    Value logits, targets, counted, is_target;
  };
  LossRows loss_rows(graph::ValueId logits, graph::ValueId targets);
  void refuse_vocabulary_shard(const graph::Node& n, const char* what);
  Value flat(const Value& x);  // x as one axis

  // The module's arguments and what the nodes placed in shared buffers read of them.
  std::vector<std::vector<graph::ValueId>> group_arguments() const;
  // Its results after the outputs: each updated argument's new value (module.updated_arguments
  // gets which); `aliased` gets, for each of them, the index of the result that replaces it.
  std::vector<Value> updated_arguments(const std::vector<Value>& arguments, Module& module,
                                       std::map<size_t, size_t>& aliased);
  // The function's signature: its arguments and results with their attributes.
  std::string signature(const Module& module, const std::vector<Value>& arguments,
                        const std::vector<Value>& results,
                        const std::map<size_t, size_t>& aliased) const;
  // `parts` (element offset, values) written over `base` flat, in order.
  Value written_over(const Value& base, const std::vector<std::pair<int64_t, Value>>& parts);

  // Mixture of experts (stablehlo_moe.cc), over [T, E] router logits.
  Value row_sum(const Value& x);  // each row's sum, broadcast over the row
  Value softmax_rows(const Value& logits);
  Value chosen_experts(const Value& logits, int64_t top_k);  // pred [T, E]
  Value routing_weights(const Value& logits, int64_t top_k, bool normed);
  Value moe_route(const graph::Node& n);
  Value moe_route_grad(const graph::Node& n);
  struct ExpertRows {
    Value gate, up, act, down;
  };
  ExpertRows expert_rows(const Value& x, graph::ValueId gate_w, graph::ValueId up_w,
                         graph::ValueId down_w);
  struct ExpertColumn {
    Value weight, routed;  // the routing column over a row's shape, and where it is not 0
  };
  ExpertColumn expert_column(const Value& routing, int64_t e, const Shape& shape);
  Value moe_experts(const graph::Node& n);
  Value moe_experts_grad(const graph::Node& n);
  struct RouterShares {
    std::vector<Value> probabilities;      // each layer's softmax [T, E]
    Value kept_rows;                       // the mask as f32 over [T, E]
    Value kept;                            // the rows counted, all layers: a scalar
    Value chosen_share, mean_probability;  // [E]
  };
  RouterShares router_shares(const graph::Node& n, size_t layers);
  Value router_loss(const graph::Node& n);
  Value router_loss_grad(const graph::Node& n);

  // Optimizer (stablehlo_optimizer.cc). An op that writes in place into a view of a state
  // (kAdamW into its parameters' and moments' parts) records the part's new values; a state is
  // read (current) with the writes made so far, as a kernel backend's in-place steps leave it.
  Value adamw(const graph::Node& n);
  Value sum_squares(const graph::Node& n);
  // The state input `id` is a view of, and the view's element offset in it.
  std::optional<std::pair<graph::ValueId, int64_t>> state_part(graph::ValueId id) const;
  void record_write(graph::ValueId written, const Value& values, const graph::Node& writer);
  Value current(graph::ValueId id);

  const graph::Graph& graph_;
  const Placements& placements_;
  const Partitions& partitions_;
  std::vector<Value> values_;
  std::map<graph::ValueId, std::vector<std::pair<int64_t, Value>>> writes_;  // state -> parts
  MlirWriter w_;
};

}  // namespace tfm::pjrt
