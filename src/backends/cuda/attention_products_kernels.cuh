// The row kernels and layout changes of attention as products (see attention_products.cu), in a
// header of their own so tests/cuda_emulation can run them on the CPU.
#pragma once

#include <cuda_bf16.h>

#include <cmath>
#include <cstdint>

#include "backends/cuda/device_math.cuh"

namespace tfm::cuda {
namespace {

constexpr int kThreads = 256;

// Element i of [batch, seq, heads, d], and where it sits in [batch, heads, seq, d].
__device__ __forceinline__ int64_t head_major_index(int64_t i, int64_t seq, int64_t heads,
                                                    int64_t d) {
  const int64_t e = i % d, h = (i / d) % heads, s = (i / (d * heads)) % seq,
                b = i / (d * heads * seq);
  return ((b * heads + h) * seq + s) * d + e;
}

template <typename T>
__global__ void to_head_major_kernel(const T* x, int64_t seq, int64_t heads, int64_t d,
                                     int64_t total, __nv_bfloat16* out) {
  const int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x;
  if (i < total) out[head_major_index(i, seq, heads, d)] = narrow<__nv_bfloat16>(widen(x[i]));
}

template <typename Out>
__global__ void from_head_major_kernel(const float* x, int64_t seq, int64_t heads, int64_t d,
                                       int64_t total, Out* out) {
  const int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x;
  if (i < total) out[i] = narrow<Out>(x[head_major_index(i, seq, heads, d)]);
}

// One block per row of scores: (batch row, head, query).
__global__ void __launch_bounds__(kThreads)
    masked_softmax_kernel(float* scores, __nv_bfloat16* probs, const int32_t* mask,
                          const int32_t* slots, int64_t heads, int64_t seq, int64_t len, int64_t ld,
                          float scale, int64_t window) {
  const int64_t row = blockIdx.x, query = row % seq, b = row / (seq * heads);
  float* x = scores + row * ld;
  __nv_bfloat16* p = probs + row * ld;
  const int32_t* visible_mask = mask + b * len;
  const int64_t last = slots[query];
  const int64_t first = first_visible_key(last, window);
  const auto visible = [&](int64_t j) { return j >= first && j <= last && visible_mask[j] != 0; };
  float max_score = -INFINITY;
  for (int64_t j = threadIdx.x; j < len; j += blockDim.x) {
    if (visible(j)) max_score = fmaxf(max_score, x[j] * scale);
  }
  max_score = block_reduce(max_score, Max{});
  float sum = 0.f;
  for (int64_t j = threadIdx.x; j < len; j += blockDim.x) {
    const float e = visible(j) ? expf(x[j] * scale - max_score) : 0.f;
    x[j] = e;
    sum += e;
  }
  sum = block_reduce(sum, Sum{});
  const float inv_sum = sum > 0.f ? 1.f / sum : 0.f;
  for (int64_t j = threadIdx.x; j < len; j += blockDim.x) {
    const float value = x[j] * inv_sum;
    x[j] = value;
    p[j] = narrow<__nv_bfloat16>(value);
  }
}

__global__ void __launch_bounds__(kThreads)
    softmax_grad_kernel(const float* probs, const float* d_probs, int64_t len, int64_t ld,
                        float scale, __nv_bfloat16* d_scores) {
  const int64_t row = blockIdx.x;
  const float* p = probs + row * ld;
  const float* dp = d_probs + row * ld;
  float delta = 0.f;
  for (int64_t j = threadIdx.x; j < len; j += blockDim.x) delta += p[j] * dp[j];
  delta = block_reduce(delta, Sum{});
  __nv_bfloat16* ds = d_scores + row * ld;
  for (int64_t j = threadIdx.x; j < len; j += blockDim.x) {
    ds[j] = narrow<__nv_bfloat16>(scale * (p[j] * (dp[j] - delta)));
  }
}

}  // namespace
}  // namespace tfm::cuda
