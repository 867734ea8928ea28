// The arithmetic of mixture-of-experts routing as transformers computes it (Qwen3MoeTopKRouter,
// MixtralTopKRouter, load_balancing_loss_func), row by row over f32 router logits, and its
// gradients: what graph::Op::kMoeRoute and kRouterLoss mean, shared by the kernels that run them.
#pragma once

#include <cstdint>
#include <vector>

namespace tfm::ops {

// The `top_k` experts of a row by descending logit (the first of equals first), written to
// `chosen`.
void top_experts(const float* logits, int64_t experts, int64_t top_k, int64_t* chosen);

// routing[e] = softmax(logits)[e] for the top_k experts (divided by their sum when `normed`),
// 0 for the others.
void route_row(const float* logits, int64_t experts, int64_t top_k, bool normed, float* routing);
// d logits of route_row, given d routing. Only the chosen experts' d routing matters.
void route_row_grad(const float* logits, const float* d_routing, int64_t experts, int64_t top_k,
                    bool normed, float* d_logits);

// Switch Transformer's load-balancing loss over every layer's router logits ([rows, experts]
// each) as load_balancing_loss_func computes it: experts x the sum over experts of (the share of
// top_k choices that went to it) x (its mean softmax probability), both over the rows `mask`
// keeps (mask[r] != 0) of every layer together. 0 when the mask keeps no row.
double router_loss(const std::vector<const float*>& logits, const int32_t* mask, int64_t rows,
                   int64_t experts, int64_t top_k);
// d_loss x its gradient with respect to each layer's logits, written to d_logits[layer] (rows x
// experts each).
void router_loss_grad(const std::vector<const float*>& logits, const int32_t* mask, int64_t rows,
                      int64_t experts, int64_t top_k, double d_loss,
                      const std::vector<float*>& d_logits);

// Experts split over `ranks` ranks that exchange rows (graph::Op::kMoeDispatch): the slot each
// (row, chosen expert) pair takes, at slots[row x experts + expert], -1 where the row did not
// choose the expert. Rank d's slots are [d x per_rank, (d + 1) x per_rank), taken in row order.
std::vector<int64_t> exchange_slots(const float* routing, int64_t rows, int64_t experts,
                                    int64_t ranks, int64_t per_rank);

}  // namespace tfm::ops
