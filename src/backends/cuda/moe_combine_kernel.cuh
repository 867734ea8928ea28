// The sum of each row's (row, expert) pairs' rows, shared by the experts' kernels (moe.cu: pairs
// listed per expert) and the exchange's (exchange.cu: a slot a pair), in a header of its own so
// that each emulation test builds only the kernels it runs.
#pragma once

#include <cstdint>

#include "backends/cuda/device_math.cuh"

namespace tfm::cuda {
namespace {

// out[r, c] = the sum over the held experts e row r is routed to (pair_of[r x held + e] >= 0), in
// order, of routing[r, first + e] x per_pair[pair, c] (routing null: of per_pair[pair, c] alone),
// a thread an element.
__global__ void moe_combine_pairs_kernel(const float* __restrict__ per_pair,
                                         const float* __restrict__ routing, int64_t rows,
                                         int64_t hidden, int64_t experts, int64_t first,
                                         int64_t held, const int32_t* __restrict__ pair_of,
                                         float* __restrict__ out) {
  await_previous_kernels();
  const int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i >= rows * hidden) return;
  const int64_t r = i / hidden, c = i % hidden;
  float sum = 0.f;
  for (int64_t e = 0; e < held; ++e) {
    const int32_t p = pair_of[r * held + e];
    if (p < 0) continue;
    const float v = per_pair[p * hidden + c];
    sum += routing == nullptr ? v : routing[r * experts + first + e] * v;
  }
  out[i] = sum;
}

}  // namespace
}  // namespace tfm::cuda
