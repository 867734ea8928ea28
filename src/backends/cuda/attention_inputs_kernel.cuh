// The prepare_attention kernel (see attention_inputs.cu), in a header of its own so
// tests/cuda_emulation can run it on the CPU.
#pragma once

#include <cuda_bf16.h>

#include "backends/cuda/device_math.cuh"
#include "backends/cuda/kernels.h"

namespace tfm::cuda {
namespace {

constexpr int kThreads = 256;

struct Params {
  AttentionInputs in;
  float eps, scaling;
  AttentionShape shape;
  float* q_out;
};

// Asks for the L1 lines of x[0 .. count), a line a lane (a warp's loops over a head then find
// them there: their loads otherwise go out one loop step at a time, a round trip to L2 each).
__device__ __forceinline__ void prefetch_row(const float* x, int count, int lane) {
  for (int i = lane * 32; i < count; i += 32 * 32) prefetch_l1(x + i);
}

// A head's D values normed (when `norm` is given) and rotated; pairs (f, f + D/2) go to
// store(f, first, second). The arithmetic is the rms_norm and rope kernels', in their order.
template <typename Store>
__device__ void norm_and_rotate(const Params& p, const float* x, const float* norm, int64_t token,
                                int lane, Store store) {
  const int d = static_cast<int>(p.shape.head_dim), half = d / 2;
  prefetch_row(x, d, lane);
  if (norm != nullptr) prefetch_row(norm, d, lane);
  prefetch_row(p.in.inv_freq, half, lane);
  float inv_rms = 1.f;
  if (norm != nullptr) {
    float sum_sq = 0.f;
    for (int i = lane; i < d; i += 32) sum_sq += x[i] * x[i];
    sum_sq = warp_sum(sum_sq);
    inv_rms = 1.f / sqrtf(sum_sq / static_cast<float>(d) + p.eps);
  }
  // The angle is formed in f32 as PyTorch does, so large positions round the same way.
  const float position = static_cast<float>(p.in.positions[token]);
  for (int f = lane; f < half; f += 32) {
    float x1 = x[f], x2 = x[f + half];
    if (norm != nullptr) {
      x1 = norm[f] * (x1 * inv_rms);
      x2 = norm[f + half] * (x2 * inv_rms);
    }
    const float angle = position * p.in.inv_freq[f];
    const float c = cosf(angle) * p.scaling, s = sinf(angle) * p.scaling;
    store(f, x1 * c - x2 * s, x2 * c + x1 * s);
  }
}

template <typename T>
__global__ void __launch_bounds__(kThreads)
    prepare_attention_kernel(Params p, T* k_cache, T* v_cache) {
  await_previous_kernels();
  const AttentionShape& s = p.shape;
  const int64_t heads = s.q_heads + 2 * s.kv_heads, d = s.head_dim, half = d / 2;
  const int64_t warp = (blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x) / 32;
  const int lane = static_cast<int>(threadIdx.x % 32);
  if (warp >= s.batch * s.seq * heads) return;
  const int64_t token = warp / heads, head = warp % heads;
  if (head < s.q_heads) {
    float* out = p.q_out + (token * s.q_heads + head) * d;
    norm_and_rotate(p, p.in.q + (token * s.q_heads + head) * d, p.in.q_norm, token, lane,
                    [&](int f, float first, float second) {
                      out[f] = first;
                      out[f + half] = second;
                    });
    return;
  }
  // k and v rows go to the token's cache slot; a slot outside the cache writes nothing.
  const int64_t b = token / s.seq, slot = p.in.slots[token % s.seq];
  if (slot < 0 || slot >= s.cache_len) return;
  const int64_t kv_head = (head - s.q_heads) % s.kv_heads;
  const int64_t from = (token * s.kv_heads + kv_head) * d;
  const int64_t to = ((b * s.cache_len + slot) * s.kv_heads + kv_head) * d;
  if (head < s.q_heads + s.kv_heads) {
    T* out = k_cache + to;
    norm_and_rotate(p, p.in.k + from, p.in.k_norm, token, lane,
                    [&](int f, float first, float second) {
                      out[f] = narrow<T>(first);
                      out[f + half] = narrow<T>(second);
                    });
  } else {
    prefetch_row(p.in.v + from, static_cast<int>(d), lane);
    for (int64_t i = lane; i < d; i += 32) v_cache[to + i] = narrow<T>(p.in.v[from + i]);
  }
}

}  // namespace
}  // namespace tfm::cuda
