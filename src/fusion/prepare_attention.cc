// fuse_prepare_attention (passes.h): what attention reads of a step's new tokens, in one step.
#include <algorithm>
#include <vector>

#include "fusion/passes.h"
#include "fusion/rewrite.h"
#include "graph/effects.h"
#include "graph/op_args.h"

namespace tfm::fusion {

using namespace graph;  // the IR this layer rewrites

namespace {

// RoPE of f32 values that the fused step can take: normed (one per-head norm folded in) or not.
bool fusable_rope(const Node& n) { return n.op == Op::kRope && n.dtype == DType::f32; }

// Is `v` a state input itself (a cache the step writes where it lives)?
bool state_input(const Graph& graph, ValueId v) {
  const Node& n = graph.nodes[static_cast<size_t>(v)];
  return n.op == Op::kInput && n.is_state;
}

// Does a node after `from` and before `to`, other than `skip`, read one of `buffers`?
bool read_between(const Graph& graph, size_t from, size_t to, const std::vector<ValueId>& buffers,
                  const std::vector<ValueId>& skip) {
  for (size_t i = from + 1; i < to; ++i) {
    if (std::find(skip.begin(), skip.end(), static_cast<ValueId>(i)) != skip.end()) continue;
    for (ValueId in : graph.nodes[i].inputs) {
      const ValueId buffer = storage_of(graph, in);
      if (std::find(buffers.begin(), buffers.end(), buffer) != buffers.end()) return true;
    }
  }
  return false;
}

}  // namespace

void fuse_prepare_attention(Graph& graph, const Target&) {
  if (computes_gradients(graph)) return;
  const std::vector<bool> none(graph.nodes.size(), false);
  const std::vector<int> uses = count_uses(graph, none);
  const std::vector<std::vector<ValueId>> readers = readers_of(graph, none);
  const auto node = [&](ValueId v) -> Node& { return graph.nodes[static_cast<size_t>(v)]; };
  for (size_t a = 0; a < graph.nodes.size(); ++a) {
    if (graph.nodes[a].op != Op::kAttention) continue;
    const AttentionArgs at = attention_args(graph.nodes[a]);
    if (node(at.k).op != Op::kCacheWrite || node(at.v).op != Op::kCacheWrite) continue;
    const CacheWriteArgs kw = cache_write_args(node(at.k)), vw = cache_write_args(node(at.v));
    const ValueId q_rope = at.q, k_rope = kw.update;
    if (!fusable_rope(node(q_rope)) || !fusable_rope(node(k_rope)) ||
        uses[static_cast<size_t>(k_rope)] != 1) {
      continue;
    }
    const RopeArgs q = rope_args(node(q_rope)), k = rope_args(node(k_rope));
    // The cache writes are read by this attention alone (and hold the caches' updates).
    const auto read_by_attention = [&](ValueId w) {
      return readers[static_cast<size_t>(w)] == std::vector<ValueId>{static_cast<ValueId>(a)};
    };
    const bool same_rotation = q.positions == k.positions && q.inv_freq == k.inv_freq &&
                               (q.norm >= 0) == (k.norm >= 0) &&
                               node(q_rope).scale == node(k_rope).scale &&
                               (q.norm < 0 || node(q_rope).eps == node(k_rope).eps);
    const Node& k_cache = node(kw.cache);
    const bool caches = state_input(graph, kw.cache) && state_input(graph, vw.cache) &&
                        k_cache.shape == node(vw.cache).shape &&
                        k_cache.dtype == node(vw.cache).dtype;
    if (!same_rotation || !caches || kw.slots != at.slots || vw.slots != at.slots ||
        node(vw.update).dtype != DType::f32 || !read_by_attention(at.k) ||
        !read_by_attention(at.v)) {
      continue;
    }
    PrepareAttentionArgs prepare{q.x,      k.x,      vw.update, q.positions, q.inv_freq,
                                 at.slots, kw.cache, vw.cache,  q.norm,      k.norm};
    // The step takes q's RoPE's place: what it reads must exist by then, and nothing between
    // there and the cache writes may read the caches, which it now writes earlier.
    std::vector<ValueId> inputs{prepare.q,         prepare.k,        prepare.v,
                                prepare.positions, prepare.inv_freq, prepare.slots};
    if (q.norm >= 0) inputs.insert(inputs.end(), {q.norm, k.norm});
    const size_t last_write = static_cast<size_t>(std::max(at.k, at.v));
    if (!std::all_of(inputs.begin(), inputs.end(), [&](ValueId v) { return v < q_rope; }) ||
        read_between(graph, static_cast<size_t>(q_rope), last_write + 1, {kw.cache, vw.cache},
                     {at.k, at.v})) {
      continue;
    }
    Node fused = node(q_rope);
    fused.op = Op::kPrepareAttention;
    fused.normed = false;
    set_args(fused, prepare);
    node(q_rope) = std::move(fused);
    // The cache writes become the caches as the step left them: what attention reads, and the
    // caches' updates.
    for (const ValueId write : {at.k, at.v}) {
      Node& w = node(write);
      const ValueId cache = cache_write_args(w).cache;
      w.op = Op::kView;
      w.start = 0;
      set_args(w, ViewArgs{cache, {q_rope}});
    }
    leave_for_dead(node(k_rope));
  }
}

}  // namespace tfm::fusion
