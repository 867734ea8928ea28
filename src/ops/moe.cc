#include "ops/moe.h"

#include <algorithm>
#include <cmath>
#include <numeric>

#include "graph/op_args.h"
#include "ops/backward.h"

namespace tfm::ops {
namespace {

// softmax(logits) over the experts, in f32 as torch's softmax(dtype=float).
void softmax(const float* logits, int64_t experts, float* p) {
  const float max = *std::max_element(logits, logits + experts);
  float sum = 0.f;
  for (int64_t e = 0; e < experts; ++e) {
    p[e] = std::exp(logits[e] - max);
    sum += p[e];
  }
  for (int64_t e = 0; e < experts; ++e) p[e] /= sum;
}

// The layers' rows that count and how many there are: the mask's ones, in every layer.
double kept_rows(const int32_t* mask, int64_t rows, size_t layers) {
  int64_t kept = 0;
  for (int64_t r = 0; r < rows; ++r) kept += mask[r] != 0;
  return static_cast<double>(kept) * static_cast<double>(layers);
}

// Per expert: the share of top_k choices that went to it over the kept rows of every layer
// (tokens_per_expert), and its mean probability (router_prob_per_expert).
struct ExpertShares {
  std::vector<double> chosen, probability;
};

ExpertShares expert_shares(const std::vector<const float*>& logits, const int32_t* mask,
                           int64_t rows, int64_t experts, int64_t top_k) {
  ExpertShares s{std::vector<double>(static_cast<size_t>(experts)),
                 std::vector<double>(static_cast<size_t>(experts))};
  const double kept = kept_rows(mask, rows, logits.size());
  if (kept == 0) return s;
  std::vector<float> p(static_cast<size_t>(experts));
  std::vector<int64_t> chosen(static_cast<size_t>(top_k));
  for (const float* layer : logits) {
    for (int64_t r = 0; r < rows; ++r) {
      if (mask[r] == 0) continue;
      const float* row = layer + r * experts;
      softmax(row, experts, p.data());
      top_experts(row, experts, top_k, chosen.data());
      for (int64_t e = 0; e < experts; ++e) s.probability[static_cast<size_t>(e)] += p[e];
      for (int64_t e : chosen) s.chosen[static_cast<size_t>(e)] += 1.0;
    }
  }
  for (int64_t e = 0; e < experts; ++e) {
    s.chosen[static_cast<size_t>(e)] /= kept;
    s.probability[static_cast<size_t>(e)] /= kept;
  }
  return s;
}

}  // namespace

void top_experts(const float* logits, int64_t experts, int64_t top_k, int64_t* chosen) {
  std::vector<int64_t> order(static_cast<size_t>(experts));
  std::iota(order.begin(), order.end(), 0);
  std::partial_sort(order.begin(), order.begin() + top_k, order.end(), [&](int64_t a, int64_t b) {
    return logits[a] > logits[b] || (logits[a] == logits[b] && a < b);
  });
  std::copy(order.begin(), order.begin() + top_k, chosen);
}

namespace {

// route_row from the row's softmax `p`, computed once by the caller.
void route_from(const float* logits, const float* p, int64_t experts, int64_t top_k, bool normed,
                float* routing) {
  std::vector<int64_t> chosen(static_cast<size_t>(top_k));
  top_experts(logits, experts, top_k, chosen.data());
  float sum = 0.f;
  for (int64_t e : chosen) sum += p[e];
  std::fill(routing, routing + experts, 0.f);
  for (int64_t e : chosen) routing[e] = normed ? p[e] / sum : p[e];
}

}  // namespace

void route_row(const float* logits, int64_t experts, int64_t top_k, bool normed, float* routing) {
  std::vector<float> p(static_cast<size_t>(experts));
  softmax(logits, experts, p.data());
  route_from(logits, p.data(), experts, top_k, normed, routing);
}

void route_row_grad(const float* logits, const float* d_routing, int64_t experts, int64_t top_k,
                    bool normed, float* d_logits) {
  std::vector<float> p(static_cast<size_t>(experts)), w(p.size());
  softmax(logits, experts, p.data());
  route_from(logits, p.data(), experts, top_k, normed, w.data());
  // With normed, w is the softmax over the chosen logits alone: its gradient reaches only them.
  // Without, w is the full softmax's chosen entries: every logit moves them through the sum.
  const float* moved = normed ? w.data() : p.data();
  double dot = 0;
  for (int64_t e = 0; e < experts; ++e) {
    if (w[e] != 0.f) dot += static_cast<double>(w[e]) * d_routing[e];
  }
  for (int64_t e = 0; e < experts; ++e) {
    const double g = w[e] != 0.f ? d_routing[e] : 0.0;
    d_logits[e] = static_cast<float>(moved[e] * (g - dot));
  }
}

double router_loss(const std::vector<const float*>& logits, const int32_t* mask, int64_t rows,
                   int64_t experts, int64_t top_k) {
  const ExpertShares s = expert_shares(logits, mask, rows, experts, top_k);
  double sum = 0;
  for (int64_t e = 0; e < experts; ++e)
    sum += s.chosen[static_cast<size_t>(e)] * s.probability[static_cast<size_t>(e)];
  return sum * static_cast<double>(experts);
}

void router_loss_grad(const std::vector<const float*>& logits, const int32_t* mask, int64_t rows,
                      int64_t experts, int64_t top_k, double d_loss,
                      const std::vector<float*>& d_logits) {
  const ExpertShares s = expert_shares(logits, mask, rows, experts, top_k);
  const double kept = kept_rows(mask, rows, logits.size());
  std::vector<float> p(static_cast<size_t>(experts));
  std::vector<double> g(static_cast<size_t>(experts));
  for (size_t l = 0; l < logits.size(); ++l) {
    for (int64_t r = 0; r < rows; ++r) {
      float* d = d_logits[l] + r * experts;
      if (mask[r] == 0 || kept == 0) {
        std::fill(d, d + experts, 0.f);
        continue;
      }
      // Only the probabilities carry a gradient (the choices are counts): d loss / d p[e] is
      // experts x chosen share[e] / kept rows, and the softmax passes it to the logits.
      softmax(logits[l] + r * experts, experts, p.data());
      double dot = 0;
      for (int64_t e = 0; e < experts; ++e) {
        g[static_cast<size_t>(e)] =
            d_loss * static_cast<double>(experts) * s.chosen[static_cast<size_t>(e)] / kept;
        dot += p[e] * g[static_cast<size_t>(e)];
      }
      for (int64_t e = 0; e < experts; ++e)
        d[e] = static_cast<float>(p[e] * (g[static_cast<size_t>(e)] - dot));
    }
  }
}

std::vector<int64_t> exchange_slots(const float* routing, int64_t rows, int64_t experts,
                                    int64_t ranks, int64_t per_rank) {
  std::vector<int64_t> slots(static_cast<size_t>(rows * experts), -1);
  std::vector<int64_t> taken(static_cast<size_t>(ranks), 0);
  const int64_t held = experts / ranks;
  for (int64_t r = 0; r < rows; ++r) {
    for (int64_t e = 0; e < experts; ++e) {
      if (routing[r * experts + e] == 0.f) continue;
      const auto rank = static_cast<size_t>(e / held);
      slots[static_cast<size_t>(r * experts + e)] =
          static_cast<int64_t>(rank) * per_rank + taken[rank]++;
    }
  }
  return slots;
}

// One kernel computes every input's gradient of a mixture-of-experts op; views split its flat
// output in input order (the router loss's loss_scale and mask get none, nor a dispatch's
// routing: the gradient of the routing weights flows through the combine).
InputGrads moe_backward(graph::Builder& b, const graph::Node& n, graph::ValueId dy) {
  InputGrads grads(n.inputs.size(), -1);
  // Which slot a row's expert takes follows from the choices, which carry no gradient.
  if (n.op == graph::Op::kMoeSlots) return grads;
  const graph::ValueId packed = b.moe_grad(n, dy);
  if (n.op == graph::Op::kMoeRoute || n.op == graph::Op::kMoeDispatch) {
    grads[0] = b.reshape(packed, b.shape(n.inputs[0]));
    return grads;
  }
  const size_t first = n.op == graph::Op::kRouterLoss ? 2 : 0;
  int64_t offset = 0;
  for (size_t i = first; i < n.inputs.size(); ++i) {
    const Shape shape = b.shape(n.inputs[i]);
    grads[i] = b.view(packed, offset, shape);
    offset += shape_numel(shape);
  }
  return grads;
}

}  // namespace tfm::ops
