// The split-K attention kernel over the static cache (see attention.cu), in a header of its own
// so tests/cuda_emulation can run it on the CPU.
#pragma once

#include <cuda_bf16.h>

#include <algorithm>

#include "backends/cuda/chunk_merge.cuh"
#include "backends/cuda/device_math.cuh"
#include "backends/cuda/kernels.h"

namespace tfm::cuda {
namespace {

constexpr int kWarps = 4;
constexpr int64_t kMinKeysPerSplit = 16;
// About as many blocks as an H200 holds at once (132 multiprocessors x 16 blocks of 128 threads):
// decode has few rows, and each block walks its keys one at a time per warp.
constexpr int64_t kTargetBlocks = 2048;

// How many chunks a row's keys are cut into. The cut itself is made in the kernel, over the keys a
// query sees (its slot + 1, known only when the step runs), so a short context in a long cache
// still spreads over every chunk.
struct Split {
  int64_t count;
};

// Empty shapes (no rows or no keys) get one split, so nothing divides by zero.
Split split_of(const AttentionShape& s) {
  const int64_t rows = std::max<int64_t>(1, s.batch * s.seq * s.q_heads);
  const int64_t max_splits = std::max<int64_t>(1, s.cache_len / kMinKeysPerSplit);
  return {std::clamp<int64_t>((kTargetBlocks + rows - 1) / rows, 1, max_splits)};
}

template <typename KV, int E>
__global__ void __launch_bounds__(kWarps * 32)
    attention_partial_kernel(const float* __restrict__ q, const KV* __restrict__ k,
                             const KV* __restrict__ v, const int32_t* __restrict__ mask,
                             const int32_t* __restrict__ slots, AttentionShape s, float scale,
                             float* __restrict__ partials, unsigned* __restrict__ arrivals,
                             float* __restrict__ out) {
  await_previous_kernels();
  const int64_t row = blockIdx.x, split = blockIdx.y, splits = gridDim.y;
  const int D = static_cast<int>(s.head_dim);
  const int64_t h = row % s.q_heads, token = row / s.q_heads;
  const int64_t i = token % s.seq, b = token / s.seq;
  const int64_t kvh = h / (s.q_heads / s.kv_heads);
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;

  float qr[E];
#pragma unroll
  for (int e = 0; e < E; ++e) {
    const int d = lane + 32 * e;
    qr[e] = d < D ? q[row * D + d] : 0.f;
  }
  const int64_t visible_end = min(static_cast<int64_t>(slots[i]) + 1, s.cache_len);
  const int64_t keys_per_split = max(int64_t{1}, (visible_end + splits - 1) / splits);
  const int64_t first = split * keys_per_split;
  const int64_t last = min(first + keys_per_split, visible_end);
  float m = -INFINITY, l = 0.f, acc[E] = {};
  for (int64_t j = first + warp; j < last; j += kWarps) {
    if (mask[b * s.cache_len + j] == 0) continue;
    const int64_t at = ((b * s.cache_len + j) * s.kv_heads + kvh) * D;
    float dot = 0.f;
#pragma unroll
    for (int e = 0; e < E; ++e) {
      const int d = lane + 32 * e;
      if (d < D) dot += qr[e] * widen(k[at + d]);
    }
    const float score = warp_sum(dot) * scale;
    const float m_new = fmaxf(m, score);
    const float correction = expf(m - m_new), p = expf(score - m_new);
    l = l * correction + p;
#pragma unroll
    for (int e = 0; e < E; ++e) {
      const int d = lane + 32 * e;
      acc[e] = acc[e] * correction + (d < D ? p * widen(v[at + d]) : 0.f);
    }
    m = m_new;
  }

  __shared__ float warp_m[kWarps], warp_l[kWarps];
  __shared__ float warp_acc[kWarps][32 * E];
  if (lane == 0) warp_m[warp] = m, warp_l[warp] = l;
#pragma unroll
  for (int e = 0; e < E; ++e) warp_acc[warp][lane + 32 * e] = acc[e];
  __syncthreads();
  if (warp != 0) return;
  float block_m = -INFINITY;
  for (int w = 0; w < kWarps; ++w) {
    if (warp_l[w] > 0.f) block_m = fmaxf(block_m, warp_m[w]);
  }
  float block_l = 0.f, chunk_out[E] = {};
  for (int w = 0; w < kWarps; ++w) {
    if (warp_l[w] == 0.f) continue;
    const float weight = expf(warp_m[w] - block_m);
    block_l += warp_l[w] * weight;
#pragma unroll
    for (int e = 0; e < E; ++e) chunk_out[e] += warp_acc[w][lane + 32 * e] * weight;
  }
  float* dst = partial_at(partials, row, split, splits, D);
  if (lane == 0) dst[0] = block_m, dst[1] = block_l;
#pragma unroll
  for (int e = 0; e < E; ++e) {
    const int d = lane + 32 * e;
    if (d < D) dst[2 + d] = chunk_out[e];
  }
  // Every lane's part of this chunk is visible device-wide before lane 0 counts it (the fence,
  // then the warp barrier that orders the lanes' writes before lane 0's atomic); the row's last
  // block merges, and leaves its counter at zero for the next launch.
  __threadfence();
  __syncwarp();
  unsigned arrived = 0;
  if (lane == 0) {
    __threadfence();
    arrived = atomicAdd(arrivals + row, 1u);
  }
  if (__shfl_sync(0xffffffffu, arrived, 0) != static_cast<unsigned>(splits - 1)) return;
  __threadfence();
  merge_chunks<E>(partial_at(partials, row, 0, splits, D), splits, D, out + row * D, lane);
  if (lane == 0) arrivals[row] = 0;
}

}  // namespace
}  // namespace tfm::cuda
