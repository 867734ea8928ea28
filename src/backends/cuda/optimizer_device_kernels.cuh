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

// AdamW over n elements, four at a time (16-byte loads and stores) from p's first 16-byte
// boundary on, the few before it and after the last whole four one at a time by the grid's first
// threads. p, g, m and v are the same offset into buffers of one alignment, so p's boundary is
// theirs; where they are not, every element goes one at a time.
// The step's scalars are read where the run's inputs were copied (graph::Op::kAdamW), so one
// captured CUDA Graph serves every step.
__global__ void adamw_kernel(const float* __restrict__ scalars, bool decays, float* __restrict__ p,
                             const float* __restrict__ g, float* __restrict__ m,
                             float* __restrict__ v, int64_t n) {
  const ops::AdamWScalars s = ops::unpack_adamw_scalars(scalars);
  const float decay = decays ? s.decay : 1.f;
  const int64_t first = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x;
  const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
  const int64_t head = before_boundary(p, n);
  const bool together = before_boundary(g, n) == head && before_boundary(m, n) == head &&
                        before_boundary(v, n) == head;
  const int64_t quads = together ? (n - head) / 4 : 0;
  const int64_t tail = head + 4 * quads;  // the first element after the whole fours
  const int64_t singles = together ? head + (n - tail) : n;
  for (int64_t j = first; j < singles; j += stride) {
    const int64_t i = !together || j < head ? j : tail + (j - head);
    ops::adamw_update(s, decay, p[i], g[i], m[i], v[i]);
  }
  for (int64_t q = first; q < quads; q += stride) {
    const int64_t at = head + 4 * q;
    float4 pq = *reinterpret_cast<const float4*>(p + at);
    const float4 gq = *reinterpret_cast<const float4*>(g + at);
    float4 mq = *reinterpret_cast<const float4*>(m + at);
    float4 vq = *reinterpret_cast<const float4*>(v + at);
    ops::adamw_update(s, decay, pq.x, gq.x, mq.x, vq.x);
    ops::adamw_update(s, decay, pq.y, gq.y, mq.y, vq.y);
    ops::adamw_update(s, decay, pq.z, gq.z, mq.z, vq.z);
    ops::adamw_update(s, decay, pq.w, gq.w, mq.w, vq.w);
    *reinterpret_cast<float4*>(p + at) = pq;
    *reinterpret_cast<float4*>(m + at) = mq;
    *reinterpret_cast<float4*>(v + at) = vq;
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

// The chunks' sum in double, written as Out (double, or the graph's f32 result, rounded once).
template <typename Out>
__global__ void sum_partials_kernel(const double* __restrict__ partial, int64_t count,
                                    Out* __restrict__ out) {
  double sum = 0;
  for (int64_t i = threadIdx.x; i < count; i += blockDim.x) sum += partial[i];
  sum = block_reduce(sum, Sum{});
  if (threadIdx.x == 0) *out = static_cast<Out>(sum);
}

}  // namespace
}  // namespace tfm::cuda
