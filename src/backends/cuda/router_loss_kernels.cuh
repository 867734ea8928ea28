// The load-balancing loss kernels (graph::Op::kRouterLoss and its gradient; see router_loss.cu),
// in a header of their own so tests/cuda_emulation can run them on the CPU: ops::router_loss and
// ops::router_loss_grad, with every sum in double and in the cpu's order.
#pragma once

#include "backends/cuda/moe.h"
#include "backends/cuda/moe_rows.cuh"

namespace tfm::cuda {
namespace {

// The layers' router logits a launch reads, passed by value.
struct RouterLogits {
  const float* layer[kMaxRouterLayers];
  int64_t layers, rows, experts, top_k;
};

// What the loss and its gradient share: each kept row's softmax and top_k experts, then each
// expert's share of the choices and mean probability over the kept rows of every layer.
struct RouterStats {
  RowSoftmax* softmax;  // [layers x rows]
  int32_t* chosen;      // [layers x rows x top_k]
  double* shares;       // [2 x experts + 1]: chosen shares, mean probabilities, kept rows
};

// Each kept row's softmax and choices, a thread a (layer, row).
__global__ void router_rows_kernel(RouterLogits in, const int32_t* __restrict__ mask,
                                   RouterStats stats) {
  await_previous_kernels();
  const int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i >= in.layers * in.rows || mask[i % in.rows] == 0) return;
  const float* l = in.layer[i / in.rows] + i % in.rows * in.experts;
  stats.softmax[i] = row_softmax(l, in.experts);
  int32_t* chosen = stats.chosen + i * in.top_k;
  for_top_experts(l, in.experts, in.top_k, [&](int64_t e) { *chosen++ = static_cast<int32_t>(e); });
}

// The experts' shares, a thread an expert (one block), then the loss into `loss` (null: not
// written): coef / loss_scale x experts x the sum over experts of chosen share x mean probability.
__global__ void router_shares_kernel(RouterLogits in, const int32_t* __restrict__ mask,
                                     RouterStats stats, const float* __restrict__ loss_scale,
                                     float coef, float* __restrict__ loss) {
  await_previous_kernels();
  int64_t kept_rows = 0;
  for (int64_t r = 0; r < in.rows; ++r) kept_rows += mask[r] != 0;
  const double kept = static_cast<double>(kept_rows) * static_cast<double>(in.layers);
  for (int64_t e = threadIdx.x; e < in.experts; e += blockDim.x) {
    double chosen = 0, probability = 0;
    for (int64_t l = 0; l < in.layers; ++l) {
      for (int64_t r = 0; r < in.rows; ++r) {
        if (mask[r] == 0) continue;
        const int64_t i = l * in.rows + r;
        probability += stats.softmax[i].at(in.layer[l][r * in.experts + e]);
        for (int64_t k = 0; k < in.top_k; ++k) chosen += stats.chosen[i * in.top_k + k] == e;
      }
    }
    stats.shares[e] = kept == 0 ? 0.0 : chosen / kept;
    stats.shares[in.experts + e] = kept == 0 ? 0.0 : probability / kept;
  }
  if (threadIdx.x == 0) stats.shares[2 * in.experts] = kept;
  __syncthreads();
  if (threadIdx.x != 0 || loss == nullptr) return;
  double sum = 0;
  for (int64_t e = 0; e < in.experts; ++e) sum += stats.shares[e] * stats.shares[in.experts + e];
  const double factor = coef / static_cast<double>(*loss_scale);
  *loss = static_cast<float>(factor * sum * static_cast<double>(in.experts));
}

// Each layer's d logits, a thread a (layer, row): zeros for a row the mask drops; else the
// softmax's Jacobian applied to d loss / d p[e] = d_loss x experts x chosen share[e] / kept.
__global__ void router_loss_grad_kernel(RouterLogits in, const int32_t* __restrict__ mask,
                                        RouterStats stats, const float* __restrict__ loss_scale,
                                        float coef, const float* __restrict__ d_loss,
                                        float* __restrict__ d_logits) {
  await_previous_kernels();
  const int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i >= in.layers * in.rows) return;
  float* d = d_logits + i * in.experts;
  const double kept = stats.shares[2 * in.experts];
  if (mask[i % in.rows] == 0 || kept == 0) {
    for (int64_t e = 0; e < in.experts; ++e) d[e] = 0.f;
    return;
  }
  const float* l = in.layer[i / in.rows] + i % in.rows * in.experts;
  const RowSoftmax s = stats.softmax[i];
  const double scaled = coef / static_cast<double>(*loss_scale) * *d_loss;
  const auto g = [&](int64_t e) {
    return scaled * static_cast<double>(in.experts) * stats.shares[e] / kept;
  };
  double dot = 0;
  for (int64_t e = 0; e < in.experts; ++e) dot += s.at(l[e]) * g(e);
  for (int64_t e = 0; e < in.experts; ++e) d[e] = static_cast<float>(s.at(l[e]) * (g(e) - dot));
}

}  // namespace
}  // namespace tfm::cuda
