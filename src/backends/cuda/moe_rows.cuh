// A router row's arithmetic on the device (ops/moe.h's on the cpu): its softmax, its top experts
// and its routing weights, shared by the routing, gradient and load-balancing loss kernels.
#pragma once

#include <cmath>
#include <cstdint>

#include "backends/cuda/device_math.cuh"

namespace tfm::cuda {
namespace {

// Does logit a of expert i come before logit b of expert j among a row's top experts? The larger
// first, the first of equals first (ops::top_experts).
__device__ __forceinline__ bool ranks_before(float a, int64_t i, float b, int64_t j) {
  return a > b || (a == b && i < j);
}

// A row's softmax over the experts: its largest logit and the sum of exp(logit - that).
struct RowSoftmax {
  float max, sum;
  __device__ __forceinline__ float at(float logit) const { return expf(logit - max) / sum; }
};

__device__ __forceinline__ RowSoftmax row_softmax(const float* l, int64_t experts) {
  RowSoftmax s{-INFINITY, 0.f};
  for (int64_t e = 0; e < experts; ++e) s.max = fmaxf(s.max, l[e]);
  for (int64_t e = 0; e < experts; ++e) s.sum += expf(l[e] - s.max);
  return s;
}

// The row's top_k experts in order, each the best of those after the last (so nothing but the
// row is kept): `chosen(e)` is called for each.
template <typename Chosen>
__device__ __forceinline__ void for_top_experts(const float* l, int64_t experts, int64_t top_k,
                                                Chosen chosen) {
  float last = INFINITY;
  int64_t last_index = -1;
  for (int64_t k = 0; k < top_k; ++k) {
    int64_t best = -1;
    for (int64_t e = 0; e < experts; ++e) {
      if (ranks_before(last, last_index, l[e], e) &&
          (best < 0 || ranks_before(l[e], e, l[best], best))) {
        best = e;
      }
    }
    chosen(best);
    last = l[best];
    last_index = best;
  }
}

// out = ops::route_row of the row l: softmax at the top_k experts (divided by their sum when
// `normed`), 0 elsewhere.
__device__ __forceinline__ RowSoftmax route_row(const float* l, int64_t experts, int64_t top_k,
                                                bool normed, float* out) {
  const RowSoftmax s = row_softmax(l, experts);
  for (int64_t e = 0; e < experts; ++e) out[e] = 0.f;
  float chosen_sum = 0.f;
  for_top_experts(l, experts, top_k, [&](int64_t e) {
    out[e] = s.at(l[e]);
    chosen_sum += out[e];
  });
  if (normed) {
    for (int64_t e = 0; e < experts; ++e) out[e] /= chosen_sum;
  }
  return s;
}

}  // namespace
}  // namespace tfm::cuda
