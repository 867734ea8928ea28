#include <cmath>
#include <vector>

#include "graph/effects.h"
#include "graph/op_args.h"
#include "ops/backward.h"
#include "ops/reference.h"
#include "tfm/error.h"

namespace tfm::ops::reference {

void cache_write(float* cache, const float* update, const int32_t* slots, int64_t batch,
                 int64_t cache_len, int64_t seq, int64_t row_elems) {
  for (int64_t b = 0; b < batch; ++b) {
    for (int64_t s = 0; s < seq; ++s) {
      const float* src = update + (b * seq + s) * row_elems;
      float* dst = cache + (b * cache_len + slots[s]) * row_elems;
      for (int64_t i = 0; i < row_elems; ++i) dst[i] = src[i];
    }
  }
}

void attention(const float* q, const float* k, const float* v, const int32_t* mask,
               const int32_t* slots, int64_t batch, int64_t seq, int64_t cache_len, int64_t q_heads,
               int64_t kv_heads, int64_t head_dim, float scale, float* out, int64_t window) {
  const int64_t group = q_heads / kv_heads;
  std::vector<double> scores(static_cast<size_t>(cache_len));
  for (int64_t b = 0; b < batch; ++b) {
    for (int64_t s = 0; s < seq; ++s) {
      for (int64_t h = 0; h < q_heads; ++h) {
        const float* qv = q + ((b * seq + s) * q_heads + h) * head_dim;
        const int64_t kvh = h / group;
        double max_score = -INFINITY;
        for (int64_t j = 0; j < cache_len; ++j) {
          const bool visible = j <= slots[s] && (window == 0 || slots[s] - j < window) &&
                               mask[b * cache_len + j] != 0;
          scores[j] = -INFINITY;
          if (!visible) continue;
          const float* kv = k + ((b * cache_len + j) * kv_heads + kvh) * head_dim;
          double dot = 0;
          for (int64_t d = 0; d < head_dim; ++d) dot += static_cast<double>(qv[d]) * kv[d];
          scores[j] = dot * scale;
          max_score = std::max(max_score, scores[j]);
        }
        float* o = out + ((b * seq + s) * q_heads + h) * head_dim;
        std::vector<double> acc(static_cast<size_t>(head_dim), 0.0);
        double denom = 0;
        for (int64_t j = 0; j < cache_len && max_score > -INFINITY; ++j) {
          if (scores[j] == -INFINITY) continue;
          const double p = std::exp(scores[j] - max_score);
          denom += p;
          const float* vv = v + ((b * cache_len + j) * kv_heads + kvh) * head_dim;
          for (int64_t d = 0; d < head_dim; ++d) acc[d] += p * vv[d];
        }
        // A query that sees no key (a padding position) yields zeros.
        for (int64_t d = 0; d < head_dim; ++d)
          o[d] = denom > 0 ? static_cast<float>(acc[d] / denom) : 0.f;
      }
    }
  }
}

}  // namespace tfm::ops::reference

namespace tfm::ops {

// One kernel computes dq, dk and dv together (they share the recomputed probabilities); views
// split its flat output.
InputGrads attention_backward(graph::Builder& b, const graph::Node& n, graph::ValueId dy) {
  const graph::AttentionArgs a = graph::attention_args(n);
  // A cache is a state input (or its update), read directly or through autocast's cast.
  const auto cached = [&](graph::ValueId id) {
    while (b.node(id).op == graph::Op::kCast) id = graph::operand(b.node(id));
    return b.node(graph::storage_of(b.graph(), id)).is_state;
  };
  if (cached(a.k) || cached(a.v)) {
    throw Error("[autodiff] attention over a KV cache has no backward; train without a cache");
  }
  const graph::ValueId packed =
      b.attention_grad(a.q, a.k, a.v, a.mask, a.slots, dy, n.scale, n.window);
  const Shape q = b.shape(a.q), k = b.shape(a.k);
  const int64_t q_numel = shape_numel(q), k_numel = shape_numel(k);
  return {b.view(packed, 0, q), b.view(packed, q_numel, k), b.view(packed, q_numel + k_numel, k),
          -1, -1};
}

}  // namespace tfm::ops
