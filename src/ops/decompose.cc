#include "ops/decompose.h"

#include <map>

#include "graph/builder.h"
#include "graph/op_args.h"

namespace tfm::ops {
namespace {

using graph::Builder;
using graph::Node;
using graph::Op;
using graph::ValueId;

// Rebuilds a graph node by node, each fused node as the basic ops it stands for.
class Decomposer {
 public:
  graph::Graph run(const graph::Graph& fused) {
    for (size_t i = 0; i < fused.nodes.size(); ++i) {
      made_.push_back(decompose(fused.nodes[i]));
    }
    graph::Graph out = b_.finish();
    for (ValueId o : fused.outputs) out.outputs.push_back(at(o));
    out.updates.clear();
    for (const graph::StateUpdate& u : fused.updates)
      out.updates.push_back({at(u.state), at(u.value)});
    return out;
  }

 private:
  // The new id of an old value; a state a fused step wrote reads as what that step left in it.
  ValueId at(ValueId old) const {
    const ValueId v = made_[static_cast<size_t>(old)];
    const auto written = cache_.find(v);
    return written != cache_.end() ? written->second : v;
  }

  ValueId normed(ValueId x, ValueId norm, float eps) {
    return norm >= 0 ? b_.rms_norm(at(x), at(norm), eps) : at(x);
  }

  ValueId decompose(const Node& n) {
    switch (n.op) {
      case Op::kInput:
        return n.is_state ? b_.state(n.name, n.shape, n.dtype) : b_.input(n.name, n.shape, n.dtype);
      case Op::kWeight:
        return b_.weight(n.name, n.constant);
      case Op::kLinear: {
        const graph::LinearArgs a = graph::linear_args(n);
        if (a.residual < 0) break;
        const ValueId y = b_.linear(at(a.x), at(a.w), a.bias >= 0 ? at(a.bias) : -1);
        return b_.add(y, at(a.residual));
      }
      case Op::kQkvLinear: {
        const graph::QkvLinearArgs a = graph::qkv_linear_args(n);
        const ValueId h = normed(a.x, a.norm, n.eps);
        std::vector<ValueId> blocks;
        for (size_t i = 0; i < 3; ++i) {
          const ValueId y = b_.linear(h, at(a.w[i]), a.bias[i] >= 0 ? at(a.bias[i]) : -1);
          blocks.push_back(b_.reshape(y, {shape_numel(b_.shape(y))}));
        }
        return b_.concat_rows(blocks);
      }
      case Op::kGatedLinear: {
        const graph::GatedLinearArgs a = graph::gated_linear_args(n);
        const ValueId h = normed(a.x, a.norm, n.eps);
        const ValueId gate = b_.linear(h, at(a.w_gate), a.bias_gate >= 0 ? at(a.bias_gate) : -1);
        const ValueId up = b_.linear(h, at(a.w_up), a.bias_up >= 0 ? at(a.bias_up) : -1);
        return b_.mul(b_.silu(gate), up);
      }
      case Op::kRope: {
        const graph::RopeArgs a = graph::rope_args(n);
        if (a.norm < 0) break;
        return b_.rope(normed(a.x, a.norm, n.eps), at(a.positions), at(a.inv_freq), n.scale);
      }
      case Op::kPrepareAttention: {
        const graph::PrepareAttentionArgs a = graph::prepare_attention_args(n);
        const auto rotated = [&](ValueId x, ValueId norm) {
          return b_.rope(normed(x, norm, n.eps), at(a.positions), at(a.inv_freq), n.scale);
        };
        const ValueId q = rotated(a.q, a.q_norm);
        const ValueId k = rotated(a.k, a.k_norm);
        // The caches hold the new rows from here on: later reads of them see the writes.
        const ValueId k_cache = at(a.k_cache), v_cache = at(a.v_cache);
        cache_[made_[static_cast<size_t>(a.k_cache)]] = b_.cache_write(k_cache, k, at(a.slots));
        cache_[made_[static_cast<size_t>(a.v_cache)]] =
            b_.cache_write(v_cache, at(a.v), at(a.slots));
        return q;
      }
      default:
        break;
    }
    std::vector<ValueId> inputs;
    for (ValueId in : n.inputs) inputs.push_back(at(in));
    return b_.recompute(n, std::move(inputs));
  }

  Builder b_;
  std::vector<ValueId> made_;         // old id -> new id
  std::map<ValueId, ValueId> cache_;  // a cache's new id -> its value after the fused writes so far
};

}  // namespace

graph::Graph decompose(const graph::Graph& fused) { return Decomposer().run(fused); }

}  // namespace tfm::ops
