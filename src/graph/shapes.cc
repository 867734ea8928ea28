#include "graph/shapes.h"

#include <algorithm>

#include "graph/graph.h"
#include "tfm/error.h"

namespace tfm::graph {
namespace {

[[noreturn]] void fail(const char* op, const std::string& what) {
  throw Error(std::string("[") + op + "] " + what);
}

}  // namespace

Shape embedding_shape(const Shape& table, const Shape& ids) {
  if (table.size() != 2 || ids.size() != 2) {
    fail("embedding",
         "table " + shape_str(table) + " must be [V, H] and ids " + shape_str(ids) + " [B, S]");
  }
  return {ids[0], ids[1], table[1]};
}

Shape linear_shape(const Shape& x, const Shape& w, const Shape* bias) {
  if (x.empty() || w.size() != 2 || x.back() != w[1]) {
    fail("linear", "x " + shape_str(x) + " does not match weight " + shape_str(w) + " ([N, K])");
  }
  if (bias != nullptr && (bias->size() != 1 || (*bias)[0] != w[0])) {
    fail("linear", "bias " + shape_str(*bias) + " does not match weight " + shape_str(w));
  }
  Shape out = x;
  out.back() = w[0];
  return out;
}

Shape rms_norm_shape(const Shape& x, const Shape& w) {
  if (x.empty() || w.size() != 1 || x.back() != w[0]) {
    fail("rms_norm", "x " + shape_str(x) + " does not match weight " + shape_str(w));
  }
  return x;
}

Shape rope_shape(const Shape& x, const Shape& positions, const Shape& inv_freq) {
  if (x.size() != 4 || positions.size() != 2 || positions[0] != x[0] || positions[1] != x[1] ||
      inv_freq.size() != 1 || inv_freq[0] * 2 != x[3]) {
    fail("rope", "x " + shape_str(x) + " [B, S, H, D], positions " + shape_str(positions) +
                     " [B, S] and inv_freq " + shape_str(inv_freq) + " [D/2] do not agree");
  }
  return x;
}

Shape cache_write_shape(const char* op, const Shape& cache, const Shape& update,
                        const Shape& slots) {
  if (cache.size() != 4 || update.size() != 4 || cache[0] != update[0] || cache[2] != update[2] ||
      cache[3] != update[3] || update[1] > cache[1] || slots.size() != 1 || slots[0] != update[1]) {
    fail(op, "cache " + shape_str(cache) + ", update " + shape_str(update) + " and slots " +
                 shape_str(slots) + " do not agree");
  }
  return cache;
}

Shape attention_shape(const Shape& q, const Shape& k, const Shape& v, const Shape& mask,
                      const Shape& slots) {
  const bool ranks =
      q.size() == 4 && k.size() == 4 && v == k && mask.size() == 2 && slots.size() == 1;
  if (!ranks || k[0] != q[0] || k[3] != q[3] || k[2] == 0 || q[2] % k[2] != 0 || mask[0] != q[0] ||
      mask[1] != k[1] || slots[0] != q[1]) {
    fail("attention", "q " + shape_str(q) + ", k " + shape_str(k) + ", v " + shape_str(v) +
                          ", mask " + shape_str(mask) + " and slots " + shape_str(slots) +
                          " do not agree (grouped heads need Hq % Hkv == 0)");
  }
  return q;
}

Shape slice_seq_shape(const Shape& x, int64_t start, int64_t length) {
  if (x.size() < 2 || start < 0 || length <= 0 || start + length > x[1]) {
    fail("slice_seq", "[" + std::to_string(start) + ", " + std::to_string(start + length) +
                          ") out of range for " + shape_str(x));
  }
  Shape out = x;
  out[1] = length;
  return out;
}

Shape elementwise_shape(const char* op, const Shape& a, const Shape& b) {
  if (a != b) fail(op, "shapes " + shape_str(a) + " and " + shape_str(b) + " differ");
  return a;
}

Shape view_shape(const Shape& x, int64_t start, const Shape& shape) {
  if (start < 0 || start + shape_numel(shape) > shape_numel(x)) {
    fail("view",
         shape_str(shape) + " at element " + std::to_string(start) + " is outside " + shape_str(x));
  }
  return shape;
}

Shape pad_shape(const Shape& x, int64_t start, const Shape& shape) {
  if (start < 0 || start + shape_numel(x) > shape_numel(shape)) {
    fail("pad", shape_str(x) + " at element " + std::to_string(start) + " does not fit in " +
                    shape_str(shape));
  }
  return shape;
}

Shape concat_rows_shape(const std::vector<Shape>& parts) {
  if (parts.empty()) fail("concat_rows", "needs at least one part");
  Shape out = parts[0];
  if (out.empty()) fail("concat_rows", "parts need a row axis");
  for (size_t i = 1; i < parts.size(); ++i) {
    const Shape& p = parts[i];
    if (p.size() != out.size() || !std::equal(p.begin() + 1, p.end(), out.begin() + 1)) {
      fail("concat_rows", shape_str(p) + " does not stack under " + shape_str(parts[0]));
    }
    out[0] += p[0];
  }
  return out;
}

Shape reduce_rows_shape(const Shape& x) {
  if (x.empty()) fail("reduce_rows", "needs at least one axis");
  return {x.back()};
}

Shape argmax_shape(const Shape& x) {
  if (x.empty() || x.back() <= 0)
    fail("argmax", "needs a non-empty last axis, got " + shape_str(x));
  return Shape(x.begin(), x.end() - 1);
}

Shape all_gather_shape(const Shape& x, int group_size) {
  if (x.empty() || group_size < 1) {
    fail("all_gather", shape_str(x) + " over " + std::to_string(group_size) + " ranks");
  }
  Shape out = x;
  out.back() *= group_size;
  return out;
}

Shape gather_shards_shape(const Shape& x, int group_size) {
  if (x.empty() || group_size < 1) {
    fail("gather_shards", shape_str(x) + " over " + std::to_string(group_size) + " ranks");
  }
  Shape out = x;
  out[0] *= group_size;
  return out;
}

Shape reduce_scatter_shape(const Shape& x, int group_size) {
  if (x.empty() || group_size < 1 || x[0] % group_size != 0) {
    fail("reduce_scatter",
         shape_str(x) + " does not split into " + std::to_string(group_size) + " equal row blocks");
  }
  Shape out = x;
  out[0] /= group_size;
  return out;
}

Shape cross_entropy_shape(const Shape& logits, const Shape& targets) {
  Shape rows(logits.begin(), logits.end() - (logits.empty() ? 0 : 1));
  if (logits.size() < 2 || rows != targets) {
    fail("cross_entropy", "logits " + shape_str(logits) + " [..., V] and targets " +
                              shape_str(targets) + " [...] do not agree");
  }
  return {1};
}

Shape embedding_grad_shape(const Shape& dy, const Shape& ids, int64_t vocab) {
  if (dy.size() != 3 || ids.size() != 2 || dy[0] != ids[0] || dy[1] != ids[1] || vocab <= 0) {
    fail("embedding_grad",
         "dy " + shape_str(dy) + " [B, S, H] and ids " + shape_str(ids) + " [B, S] do not agree");
  }
  return {vocab, dy[2]};
}

Shape linear_grad_input_shape(const Shape& dy, const Shape& w) {
  if (dy.empty() || w.size() != 2 || dy.back() != w[0]) {
    fail("linear_grad_input", "dy " + shape_str(dy) + " does not match weight " + shape_str(w));
  }
  Shape out = dy;
  out.back() = w[1];
  return out;
}

Shape linear_grad_weight_shape(const Shape& dy, const Shape& x) {
  if (dy.empty() || x.empty() || shape_numel(dy) / dy.back() != shape_numel(x) / x.back()) {
    fail("linear_grad_weight",
         "dy " + shape_str(dy) + " and x " + shape_str(x) + " have different row counts");
  }
  return {dy.back(), x.back()};
}

Shape attention_grad_shape(const Shape& q, const Shape& k, const Shape& v, const Shape& dy) {
  if (dy != q || v != k) {
    fail("attention_grad", "dy " + shape_str(dy) + " must match q " + shape_str(q) + " and v " +
                               shape_str(v) + " k " + shape_str(k));
  }
  return {shape_numel(q) + 2 * shape_numel(k)};
}

Shape moe_route_shape(const Shape& logits, int64_t top_k) {
  if (logits.size() != 2) fail("moe_route", "logits " + shape_str(logits) + " must be [T, E]");
  if (top_k < 1 || top_k > logits[1]) {
    fail("moe_route", "top_k " + std::to_string(top_k) + " must be between 1 and the " +
                          std::to_string(logits[1]) + " experts");
  }
  return logits;
}

Shape moe_experts_shape(const Shape& x, const Shape& routing, const std::vector<Shape>& weights,
                        int64_t first_expert) {
  if (x.size() != 2 || routing.size() != 2 || routing[0] != x[0]) {
    fail("moe_experts",
         "x " + shape_str(x) + " must be [T, H] and routing " + shape_str(routing) + " [T, E]");
  }
  const auto experts = static_cast<int64_t>(weights.size() / 3);
  if (weights.empty() || weights.size() % 3 != 0 || first_expert < 0 ||
      first_expert + experts > routing[1]) {
    fail("moe_experts", std::to_string(weights.size()) + " weights (3 an expert: gate, up, down)" +
                            " from expert " + std::to_string(first_expert) + " of routing " +
                            shape_str(routing));
  }
  const int64_t hidden = x[1], inter = weights[0].size() == 2 ? weights[0][0] : -1;
  for (size_t i = 0; i < weights.size(); i += 3) {
    const Shape projection{inter, hidden}, down{hidden, inter};
    if (weights[i] != projection || weights[i + 1] != projection || weights[i + 2] != down) {
      fail("moe_experts", "expert " + std::to_string(i / 3) + ": gate " + shape_str(weights[i]) +
                              ", up " + shape_str(weights[i + 1]) + " and down " +
                              shape_str(weights[i + 2]) + " do not match x " + shape_str(x) +
                              " and the first expert's gate");
    }
  }
  return x;
}

int64_t moe_slots_per_rank(const Shape& routing, int64_t top_k, int64_t ranks) {
  moe_route_shape(routing, top_k);
  if (ranks < 1 || routing[1] % ranks != 0) {
    fail("moe_dispatch", std::to_string(ranks) + " ranks do not split the " +
                             std::to_string(routing[1]) + " experts");
  }
  return routing[0] * std::min(top_k, routing[1] / ranks);
}

Shape moe_dispatch_shape(const Shape& x, const Shape& routing, int64_t top_k, int64_t ranks) {
  if (x.size() != 2 || routing.size() != 2 || x[0] != routing[0]) {
    fail("moe_dispatch",
         "x " + shape_str(x) + " must be [T, H] and routing " + shape_str(routing) + " [T, E]");
  }
  return {ranks * moe_slots_per_rank(routing, top_k, ranks), x[1]};
}

Shape moe_slots_shape(const Shape& routing, int64_t top_k, int64_t ranks) {
  return {ranks * moe_slots_per_rank(routing, top_k, ranks), routing.at(1) / ranks};
}

Shape moe_combine_shape(const Shape& y, const Shape& routing, int64_t top_k, int64_t ranks) {
  const int64_t slots = ranks * moe_slots_per_rank(routing, top_k, ranks);
  if (y.size() != 2 || y[0] != slots) {
    fail("moe_combine", "y " + shape_str(y) + " must hold " + std::to_string(slots) +
                            " slots for routing " + shape_str(routing));
  }
  return {routing[0], y[1]};
}

Shape all_to_all_shape(const Shape& x, int group_size) {
  if (x.empty() || x[0] % group_size != 0) {
    fail("all_to_all", "x " + shape_str(x) + " must have rows in " + std::to_string(group_size) +
                           " equal blocks");
  }
  return x;
}

Shape router_loss_shape(const Shape& loss_scale, const Shape& mask,
                        const std::vector<Shape>& logits, int64_t top_k) {
  if (loss_scale != Shape{1} || mask.size() != 2 || logits.empty()) {
    fail("router_loss", "loss_scale " + shape_str(loss_scale) + " must be [1], mask " +
                            shape_str(mask) + " [B, S], and some router logits given");
  }
  for (const Shape& l : logits) {
    if (l != logits[0] || moe_route_shape(l, top_k)[0] != mask[0] * mask[1]) {
      fail("router_loss", "router logits " + shape_str(l) + " must be [B x S, E] for mask " +
                              shape_str(mask) + ", alike in every layer");
    }
  }
  return {1};
}

Shape adamw_shape(const Shape& param, const Shape& grad, const Shape& exp_avg,
                  const Shape& exp_avg_sq, const Shape& scalars) {
  if (grad != param || exp_avg != param || exp_avg_sq != param) {
    fail("adamw", "param " + shape_str(param) + ", grad " + shape_str(grad) + ", exp_avg " +
                      shape_str(exp_avg) + " and exp_avg_sq " + shape_str(exp_avg_sq) +
                      " must be of one shape");
  }
  if (scalars != Shape{kAdamWScalars}) {
    fail("adamw",
         "scalars " + shape_str(scalars) + " must be [" + std::to_string(kAdamWScalars) + "]");
  }
  return param;
}

}  // namespace tfm::graph
