// The mixture-of-experts launchers (graph::Op::kMoeRoute, kMoeExperts, kRouterLoss, the exchange
// ops kMoeDispatch, kMoeSlots, kMoeCombine, and their gradients; kernels in moe_kernels.cuh,
// moe_grad_kernels.cuh, router_loss_kernels.cuh and exchange_kernels.cuh).
// Router logits, routing weights, activations, results and gradients are f32; the experts'
// weights f32 or bf16.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>
#include <vector>

#include "tfm/dtype.h"

namespace tfm::cuda {

// routing [rows, experts] = ops::route_row of each row of logits.
void moe_route(const float* logits, int64_t rows, int64_t experts, int64_t top_k, bool normed,
               float* routing, cudaStream_t stream);
// d_logits = ops::route_row_grad of each row.
void moe_route_grad(const float* logits, const float* d_routing, int64_t rows, int64_t experts,
                    int64_t top_k, bool normed, float* d_logits, cudaStream_t stream);

// A kMoeExperts node's sizes: x [rows, hidden], routing [rows, experts] whose columns first ..
// first + held - 1 are the experts held (each gate and up [inter, hidden], down [hidden, inter]).
// `pairs` bounds the (row, expert) pairs routing holds: rows x the most experts a row chooses.
struct MoeExpertsShape {
  int64_t rows, hidden, inter, experts, first, held, pairs;
};
// Each held expert's weights, in order.
struct MoeExpertWeights {
  std::vector<const void*> gate, up, down;
  DType dtype;
};

size_t moe_experts_scratch_bytes(const MoeExpertsShape& s, bool gradient);
// out [rows, hidden] = kMoeExperts of x and routing: each held expert's products over only the
// rows routed to it, added row by row in expert order.
void moe_experts(const float* x, const float* routing, const MoeExpertWeights& w,
                 const MoeExpertsShape& s, void* scratch, float* out, cudaStream_t stream);
// out = kMoeExpertsGrad's [dx | d routing | each held expert's d w_gate, d w_up, d w_down], f32.
void moe_experts_grad(const float* x, const float* routing, const MoeExpertWeights& w,
                      const float* dy, const MoeExpertsShape& s, void* scratch, float* out,
                      cudaStream_t stream);

// kRouterLoss over `layers` router logits [rows, experts] each and the mask's rows: loss [1] =
// coef x ops::router_loss / loss_scale. With d_loss, kRouterLossGrad instead: every layer's d
// logits into d_logits, one after another.
inline constexpr int kMaxRouterLayers = 128;  // the layers' logits go to the kernels by value
struct RouterLossShape {
  int64_t rows, experts, top_k;
  float coef;
};
size_t router_loss_scratch_bytes(const RouterLossShape& s, size_t layers);
void router_loss(const std::vector<const float*>& logits, const int32_t* mask,
                 const float* loss_scale, const RouterLossShape& s, void* scratch, float* loss,
                 cudaStream_t stream);
void router_loss_grad(const std::vector<const float*>& logits, const int32_t* mask,
                      const float* loss_scale, const float* d_loss, const RouterLossShape& s,
                      void* scratch, float* d_logits, cudaStream_t stream);

// The exchange between expert-parallel ranks of `op` (kMoeDispatch, kMoeSlots, kMoeCombine,
// kMoeDispatchGrad or kMoeCombineGrad): routing [rows, experts] decides the slots, `ranks` blocks
// of per_rank each. `first` is x (dispatch) or y (combine); `dy` the gradients' incoming one;
// `hidden` the rows' width.
struct ExchangeShape {
  int64_t rows, experts, ranks, per_rank, hidden;
};
enum class ExchangeOp { kDispatch, kSlots, kCombine, kDispatchGrad, kCombineGrad };
size_t exchange_scratch_bytes(const ExchangeShape& s);
void moe_exchange(ExchangeOp op, const float* first, const float* routing, const float* dy,
                  const ExchangeShape& s, void* scratch, float* out, cudaStream_t stream);

}  // namespace tfm::cuda
