// The kernels of attention's backward pass over f32 operands (see attention_grad.cu), in a header
// of their own so tests/cuda_emulation can run them on the CPU.
#pragma once

#include <cmath>
#include <cstdint>

#include "backends/cuda/device_math.cuh"
#include "backends/cuda/kernels.h"

namespace tfm::cuda {
namespace {

constexpr int kWarps = 4;

struct RowStats {
  float max, inv_sum, delta;
};

struct Operands {
  const float *q, *k, *v, *dy;
  const int32_t *mask, *slots;
};

template <int E>
__device__ __forceinline__ void load_row(const float* p, int head_dim, float (&out)[E]) {
#pragma unroll
  for (int e = 0; e < E; ++e) {
    const int d = threadIdx.x % 32 + 32 * e;
    out[e] = d < head_dim ? p[d] : 0.f;
  }
}

template <int E>
__device__ __forceinline__ void store_row(const float (&in)[E], float scale, int head_dim,
                                          float* p) {
#pragma unroll
  for (int e = 0; e < E; ++e) {
    const int d = threadIdx.x % 32 + 32 * e;
    if (d < head_dim) p[d] = scale * in[e];
  }
}

// Every lane gets the sum, and the same operands give the same bits in every kernel: the gradient
// kernels recompute the very scores row_stats normalized.
template <int E>
__device__ __forceinline__ float dot(const float (&a)[E], const float (&b)[E]) {
  float sum = 0.f;
#pragma unroll
  for (int e = 0; e < E; ++e) sum += a[e] * b[e];
  return warp_sum(sum);
}

// Leaves the block's total in every warp's `acc`, added in warp order.
template <int E>
__device__ __forceinline__ void sum_over_warps(float (&acc)[E]) {
  __shared__ float per_warp[kWarps][32 * E];
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  __syncthreads();  // an earlier call's readers are done with per_warp
#pragma unroll
  for (int e = 0; e < E; ++e) per_warp[warp][lane + 32 * e] = acc[e];
  __syncthreads();
#pragma unroll
  for (int e = 0; e < E; ++e) {
    float sum = 0.f;
    for (int w = 0; w < kWarps; ++w) sum += per_warp[w][lane + 32 * e];
    acc[e] = sum;
  }
}

// The query row of a (batch, query, q head) block and the keys it sees: begin <= j < end with
// mask[b, j].
struct QueryRow {
  int64_t row, b, kv_row0, begin, end;  // kv_row0: row of key 0 of its KV head in k and v
};

__device__ __forceinline__ QueryRow query_row(const AttentionShape& s, const int32_t* slots) {
  const int64_t row = blockIdx.x;
  const int64_t h = row % s.q_heads, token = row / s.q_heads;
  const int64_t i = token % s.seq, b = token / s.seq;
  const int64_t kvh = h / (s.q_heads / s.kv_heads);
  const int64_t end = min(static_cast<int64_t>(slots[i]) + 1, s.cache_len);
  return {row, b, b * s.cache_len * s.kv_heads + kvh, first_visible_key(slots[i], s.window), end};
}

template <int E>
__global__ void __launch_bounds__(kWarps * 32)
    row_stats_kernel(Operands o, AttentionShape s, float scale, RowStats* __restrict__ stats) {
  const int D = static_cast<int>(s.head_dim);
  const QueryRow r = query_row(s, o.slots);
  const int warp = threadIdx.x / 32;
  float qr[E], dyr[E];
  load_row(o.q + r.row * D, D, qr);
  load_row(o.dy + r.row * D, D, dyr);
  // Online softmax as in the forward kernel, carrying sum(exp(score - max) * dP) along.
  float m = -INFINITY, l = 0.f, t = 0.f;
  for (int64_t j = r.begin + warp; j < r.end; j += kWarps) {
    if (o.mask[r.b * s.cache_len + j] == 0) continue;
    const int64_t at = (r.kv_row0 + j * s.kv_heads) * D;
    float kr[E], vr[E];
    load_row(o.k + at, D, kr);
    load_row(o.v + at, D, vr);
    const float score = dot(qr, kr) * scale, dp = dot(dyr, vr);
    const float m_new = fmaxf(m, score);
    const float correction = expf(m - m_new), p = expf(score - m_new);
    l = l * correction + p;
    t = t * correction + p * dp;
    m = m_new;
  }
  __shared__ float warp_m[kWarps], warp_l[kWarps], warp_t[kWarps];
  if (threadIdx.x % 32 == 0) warp_m[warp] = m, warp_l[warp] = l, warp_t[warp] = t;
  __syncthreads();
  if (threadIdx.x != 0) return;
  float block_m = -INFINITY;
  for (int w = 0; w < kWarps; ++w) {
    if (warp_l[w] > 0.f) block_m = fmaxf(block_m, warp_m[w]);
  }
  float sum = 0.f, weighted = 0.f;
  for (int w = 0; w < kWarps; ++w) {
    if (warp_l[w] == 0.f) continue;
    const float f = expf(warp_m[w] - block_m);
    sum += warp_l[w] * f;
    weighted += warp_t[w] * f;
  }
  // A query that sees no key has no probabilities: the gradient kernels never read its stats.
  stats[r.row] = sum > 0.f ? RowStats{block_m, 1.f / sum, weighted / sum} : RowStats{0.f, 0.f, 0.f};
}

template <int E>
__global__ void __launch_bounds__(kWarps * 32)
    query_grad_kernel(Operands o, AttentionShape s, float scale, const RowStats* __restrict__ stats,
                      float* __restrict__ dq) {
  const int D = static_cast<int>(s.head_dim);
  const QueryRow r = query_row(s, o.slots);
  float qr[E], dyr[E], acc[E] = {};
  load_row(o.q + r.row * D, D, qr);
  load_row(o.dy + r.row * D, D, dyr);
  const RowStats st = stats[r.row];
  for (int64_t j = r.begin + threadIdx.x / 32; j < r.end; j += kWarps) {
    if (o.mask[r.b * s.cache_len + j] == 0) continue;
    const int64_t at = (r.kv_row0 + j * s.kv_heads) * D;
    float kr[E], vr[E];
    load_row(o.k + at, D, kr);
    load_row(o.v + at, D, vr);
    const float p = expf(dot(qr, kr) * scale - st.max) * st.inv_sum;
    const float ds = p * (dot(dyr, vr) - st.delta);
#pragma unroll
    for (int e = 0; e < E; ++e) acc[e] += ds * kr[e];
  }
  sum_over_warps(acc);
  if (threadIdx.x < 32) store_row(acc, scale, D, dq + r.row * D);
}

template <int E>
__global__ void __launch_bounds__(kWarps * 32)
    key_grad_kernel(Operands o, AttentionShape s, float scale, const RowStats* __restrict__ stats,
                    float* __restrict__ dk, float* __restrict__ dv) {
  const int D = static_cast<int>(s.head_dim);
  const int64_t row = blockIdx.x;  // of k and v: ((b * L + j) * Hkv + kvh)
  const int64_t kvh = row % s.kv_heads, key = row / s.kv_heads;
  const int64_t j = key % s.cache_len, b = key / s.cache_len;
  const int64_t group = s.q_heads / s.kv_heads;
  float kr[E], vr[E], dk_acc[E] = {}, dv_acc[E] = {};
  load_row(o.k + row * D, D, kr);
  load_row(o.v + row * D, D, vr);
  // A masked key is seen by no query: its gradients stay zero.
  const int64_t pairs = o.mask[b * s.cache_len + j] != 0 ? s.seq * group : 0;
  for (int64_t t = threadIdx.x / 32; t < pairs; t += kWarps) {
    const int64_t i = t / group, h = kvh * group + t % group;
    if (j > o.slots[i] || j < first_visible_key(o.slots[i], s.window)) continue;
    const int64_t q_row = (b * s.seq + i) * s.q_heads + h;
    float qr[E], dyr[E];
    load_row(o.q + q_row * D, D, qr);
    load_row(o.dy + q_row * D, D, dyr);
    const RowStats st = stats[q_row];
    const float p = expf(dot(qr, kr) * scale - st.max) * st.inv_sum;
    const float ds = p * (dot(dyr, vr) - st.delta);
#pragma unroll
    for (int e = 0; e < E; ++e) {
      dk_acc[e] += ds * qr[e];
      dv_acc[e] += p * dyr[e];
    }
  }
  sum_over_warps(dk_acc);
  sum_over_warps(dv_acc);
  if (threadIdx.x < 32) {
    store_row(dk_acc, scale, D, dk + row * D);
    store_row(dv_acc, 1.f, D, dv + row * D);
  }
}

}  // namespace
}  // namespace tfm::cuda
