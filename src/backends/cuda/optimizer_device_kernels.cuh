// The optimizer's kernels (see optimizer.cu), in a header of their own so tests/cuda_emulation
// can run them on the CPU.
#pragma once

#include <cstdint>

#include "backends/cuda/device_math.cuh"
#include "ops/adamw.h"

namespace tfm::cuda {
namespace {

constexpr int kThreads = 256;
constexpr int64_t kChunkElements = int64_t{1} << 15;  // one block's share of a sum
constexpr int kMaxBlocks = 1 << 16;

__global__ void adamw_kernel(ops::AdamWScalars s, float decay, float* __restrict__ p,
                             const float* __restrict__ g, float* __restrict__ m,
                             float* __restrict__ v, int64_t n) {
  const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < n;
       i += stride) {
    ops::adamw_update(s, decay, p[i], g[i], m[i], v[i]);
  }
}

__global__ void scale_kernel(float* __restrict__ x, float factor, int64_t n) {
  const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < n;
       i += stride) {
    x[i] *= factor;
  }
}

// Block b sums chunk b into partial[b].
__global__ void chunk_squares_kernel(const float* __restrict__ x, int64_t n,
                                     double* __restrict__ partial) {
  const int64_t begin = blockIdx.x * kChunkElements;
  const int64_t end = min(n, begin + kChunkElements);
  double sum = 0;
  for (int64_t i = begin + threadIdx.x; i < end; i += blockDim.x) sum += double{x[i]} * x[i];
  sum = block_reduce(sum, Sum{});
  if (threadIdx.x == 0) partial[blockIdx.x] = sum;
}

__global__ void sum_partials_kernel(const double* __restrict__ partial, int64_t count,
                                    double* __restrict__ out) {
  double sum = 0;
  for (int64_t i = threadIdx.x; i < count; i += blockDim.x) sum += partial[i];
  sum = block_reduce(sum, Sum{});
  if (threadIdx.x == 0) *out = sum;
}

}  // namespace
}  // namespace tfm::cuda
