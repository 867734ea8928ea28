#include "backends/cuda/attention_fusion.h"

#include <algorithm>
#include <array>
#include <optional>
#include <utility>

#include "graph/effects.h"
#include "graph/op_args.h"

namespace tfm::cuda {

using namespace graph;
namespace {

// The arena bytes [begin, end) a value spans, through views and reshapes to the node that owns
// its buffer; {-1, -1} for one outside the arena (inputs, weights, state).
std::pair<int64_t, int64_t> arena_span(const fusion::Plan& plan, ValueId id) {
  const Node& value = plan.graph.nodes[static_cast<size_t>(id)];
  const auto bytes = static_cast<int64_t>(shape_numel(value.shape) * dtype_size(value.dtype));
  int64_t offset = 0;
  for (;;) {
    const Node& n = plan.graph.nodes[static_cast<size_t>(id)];
    if (n.op == Op::kView) {
      offset += n.start * static_cast<int64_t>(dtype_size(n.dtype));
    } else if (n.op != Op::kReshape) {
      break;
    }
    id = operand(n);
  }
  const int64_t base = plan.offset[static_cast<size_t>(id)];
  if (base < 0) return {-1, -1};
  return {base + offset, base + offset + bytes};
}

// Whether the token's q, k and v rows outlive the prepare step in this plan, as far as attention
// needs them (see prepare_folds_into_attention).
bool fused_inputs_survive(const fusion::Plan& plan, ValueId prepare, ValueId attention) {
  const auto& order = plan.schedule;
  const auto from = std::find(order.begin(), order.end(), prepare);
  const auto to = std::find(order.begin(), order.end(), attention);
  if (from == order.end() || to == order.end() || to < from) return false;
  for (auto it = from + 1; it != to; ++it) {
    const Op op = plan.graph.nodes[static_cast<size_t>(*it)].op;
    if (op != Op::kView && op != Op::kReshape) return false;
  }
  const auto out = arena_span(plan, attention);
  const PrepareAttentionArgs p =
      prepare_attention_args(plan.graph.nodes[static_cast<size_t>(prepare)]);
  const std::array<ValueId, 3> token{p.q, p.k, p.v};
  for (size_t i = 0; i < 3; ++i) {
    const auto read = arena_span(plan, token[i]);
    const bool overlap =
        read.first >= 0 && out.first >= 0 && read.first < out.second && out.first < read.second;
    if (overlap && !(i == 0 && read == out)) return false;
  }
  return true;
}

}  // namespace

bool prepare_folds_into_attention(const Graph& graph, ValueId prepare, const fusion::Plan* plan) {
  const Node& p = graph.nodes[static_cast<size_t>(prepare)];
  if (p.op != Op::kPrepareAttention || p.shape[1] != 1 || p.dtype != DType::f32) return false;
  for (ValueId out : graph.outputs) {
    if (out == prepare) return false;
  }
  // Besides attention, only the caches' views ordered after the step read it.
  std::optional<size_t> reader;
  for (size_t i = 0; i < graph.nodes.size(); ++i) {
    const Node& n = graph.nodes[i];
    if (n.op == Op::kView && view_args(n).after == std::vector<ValueId>{prepare}) continue;
    for (ValueId in : n.inputs) {
      if (in != prepare) continue;
      if (reader && *reader != i) return false;
      reader = i;
    }
  }
  if (!reader) return false;
  const Node& reads = graph.nodes[*reader];
  if (reads.op != Op::kAttention) return false;
  const AttentionArgs a = attention_args(reads);
  const PrepareAttentionArgs prep = prepare_attention_args(p);
  const bool matches = a.q == prepare && storage_of(graph, a.k) == prep.k_cache &&
                       storage_of(graph, a.v) == prep.v_cache && a.slots == prep.slots;
  return matches &&
         (plan == nullptr || fused_inputs_survive(*plan, prepare, static_cast<ValueId>(*reader)));
}

}  // namespace tfm::cuda
