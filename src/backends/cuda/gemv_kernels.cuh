// The decode GEMV kernels (see gemv.cu), in a header of their own so tests/cuda_emulation can run
// them on the CPU.
#pragma once

#include <cuda_bf16.h>

#include "backends/cuda/device_math.cuh"
#include "backends/cuda/kernels.h"

namespace tfm::cuda {
namespace {

constexpr int kWarps = 8;  // per block; each output column takes 1, 2, 4 or 8 of them

__device__ __forceinline__ void load8(const __nv_bfloat16* p, float (&out)[8]) {
  // Weights are read once per step: stream them past the caches.
  const uint4 raw = __ldcs(reinterpret_cast<const uint4*>(p));
  const auto* pairs = reinterpret_cast<const __nv_bfloat162*>(&raw);
#pragma unroll
  for (int i = 0; i < 4; ++i) {
    const float2 f = __bfloat1622float2(pairs[i]);
    out[2 * i] = f.x;
    out[2 * i + 1] = f.y;
  }
}

__device__ __forceinline__ void load8(const float* p, float (&out)[8]) {
  const float4 a = __ldcs(reinterpret_cast<const float4*>(p));
  const float4 b = __ldcs(reinterpret_cast<const float4*>(p) + 1);
  out[0] = a.x, out[1] = a.y, out[2] = a.z, out[3] = a.w;
  out[4] = b.x, out[5] = b.y, out[6] = b.z, out[7] = b.w;
}

__device__ __forceinline__ float dot8(const float (&a)[8], const float (&b)[8]) {
  return a[0] * b[0] + a[1] * b[1] + a[2] * b[2] + a[3] * b[3] + a[4] * b[4] + a[5] * b[5] +
         a[6] * b[6] + a[7] * b[7];
}

// With an input norm the products read x / rms(x) * g: the kernels stream w * g against x and
// scale each row's sum by 1 / rms(x), whose sum of squares they gather from the same loads.
template <bool kNorm>
struct NormedRows {
  static constexpr bool kNormed = kNorm;
  const float* g;
  float eps;

  // w[0..7] (and v[0..7]) *= g[base..base + 7].
  __device__ __forceinline__ void weigh(int base, float (&w)[8]) const {
    if constexpr (kNorm) {
      float gv[8];
      load8_cached(g + base, gv);
#pragma unroll
      for (int i = 0; i < 8; ++i) w[i] *= gv[i];
    }
  }
  __device__ __forceinline__ void weigh(int base, float (&w)[8], float (&v)[8]) const {
    if constexpr (kNorm) {
      float gv[8];
      load8_cached(g + base, gv);
#pragma unroll
      for (int i = 0; i < 8; ++i) w[i] *= gv[i], v[i] *= gv[i];
    }
  }
  // The factor a row's summed product is scaled by, from the row's sum of squares.
  __device__ __forceinline__ float factor(float sum_sq, int k) const {
    if constexpr (kNorm) {
      return 1.f / sqrtf(sum_sq / static_cast<float>(k) + eps);
    } else {
      return 1.f;
    }
  }
};

// Each output column is read by `slices` warps of a block (1, 2, 4 or 8, chosen per shape so that
// a product with few columns still keeps enough loads in flight), warp w reading the k slice
// w % slices: lane `lane` of slice s starts at element (s * 32 + lane) * 8 and steps over
// 32 * 8 * slices elements.
struct ColumnSlice {
  int col, first, step;
  bool active;
};

// The grid for n columns of `slices` warps each.
inline int gemv_blocks(int64_t n, int slices) {
  const int64_t columns_per_block = kWarps / slices;
  return static_cast<int>((n + columns_per_block - 1) / columns_per_block);
}

__device__ __forceinline__ ColumnSlice column_slice(int slices, int n) {
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int col = blockIdx.x * (kWarps / slices) + warp / slices;
  return {col, ((warp % slices) * 32 + lane) * 8, 32 * 8 * slices, col < n};
}

// Sums each of v's entries over the lanes of a warp, then over the warps that share a column
// (their slices), in a fixed order; every lane of those warps gets the totals. Every thread of
// the block calls it (it holds barriers when slices > 1).
template <int N>
__device__ __forceinline__ void sum_slices(float (&v)[N], int slices) {
#pragma unroll
  for (int i = 0; i < N; ++i) v[i] = warp_sum(v[i]);
  if (slices == 1) return;
  __shared__ float per_warp[kWarps][N];
  const int warp = threadIdx.x / 32;
  __syncthreads();  // an earlier call's readers are done with per_warp
  if (threadIdx.x % 32 == 0) {
#pragma unroll
    for (int i = 0; i < N; ++i) per_warp[warp][i] = v[i];
  }
  __syncthreads();
  const int first = warp - warp % slices;
#pragma unroll
  for (int i = 0; i < N; ++i) {
    float total = 0.f;
    for (int w = 0; w < slices; ++w) total += per_warp[first + w][i];
    v[i] = total;
  }
}

// Prefetches into L2 the first loads of this lane's part of a weight row (what its first round of
// loads asks for, one request per line): enough to overlap the kernel before, few enough that a
// large layer's prefetches do not push each other out of L2.
constexpr int kPrefetchedSteps = 4;

template <typename W>
__device__ __forceinline__ void prefetch_slice(const W* row, const ColumnSlice& c, int k) {
  constexpr int kLanesPerLine = 128 / (8 * static_cast<int>(sizeof(W)));
  if (!c.active || threadIdx.x % kLanesPerLine != 0) return;
  for (int i = 0, base = c.first; i < kPrefetchedSteps && base < k; ++i, base += c.step) {
    prefetch_l2(row + base);
  }
}

// Whether this thread writes its column's results: lane 0 of the column's first slice.
__device__ __forceinline__ bool writes_column(const ColumnSlice& c, int slices) {
  return c.active && threadIdx.x % (32 * slices) == 0;
}

// acc[m] += row · x[m] over this slice of k (each lane streams 8 weights at a time), and with a
// norm sum_sq[m] += x[m] · x[m]. Needs k % 8 == 0 and 16-byte aligned rows.
template <typename W, int M, bool kNorm>
__device__ __forceinline__ void row_dots(const W* row, const float* x, NormedRows<kNorm> norm,
                                         int k, const ColumnSlice& c, float (&acc)[M],
                                         float (&sum_sq)[M]) {
  if (!c.active) return;
#pragma unroll 4
  for (int base = c.first; base < k; base += c.step) {
    float wv[8];
    load8(row + base, wv);
    norm.weigh(base, wv);
#pragma unroll
    for (int m = 0; m < M; ++m) {
      float xv[8];
      load8_cached(x + static_cast<int64_t>(m) * k + base, xv);
      acc[m] += dot8(wv, xv);
      if constexpr (kNorm) sum_sq[m] += dot8(xv, xv);
    }
  }
}

// A column's products with x's M rows (normed when asked), summed over the column's warps; every
// lane of those warps gets them. Prefetches the row's first weights, waits for the kernel before
// (overlapped_launch.h), then streams the row.
template <typename W, int M, bool kNorm>
__device__ __forceinline__ void column_products(const W* row, const float* x,
                                                NormedRows<kNorm> norm, int k, const ColumnSlice& c,
                                                int slices, float (&sum)[M]) {
  prefetch_slice(row, c, k);
  await_previous_kernels();
  float sum_sq[M] = {};
#pragma unroll
  for (int m = 0; m < M; ++m) sum[m] = 0.f;
  row_dots(row, x, norm, k, c, sum, sum_sq);
  sum_slices(sum, slices);
  if constexpr (kNorm) sum_slices(sum_sq, slices);
#pragma unroll
  for (int m = 0; m < M; ++m) sum[m] *= norm.factor(sum_sq[m], k);
}

template <typename W, int M, bool kNorm>
__global__ void __launch_bounds__(kWarps * 32)
    gemv_kernel(const float* __restrict__ x, const W* __restrict__ w, NormedRows<kNorm> norm,
                const float* __restrict__ bias, const float* __restrict__ residual, int n, int k,
                int slices, float* __restrict__ y) {
  const ColumnSlice c = column_slice(slices, n);
  float sum[M];
  column_products(w + static_cast<int64_t>(c.col) * k, x, norm, k, c, slices, sum);
  if (!writes_column(c, slices)) return;
#pragma unroll
  for (int m = 0; m < M; ++m) {
    const int64_t at = static_cast<int64_t>(m) * n + c.col;
    // The same order of additions as the cpu: (product + bias) + residual.
    y[at] = (sum[m] + (bias ? bias[c.col] : 0.f)) + (residual ? residual[at] : 0.f);
  }
}

// The columns of q, k and v's weights one after the other: each warp finds its weight and writes
// that product's own output. Needs k % 8 == 0 and 16-byte aligned rows.
template <typename W, int M, bool kNorm>
__global__ void __launch_bounds__(kWarps * 32)
    qkv_gemv_kernel(const float* __restrict__ x, NormedRows<kNorm> norm,
                    const __grid_constant__ QkvProducts p, int k, int slices) {
  ColumnSlice c = column_slice(slices, static_cast<int>(p.n[0] + p.n[1] + p.n[2]));
  int i = 0;
  while (i < 2 && c.col >= p.n[i]) c.col -= static_cast<int>(p.n[i++]);
  float sum[M];
  column_products(static_cast<const W*>(p.w[i]) + static_cast<int64_t>(c.col) * k, x, norm, k, c,
                  slices, sum);
  if (!writes_column(c, slices)) return;
#pragma unroll
  for (int m = 0; m < M; ++m)
    p.y[i][m * p.n[i] + c.col] = sum[m] + (p.bias[i] ? p.bias[i][c.col] : 0.f);
}

// Any k and alignment, one element per lane per step; `norm` as in the kernels above.
template <typename W>
__global__ void gemv_any_kernel(const float* x, const W* w, InputNorm norm, const float* bias,
                                const float* residual, int m, int n, int k, float* y) {
  const int col = blockIdx.x * kWarps + threadIdx.x / 32, lane = threadIdx.x % 32;
  if (col >= n) return;
  const W* row = w + static_cast<int64_t>(col) * k;
  for (int r = 0; r < m; ++r) {
    float acc = 0.f, sum_sq = 0.f;
    for (int i = lane; i < k; i += 32) {
      const float xi = x[static_cast<int64_t>(r) * k + i];
      acc += widen(row[i]) * (norm.weight ? norm.weight[i] * xi : xi);
      sum_sq += xi * xi;
    }
    acc = warp_sum(acc);
    sum_sq = warp_sum(sum_sq);
    if (norm.weight) acc *= 1.f / sqrtf(sum_sq / static_cast<float>(k) + norm.eps);
    const int64_t at = static_cast<int64_t>(r) * n + col;
    if (lane == 0) y[at] = (acc + (bias ? bias[col] : 0.f)) + (residual ? residual[at] : 0.f);
  }
}

// silu(x wg^T + bg) * (x wu^T + bu): each column's warps stream its gate and up rows once.
// Needs k % 8 == 0 and 16-byte aligned rows.
template <typename W, int M, bool kNorm>
__global__ void __launch_bounds__(kWarps * 32)
    gated_gemv_kernel(const float* __restrict__ x, const W* __restrict__ wg,
                      const W* __restrict__ wu, NormedRows<kNorm> norm,
                      const float* __restrict__ bg, const float* __restrict__ bu, int n, int k,
                      int slices, float* __restrict__ y) {
  const ColumnSlice c = column_slice(slices, n);
  const W* gate_row = wg + static_cast<int64_t>(c.col) * k;
  const W* up_row = wu + static_cast<int64_t>(c.col) * k;
  prefetch_slice(gate_row, c, k);
  prefetch_slice(up_row, c, k);
  await_previous_kernels();
  float gate[M] = {}, up[M] = {}, sum_sq[M] = {};
  if (c.active) {
#pragma unroll 2
    for (int base = c.first; base < k; base += c.step) {
      float gv[8], uv[8];
      load8(gate_row + base, gv);
      load8(up_row + base, uv);
      norm.weigh(base, gv, uv);
#pragma unroll
      for (int m = 0; m < M; ++m) {
        float xv[8];
        load8_cached(x + static_cast<int64_t>(m) * k + base, xv);
        gate[m] += dot8(gv, xv);
        up[m] += dot8(uv, xv);
        if constexpr (kNorm) sum_sq[m] += dot8(xv, xv);
      }
    }
  }
  sum_slices(gate, slices);
  sum_slices(up, slices);
  if constexpr (kNorm) sum_slices(sum_sq, slices);
  if (!writes_column(c, slices)) return;
#pragma unroll
  for (int m = 0; m < M; ++m) {
    const float factor = norm.factor(sum_sq[m], k);
    const float g = gate[m] * factor + (bg ? bg[c.col] : 0.f);
    const float u = up[m] * factor + (bu ? bu[c.col] : 0.f);
    y[static_cast<int64_t>(m) * n + c.col] = silu(g) * u;
  }
}

// Any k and alignment, one element per lane per step.
template <typename W>
__global__ void gated_gemv_any_kernel(const float* x, const W* wg, const W* wu, InputNorm norm,
                                      const float* bg, const float* bu, int m, int n, int k,
                                      float* y) {
  const int col = blockIdx.x * kWarps + threadIdx.x / 32, lane = threadIdx.x % 32;
  if (col >= n) return;
  const W* gate_row = wg + static_cast<int64_t>(col) * k;
  const W* up_row = wu + static_cast<int64_t>(col) * k;
  for (int r = 0; r < m; ++r) {
    float gate = 0.f, up = 0.f, sum_sq = 0.f;
    for (int i = lane; i < k; i += 32) {
      const float raw = x[static_cast<int64_t>(r) * k + i];
      const float xi = norm.weight ? norm.weight[i] * raw : raw;
      gate += widen(gate_row[i]) * xi;
      up += widen(up_row[i]) * xi;
      sum_sq += raw * raw;
    }
    sum_sq = warp_sum(sum_sq);
    const float factor = norm.weight ? 1.f / sqrtf(sum_sq / static_cast<float>(k) + norm.eps) : 1.f;
    const float g = warp_sum(gate) * factor + (bg ? bg[col] : 0.f);
    const float u = warp_sum(up) * factor + (bu ? bu[col] : 0.f);
    if (lane == 0) y[static_cast<int64_t>(r) * n + col] = silu(g) * u;
  }
}

}  // namespace
}  // namespace tfm::cuda
