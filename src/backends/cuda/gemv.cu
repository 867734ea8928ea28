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

// w[0..7] · x[0..7], x read as two float4 through the read-only cache.
__device__ __forceinline__ float dot8(const float (&w)[8], const float* x) {
  const float4 a = __ldg(reinterpret_cast<const float4*>(x)),
               b = __ldg(reinterpret_cast<const float4*>(x) + 1);
  return w[0] * a.x + w[1] * a.y + w[2] * a.z + w[3] * a.w + w[4] * b.x + w[5] * b.y +
         w[6] * b.z + w[7] * b.w;
}

__device__ __forceinline__ float silu(float v) { return v / (1.f + expf(-v)); }

// acc[m] += row · x[m] over k for the warp's column: each lane streams 8 weights at a time.
// Needs k % 8 == 0 and 16-byte aligned rows.
template <typename W, int M>
__device__ __forceinline__ void row_dots(const W* row, const float* x, int k, int lane,
                                         float (&acc)[M]) {
#pragma unroll 4
  for (int base = lane * 8; base < k; base += 32 * 8) {
    float wv[8];
    load8(row + base, wv);
#pragma unroll
    for (int m = 0; m < M; ++m) acc[m] += dot8(wv, x + static_cast<int64_t>(m) * k + base);
  }
}

template <typename W, int M>
__global__ void __launch_bounds__(kWarps * 32)
    gemv_kernel(const float* __restrict__ x, const W* __restrict__ w,
                const float* __restrict__ bias, const float* __restrict__ residual, int n, int k,
                float* __restrict__ y) {
  const int col = blockIdx.x * kWarps + threadIdx.x / 32, lane = threadIdx.x % 32;
  if (col >= n) return;
  float acc[M] = {};
  row_dots(w + static_cast<int64_t>(col) * k, x, k, lane, acc);
#pragma unroll
  for (int m = 0; m < M; ++m) {
    const float sum = warp_sum(acc[m]);
    const int64_t at = static_cast<int64_t>(m) * n + col;
    // The same order of additions as the cpu: (product + bias) + residual.
    if (lane == 0) y[at] = (sum + (bias ? bias[col] : 0.f)) + (residual ? residual[at] : 0.f);
  }
}

// The columns of q, k and v's weights one after the other: each warp finds its weight and writes
// that product's own output. Needs k % 8 == 0 and 16-byte aligned rows.
template <typename W, int M>
__global__ void __launch_bounds__(kWarps * 32)
    qkv_gemv_kernel(const float* __restrict__ x, QkvProducts p, int k) {
  int col = blockIdx.x * kWarps + threadIdx.x / 32;
  const int lane = threadIdx.x % 32;
  int i = 0;
  while (i < 2 && col >= p.n[i]) col -= static_cast<int>(p.n[i++]);
  if (col >= p.n[i]) return;
  float acc[M] = {};
  row_dots(static_cast<const W*>(p.w[i]) + static_cast<int64_t>(col) * k, x, k, lane, acc);
#pragma unroll
  for (int m = 0; m < M; ++m) {
    const float sum = warp_sum(acc[m]);
    if (lane == 0) p.y[i][m * p.n[i] + col] = sum + (p.bias[i] ? p.bias[i][col] : 0.f);
  }
}

// Any k and alignment, one element per lane per step.
template <typename W>
__global__ void gemv_any_kernel(const float* x, const W* w, const float* bias,
                                const float* residual, int m, int n, int k, float* y) {
  const int col = blockIdx.x * kWarps + threadIdx.x / 32, lane = threadIdx.x % 32;
  if (col >= n) return;
  const W* row = w + static_cast<int64_t>(col) * k;
  for (int r = 0; r < m; ++r) {
    float acc = 0.f;
    for (int i = lane; i < k; i += 32) acc += widen(row[i]) * x[static_cast<int64_t>(r) * k + i];
    acc = warp_sum(acc);
    const int64_t at = static_cast<int64_t>(r) * n + col;
    if (lane == 0) y[at] = (acc + (bias ? bias[col] : 0.f)) + (residual ? residual[at] : 0.f);
  }
}

// silu(x wg^T + bg) * (x wu^T + bu): each warp streams its column's gate and up rows once.
// Needs k % 8 == 0 and 16-byte aligned rows.
template <typename W, int M>
__global__ void __launch_bounds__(kWarps * 32)
    gated_gemv_kernel(const float* __restrict__ x, const W* __restrict__ wg,
                      const W* __restrict__ wu, const float* __restrict__ bg,
                      const float* __restrict__ bu, int n, int k, float* __restrict__ y) {
  const int col = blockIdx.x * kWarps + threadIdx.x / 32, lane = threadIdx.x % 32;
  if (col >= n) return;
  const W* gate_row = wg + static_cast<int64_t>(col) * k;
  const W* up_row = wu + static_cast<int64_t>(col) * k;
  float gate[M] = {}, up[M] = {};
#pragma unroll 2
  for (int base = lane * 8; base < k; base += 32 * 8) {
    float gv[8], uv[8];
    load8(gate_row + base, gv);
    load8(up_row + base, uv);
#pragma unroll
    for (int m = 0; m < M; ++m) {
      gate[m] += dot8(gv, x + static_cast<int64_t>(m) * k + base);
      up[m] += dot8(uv, x + static_cast<int64_t>(m) * k + base);
    }
  }
#pragma unroll
  for (int m = 0; m < M; ++m) {
    const float g = warp_sum(gate[m]) + (bg ? bg[col] : 0.f);
    const float u = warp_sum(up[m]) + (bu ? bu[col] : 0.f);
    if (lane == 0) y[static_cast<int64_t>(m) * n + col] = silu(g) * u;
  }
}

// Any k and alignment, one element per lane per step.
template <typename W>
__global__ void gated_gemv_any_kernel(const float* x, const W* wg, const W* wu, const float* bg,
                                      const float* bu, int m, int n, int k, float* y) {
  const int col = blockIdx.x * kWarps + threadIdx.x / 32, lane = threadIdx.x % 32;
  if (col >= n) return;
  const W* gate_row = wg + static_cast<int64_t>(col) * k;
  const W* up_row = wu + static_cast<int64_t>(col) * k;
  for (int r = 0; r < m; ++r) {
    float gate = 0.f, up = 0.f;
    for (int i = lane; i < k; i += 32) {
      const float xi = x[static_cast<int64_t>(r) * k + i];
      gate += widen(gate_row[i]) * xi;
      up += widen(up_row[i]) * xi;
    }
    const float g = warp_sum(gate) + (bg ? bg[col] : 0.f);
    const float u = warp_sum(up) + (bu ? bu[col] : 0.f);
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

bool vectorizable(const void* x, const void* w, int k) {
  return k % 8 == 0 && reinterpret_cast<uintptr_t>(x) % 16 == 0 &&
         reinterpret_cast<uintptr_t>(w) % 16 == 0;
}

template <typename W>
void launch(const float* x, const W* w, const float* bias, const float* residual, int m, int n,
            int k, float* y, cudaStream_t stream) {
  if (m == 0 || n == 0) return;  // nothing to write; a grid of 0 blocks is a launch error
  const int blocks = (n + kWarps - 1) / kWarps, threads = kWarps * 32;
  if (!vectorizable(x, w, k)) {
    gemv_any_kernel<<<blocks, threads, 0, stream>>>(x, w, bias, residual, m, n, k, y);
    return;
  }
  with_rows(m, [&](auto rows) {
    gemv_kernel<W, decltype(rows)::value>
        <<<blocks, threads, 0, stream>>>(x, w, bias, residual, n, k, y);
  });
}

template <typename W>
void launch_qkv(const float* x, const QkvProducts& p, int m, int k, cudaStream_t stream) {
  const int64_t n = p.n[0] + p.n[1] + p.n[2];
  if (m == 0 || n == 0) return;
  bool aligned = true;
  for (const void* w : p.w) aligned = aligned && vectorizable(x, w, k);
  if (!aligned) {
    for (int i = 0; i < 3; ++i) {
      launch(x, static_cast<const W*>(p.w[i]), p.bias[i], nullptr, m, static_cast<int>(p.n[i]), k,
             p.y[i], stream);
    }
    return;
  }
  const int blocks = static_cast<int>((n + kWarps - 1) / kWarps), threads = kWarps * 32;
  with_rows(m, [&](auto rows) {
    qkv_gemv_kernel<W, decltype(rows)::value><<<blocks, threads, 0, stream>>>(x, p, k);
  });
}

template <typename W>
void launch_gated(const float* x, const W* wg, const W* wu, const float* bg, const float* bu,
                  int m, int n, int k, float* y, cudaStream_t stream) {
  if (m == 0 || n == 0) return;
  const int blocks = (n + kWarps - 1) / kWarps, threads = kWarps * 32;
  if (!vectorizable(x, wg, k) || !vectorizable(x, wu, k)) {
    gated_gemv_any_kernel<<<blocks, threads, 0, stream>>>(x, wg, wu, bg, bu, m, n, k, y);
    return;
  }
  with_rows(m, [&](auto rows) {
    gated_gemv_kernel<W, decltype(rows)::value>
        <<<blocks, threads, 0, stream>>>(x, wg, wu, bg, bu, n, k, y);
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

void qkv_gemv(const float* x, const QkvProducts& products, DType w_dtype, int64_t m, int64_t k,
              cudaStream_t stream) {
  const int mi = static_cast<int>(m), ki = static_cast<int>(k);
  if (w_dtype == DType::bf16) {
    launch_qkv<__nv_bfloat16>(x, products, mi, ki, stream);
  } else if (w_dtype == DType::f32) {
    launch_qkv<float>(x, products, mi, ki, stream);
  } else {
    throw Error("[cuda qkv_linear] weights of dtype " + std::string(dtype_name(w_dtype)) +
                " are not supported (f32, bf16)");
  }
  check_launch("qkv_gemv");
}

void gated_gemv(const float* x, const void* w_gate, const void* w_up, DType w_dtype,
                const float* bias_gate, const float* bias_up, int64_t m, int64_t n, int64_t k,
                float* y, cudaStream_t stream) {
  const int mi = static_cast<int>(m), ni = static_cast<int>(n), ki = static_cast<int>(k);
  if (w_dtype == DType::bf16) {
    launch_gated(x, static_cast<const __nv_bfloat16*>(w_gate),
                 static_cast<const __nv_bfloat16*>(w_up), bias_gate, bias_up, mi, ni, ki, y,
                 stream);
  } else if (w_dtype == DType::f32) {
    launch_gated(x, static_cast<const float*>(w_gate), static_cast<const float*>(w_up), bias_gate,
                 bias_up, mi, ni, ki, y, stream);
  } else {
    throw Error("[cuda gated_linear] weights of dtype " + std::string(dtype_name(w_dtype)) +
                " are not supported (f32, bf16)");
  }
  check_launch("gated_gemv");
}

}  // namespace tfm::cuda
