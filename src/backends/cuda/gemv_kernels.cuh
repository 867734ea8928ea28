// The decode GEMV kernels (see gemv.cu), in a header of their own so tests/cuda_emulation can run
// them on the CPU.
#pragma once

#include <cuda_bf16.h>

#include "backends/cuda/device_math.cuh"
#include "backends/cuda/kernels.h"

namespace tfm::cuda {
namespace {

constexpr int kWarps = 8;  // per block; each output column takes 1, 2, 4 or 8 of them

// A lane's 8 weights of one step as loaded (16 bytes of bf16, or 32 of f32), widened when used.
// Weights are read once per step: the loads stream them past the caches.
template <typename W>
struct Raw8;

template <>
struct Raw8<__nv_bfloat16> {
  uint4 bits;
  __device__ __forceinline__ void load(const __nv_bfloat16* p) {
    bits = __ldcs(reinterpret_cast<const uint4*>(p));
  }
  __device__ __forceinline__ void widen(float (&out)[8]) const {
    const auto* pairs = reinterpret_cast<const __nv_bfloat162*>(&bits);
#pragma unroll
    for (int i = 0; i < 4; ++i) {
      const float2 f = __bfloat1622float2(pairs[i]);
      out[2 * i] = f.x;
      out[2 * i + 1] = f.y;
    }
  }
};

template <>
struct Raw8<float> {
  float4 a, b;
  __device__ __forceinline__ void load(const float* p) {
    a = __ldcs(reinterpret_cast<const float4*>(p));
    b = __ldcs(reinterpret_cast<const float4*>(p) + 1);
  }
  __device__ __forceinline__ void widen(float (&out)[8]) const {
    out[0] = a.x, out[1] = a.y, out[2] = a.z, out[3] = a.w;
    out[4] = b.x, out[5] = b.y, out[6] = b.z, out[7] = b.w;
  }
};

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

// A lane's weights of its first kEarlySteps steps of R rows, loaded apart from the rest so that
// they may go out before the kernel waits for the one before it (before_early_reads): for the
// decode products every step a lane has, so that their round trip overlaps that kernel's end.
constexpr int kEarlySteps = 4;

// Calls f(i, base) for the first kEarlySteps steps of a lane's slice that start below k.
template <typename F>
__device__ __forceinline__ void for_each_early_step(const ColumnSlice& c, int k, F f) {
  if (!c.active) return;
#pragma unroll
  for (int i = 0; i < kEarlySteps; ++i) {
    const int base = c.first + i * c.step;
    if (base >= k) return;
    f(i, base);
  }
}

template <typename W, int R>
struct EarlySteps {
  const W* rows[R];
  Raw8<W> steps[kEarlySteps][R];

  __device__ __forceinline__ EarlySteps(const W* const (&from)[R], const ColumnSlice& c, int k) {
#pragma unroll
    for (int r = 0; r < R; ++r) rows[r] = from[r];
    for_each_early_step(c, k, [&](int i, int base) {
#pragma unroll
      for (int r = 0; r < R; ++r) steps[i][r].load(rows[r] + base);
    });
  }

  // Calls step(base, raw) for each step of this lane's slice, in order, raw[r] the weights of
  // row r: the first kEarlySteps as loaded early, the rest loaded as it goes.
  template <typename Step>
  __device__ __forceinline__ void walk(int k, const ColumnSlice& c, Step step) const {
    if (!c.active) return;
    for_each_early_step(c, k, [&](int i, int base) { step(base, steps[i]); });
#pragma unroll 4
    for (int base = c.first + kEarlySteps * c.step; base < k; base += c.step) {
      Raw8<W> raw[R];
#pragma unroll
      for (int r = 0; r < R; ++r) raw[r].load(rows[r] + base);
      step(base, raw);
    }
  }
};

// Brings the inputs of a lane's early steps (x's M rows and the norm's weights, which the kernel
// before wrote or which every block reads) into L1 at once, after the wait: the walk then loads
// them a step at a time (prefetch_l1).
template <int M, bool kNorm>
__device__ __forceinline__ void prefetch_early_inputs(const float* x, const NormedRows<kNorm>& norm,
                                                      int k, const ColumnSlice& c) {
  for_each_early_step(c, k, [&](int, int base) {
#pragma unroll
    for (int m = 0; m < M; ++m) prefetch_l1(x + static_cast<int64_t>(m) * k + base);
    if constexpr (kNorm) prefetch_l1(norm.g + base);
  });
}

// Whether this thread writes its column's results: lane 0 of the column's first slice.
__device__ __forceinline__ bool writes_column(const ColumnSlice& c, int slices) {
  return c.active && threadIdx.x % (32 * slices) == 0;
}

// A column's products with x's M rows (normed when asked), summed over the column's warps; every
// lane of those warps gets them. Loads the row's first weights (before the wait on the kernel
// before when `early`: device_math.cuh), then streams the rest, each lane 8 weights a step,
// gathering the rows' sums of squares from the same loads of x with a norm. after_wait() runs
// once the kernel before is done (the caller's prefetches of what it reads after the products).
// Needs k % 8 == 0 and 16-byte aligned rows.
template <typename W, int M, bool kNorm, typename AfterWait>
__device__ __forceinline__ void column_products(const W* row, const float* x,
                                                NormedRows<kNorm> norm, int k, const ColumnSlice& c,
                                                int slices, bool early_weights, float (&sum)[M],
                                                AfterWait after_wait) {
  before_early_reads(early_weights);
  const EarlySteps<W, 1> early({row}, c, k);
  after_early_reads(early_weights);
  prefetch_early_inputs<M>(x, norm, k, c);
  after_wait();
  float sum_sq[M] = {};
#pragma unroll
  for (int m = 0; m < M; ++m) sum[m] = 0.f;
  early.walk(k, c, [&](int base, const Raw8<W>(&raw)[1]) {
    float wv[8];
    raw[0].widen(wv);
    norm.weigh(base, wv);
#pragma unroll
    for (int m = 0; m < M; ++m) {
      float xv[8];
      load8_cached(x + static_cast<int64_t>(m) * k + base, xv);
      sum[m] += dot8(wv, xv);
      if constexpr (kNorm) sum_sq[m] += dot8(xv, xv);
    }
  });
  sum_slices(sum, slices);
  if constexpr (kNorm) sum_slices(sum_sq, slices);
#pragma unroll
  for (int m = 0; m < M; ++m) sum[m] *= norm.factor(sum_sq[m], k);
}

template <typename W, int M, bool kNorm>
__global__ void __launch_bounds__(kWarps * 32)
    gemv_kernel(const float* __restrict__ x, const W* __restrict__ w, NormedRows<kNorm> norm,
                const float* __restrict__ bias, const float* __restrict__ residual, int n, int k,
                int slices, float* __restrict__ y, bool early_weights) {
  const ColumnSlice c = column_slice(slices, n);
  float sum[M];
  // The residual (written by a kernel before) comes into L1 while the products run, so that the
  // write does not wait a round trip for it.
  const auto prefetch_residual = [&] {
    if (residual == nullptr || !writes_column(c, slices)) return;
#pragma unroll
    for (int m = 0; m < M; ++m) prefetch_l1(residual + static_cast<int64_t>(m) * n + c.col);
  };
  column_products(w + static_cast<int64_t>(c.col) * k, x, norm, k, c, slices, early_weights, sum,
                  prefetch_residual);
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
                    const __grid_constant__ QkvProducts p, int k, int slices, bool early_weights) {
  ColumnSlice c = column_slice(slices, static_cast<int>(p.n[0] + p.n[1] + p.n[2]));
  int i = 0;
  while (i < 2 && c.col >= p.n[i]) c.col -= static_cast<int>(p.n[i++]);
  float sum[M];
  column_products(static_cast<const W*>(p.w[i]) + static_cast<int64_t>(c.col) * k, x, norm, k, c,
                  slices, early_weights, sum, [] {});
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
                      int slices, float* __restrict__ y, bool early_weights) {
  const ColumnSlice c = column_slice(slices, n);
  const W* gate_row = wg + static_cast<int64_t>(c.col) * k;
  const W* up_row = wu + static_cast<int64_t>(c.col) * k;
  before_early_reads(early_weights);
  const EarlySteps<W, 2> early({gate_row, up_row}, c, k);
  after_early_reads(early_weights);
  prefetch_early_inputs<M>(x, norm, k, c);
  float gate[M] = {}, up[M] = {}, sum_sq[M] = {};
  early.walk(k, c, [&](int base, const Raw8<W>(&raw)[2]) {
    float gv[8], uv[8];
    raw[0].widen(gv);
    raw[1].widen(uv);
    norm.weigh(base, gv, uv);
#pragma unroll
    for (int m = 0; m < M; ++m) {
      float xv[8];
      load8_cached(x + static_cast<int64_t>(m) * k + base, xv);
      gate[m] += dot8(gv, xv);
      up[m] += dot8(uv, xv);
      if constexpr (kNorm) sum_sq[m] += dot8(xv, xv);
    }
  });
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
