// Matrix-vector products for decode: the weights stream through once, 16 bytes per lane per load,
// while the few activation rows stay in L1.
#include <cuda_bf16.h>

#include <type_traits>

#include "backends/cuda/cuda_status.h"
#include "backends/cuda/device_math.cuh"
#include "backends/cuda/kernels.h"
#include "tfm/error.h"

namespace tfm::cuda {
namespace {

constexpr int kWarps = 8;  // output columns per block

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

// x[0..7] (activations or norm weights, small and reused) as two float4 through the read-only
// cache.
__device__ __forceinline__ void load8_cached(const float* x, float (&out)[8]) {
  const float4 a = __ldg(reinterpret_cast<const float4*>(x)),
               b = __ldg(reinterpret_cast<const float4*>(x) + 1);
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
  // The factor a row's warp-summed product is scaled by, from each lane's sum of squares.
  __device__ __forceinline__ float factor(float lane_sum_sq, int k) const {
    if constexpr (kNorm) {
      return 1.f / sqrtf(warp_sum(lane_sum_sq) / static_cast<float>(k) + eps);
    } else {
      return 1.f;
    }
  }
};

__device__ __forceinline__ float silu(float v) { return v / (1.f + expf(-v)); }

// acc[m] += row · x[m] over k for the warp's column (each lane streams 8 weights at a time), and
// with a norm sum_sq[m] += x[m] · x[m]. Needs k % 8 == 0 and 16-byte aligned rows.
template <typename W, int M, bool kNorm>
__device__ __forceinline__ void row_dots(const W* row, const float* x, NormedRows<kNorm> norm,
                                         int k, int lane, float (&acc)[M], float (&sum_sq)[M]) {
#pragma unroll 4
  for (int base = lane * 8; base < k; base += 32 * 8) {
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

template <typename W, int M, bool kNorm>
__global__ void __launch_bounds__(kWarps * 32)
    gemv_kernel(const float* __restrict__ x, const W* __restrict__ w, NormedRows<kNorm> norm,
                const float* __restrict__ bias, const float* __restrict__ residual, int n, int k,
                float* __restrict__ y) {
  const int col = blockIdx.x * kWarps + threadIdx.x / 32, lane = threadIdx.x % 32;
  if (col >= n) return;
  float acc[M] = {}, sum_sq[M] = {};
  row_dots(w + static_cast<int64_t>(col) * k, x, norm, k, lane, acc, sum_sq);
#pragma unroll
  for (int m = 0; m < M; ++m) {
    const float sum = warp_sum(acc[m]) * norm.factor(sum_sq[m], k);
    const int64_t at = static_cast<int64_t>(m) * n + col;
    // The same order of additions as the cpu: (product + bias) + residual.
    if (lane == 0) y[at] = (sum + (bias ? bias[col] : 0.f)) + (residual ? residual[at] : 0.f);
  }
}

// The columns of q, k and v's weights one after the other: each warp finds its weight and writes
// that product's own output. Needs k % 8 == 0 and 16-byte aligned rows.
template <typename W, int M, bool kNorm>
__global__ void __launch_bounds__(kWarps * 32)
    qkv_gemv_kernel(const float* __restrict__ x, NormedRows<kNorm> norm,
                    const __grid_constant__ QkvProducts p, int k) {
  int col = blockIdx.x * kWarps + threadIdx.x / 32;
  const int lane = threadIdx.x % 32;
  int i = 0;
  while (i < 2 && col >= p.n[i]) col -= static_cast<int>(p.n[i++]);
  if (col >= p.n[i]) return;
  float acc[M] = {}, sum_sq[M] = {};
  row_dots(static_cast<const W*>(p.w[i]) + static_cast<int64_t>(col) * k, x, norm, k, lane, acc,
           sum_sq);
#pragma unroll
  for (int m = 0; m < M; ++m) {
    const float sum = warp_sum(acc[m]) * norm.factor(sum_sq[m], k);
    if (lane == 0) p.y[i][m * p.n[i] + col] = sum + (p.bias[i] ? p.bias[i][col] : 0.f);
  }
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

// silu(x wg^T + bg) * (x wu^T + bu): each warp streams its column's gate and up rows once.
// Needs k % 8 == 0 and 16-byte aligned rows.
template <typename W, int M, bool kNorm>
__global__ void __launch_bounds__(kWarps * 32)
    gated_gemv_kernel(const float* __restrict__ x, const W* __restrict__ wg,
                      const W* __restrict__ wu, NormedRows<kNorm> norm,
                      const float* __restrict__ bg, const float* __restrict__ bu, int n, int k,
                      float* __restrict__ y) {
  const int col = blockIdx.x * kWarps + threadIdx.x / 32, lane = threadIdx.x % 32;
  if (col >= n) return;
  const W* gate_row = wg + static_cast<int64_t>(col) * k;
  const W* up_row = wu + static_cast<int64_t>(col) * k;
  float gate[M] = {}, up[M] = {}, sum_sq[M] = {};
#pragma unroll 2
  for (int base = lane * 8; base < k; base += 32 * 8) {
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
#pragma unroll
  for (int m = 0; m < M; ++m) {
    const float factor = norm.factor(sum_sq[m], k);
    const float g = warp_sum(gate[m]) * factor + (bg ? bg[col] : 0.f);
    const float u = warp_sum(up[m]) * factor + (bu ? bu[col] : 0.f);
    if (lane == 0) y[static_cast<int64_t>(m) * n + col] = silu(g) * u;
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

// Calls launch(std::integral_constant<int, m>{}) for the row count m (1 .. kGemvMaxRows): the
// kernels keep one accumulator per row in registers.
template <typename F>
void with_rows(int m, F launch) {
  switch (m) {
    case 1: return launch(std::integral_constant<int, 1>{});
    case 2: return launch(std::integral_constant<int, 2>{});
    case 3: return launch(std::integral_constant<int, 3>{});
    case 4: return launch(std::integral_constant<int, 4>{});
    case 5: return launch(std::integral_constant<int, 5>{});
    case 6: return launch(std::integral_constant<int, 6>{});
    case 7: return launch(std::integral_constant<int, 7>{});
    case 8: return launch(std::integral_constant<int, 8>{});
    default:
      throw Error("[cuda gemv] " + std::to_string(m) + " rows: at most " +
                  std::to_string(kGemvMaxRows));
  }
}

bool aligned16(const void* p) { return reinterpret_cast<uintptr_t>(p) % 16 == 0; }

bool vectorizable(const void* x, const void* w, int k, const InputNorm& norm = {}) {
  return k % 8 == 0 && aligned16(x) && aligned16(w) && aligned16(norm.weight);
}

// Calls launch(NormedRows<true or false>) as the norm is given or not.
template <typename F>
void with_norm(const InputNorm& norm, F launch) {
  if (norm.weight != nullptr) return launch(NormedRows<true>{norm.weight, norm.eps});
  launch(NormedRows<false>{nullptr, 0.f});
}

template <typename W>
void launch(const float* x, const W* w, const float* bias, const float* residual, int m, int n,
            int k, float* y, cudaStream_t stream) {
  if (m == 0 || n == 0) return;  // nothing to write; a grid of 0 blocks is a launch error
  const int blocks = (n + kWarps - 1) / kWarps, threads = kWarps * 32;
  if (!vectorizable(x, w, k)) {
    gemv_any_kernel<<<blocks, threads, 0, stream>>>(x, w, InputNorm{}, bias, residual, m, n, k, y);
    return;
  }
  with_rows(m, [&](auto rows) {
    gemv_kernel<W, decltype(rows)::value, false><<<blocks, threads, 0, stream>>>(
        x, w, NormedRows<false>{nullptr, 0.f}, bias, residual, n, k, y);
  });
}

template <typename W>
void launch_qkv(const float* x, const QkvProducts& p, const InputNorm& norm, int m, int k,
                cudaStream_t stream) {
  const int64_t n = p.n[0] + p.n[1] + p.n[2];
  if (m == 0 || n == 0) return;
  const int threads = kWarps * 32;
  bool aligned = true;
  for (const void* w : p.w) aligned = aligned && vectorizable(x, w, k, norm);
  if (!aligned) {
    for (int i = 0; i < 3; ++i) {
      if (p.n[i] == 0) continue;
      gemv_any_kernel<<<static_cast<int>((p.n[i] + kWarps - 1) / kWarps), threads, 0, stream>>>(
          x, static_cast<const W*>(p.w[i]), norm, p.bias[i], nullptr, m, static_cast<int>(p.n[i]),
          k, p.y[i]);
    }
    return;
  }
  const int blocks = static_cast<int>((n + kWarps - 1) / kWarps);
  with_norm(norm, [&](auto normed) {
    with_rows(m, [&](auto rows) {
      qkv_gemv_kernel<W, decltype(rows)::value, decltype(normed)::kNormed>
          <<<blocks, threads, 0, stream>>>(x, normed, p, k);
    });
  });
}

template <typename W>
void launch_gated(const float* x, const W* wg, const W* wu, const InputNorm& norm, const float* bg,
                  const float* bu, int m, int n, int k, float* y, cudaStream_t stream) {
  if (m == 0 || n == 0) return;
  const int blocks = (n + kWarps - 1) / kWarps, threads = kWarps * 32;
  if (!vectorizable(x, wg, k, norm) || !vectorizable(x, wu, k, norm)) {
    gated_gemv_any_kernel<<<blocks, threads, 0, stream>>>(x, wg, wu, norm, bg, bu, m, n, k, y);
    return;
  }
  with_norm(norm, [&](auto normed) {
    with_rows(m, [&](auto rows) {
      gated_gemv_kernel<W, decltype(rows)::value, decltype(normed)::kNormed>
          <<<blocks, threads, 0, stream>>>(x, wg, wu, normed, bg, bu, n, k, y);
    });
  });
}

}  // namespace

void gemv(const float* x, const void* w, DType w_dtype, const float* bias, const float* residual,
          int64_t m, int64_t n, int64_t k, float* y, cudaStream_t stream) {
  const int mi = static_cast<int>(m), ni = static_cast<int>(n), ki = static_cast<int>(k);
  if (w_dtype == DType::bf16) {
    launch(x, static_cast<const __nv_bfloat16*>(w), bias, residual, mi, ni, ki, y, stream);
  } else if (w_dtype == DType::f32) {
    launch(x, static_cast<const float*>(w), bias, residual, mi, ni, ki, y, stream);
  } else {
    throw Error("[cuda linear] weights of dtype " + std::string(dtype_name(w_dtype)) +
                " are not supported (f32, bf16)");
  }
  check_launch("gemv");
}

void qkv_gemv(const float* x, const QkvProducts& products, DType w_dtype, const InputNorm& norm,
              int64_t m, int64_t k, cudaStream_t stream) {
  const int mi = static_cast<int>(m), ki = static_cast<int>(k);
  if (w_dtype == DType::bf16) {
    launch_qkv<__nv_bfloat16>(x, products, norm, mi, ki, stream);
  } else if (w_dtype == DType::f32) {
    launch_qkv<float>(x, products, norm, mi, ki, stream);
  } else {
    throw Error("[cuda qkv_linear] weights of dtype " + std::string(dtype_name(w_dtype)) +
                " are not supported (f32, bf16)");
  }
  check_launch("qkv_gemv");
}

void gated_gemv(const float* x, const void* w_gate, const void* w_up, DType w_dtype,
                const InputNorm& norm, const float* bias_gate, const float* bias_up, int64_t m,
                int64_t n, int64_t k, float* y, cudaStream_t stream) {
  const int mi = static_cast<int>(m), ni = static_cast<int>(n), ki = static_cast<int>(k);
  if (w_dtype == DType::bf16) {
    launch_gated(x, static_cast<const __nv_bfloat16*>(w_gate),
                 static_cast<const __nv_bfloat16*>(w_up), norm, bias_gate, bias_up, mi, ni, ki, y,
                 stream);
  } else if (w_dtype == DType::f32) {
    launch_gated(x, static_cast<const float*>(w_gate), static_cast<const float*>(w_up), norm,
                 bias_gate, bias_up, mi, ni, ki, y, stream);
  } else {
    throw Error("[cuda gated_linear] weights of dtype " + std::string(dtype_name(w_dtype)) +
                " are not supported (f32, bf16)");
  }
  check_launch("gated_gemv");
}

}  // namespace tfm::cuda
