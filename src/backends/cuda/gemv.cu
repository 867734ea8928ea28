// Matrix-vector products for decode: the weights stream through once, 16 bytes per lane per load,
// while the few activation rows stay in L1.
#include <cuda_bf16.h>

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

// Needs k % 8 == 0 and 16-byte aligned rows.
template <typename W, int M>
__global__ void __launch_bounds__(kWarps * 32)
    gemv_kernel(const float* __restrict__ x, const W* __restrict__ w,
                const float* __restrict__ bias, const float* __restrict__ residual, int n, int k,
                float* __restrict__ y) {
  const int col = blockIdx.x * kWarps + threadIdx.x / 32, lane = threadIdx.x % 32;
  if (col >= n) return;
  const W* row = w + static_cast<int64_t>(col) * k;
  float acc[M] = {};
#pragma unroll 4
  for (int base = lane * 8; base < k; base += 32 * 8) {
    float wv[8];
    load8(row + base, wv);
#pragma unroll
    for (int m = 0; m < M; ++m) {
      const float4* xp = reinterpret_cast<const float4*>(x + static_cast<int64_t>(m) * k + base);
      const float4 a = __ldg(xp), b = __ldg(xp + 1);
      acc[m] += wv[0] * a.x + wv[1] * a.y + wv[2] * a.z + wv[3] * a.w + wv[4] * b.x +
                wv[5] * b.y + wv[6] * b.z + wv[7] * b.w;
    }
  }
#pragma unroll
  for (int m = 0; m < M; ++m) {
    const float sum = warp_sum(acc[m]);
    const int64_t at = static_cast<int64_t>(m) * n + col;
    // The same order of additions as the cpu: (product + bias) + residual.
    if (lane == 0) y[at] = (sum + (bias ? bias[col] : 0.f)) + (residual ? residual[at] : 0.f);
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

template <typename W>
void launch(const float* x, const W* w, const float* bias, const float* residual, int m, int n,
            int k, float* y, cudaStream_t stream) {
  if (m == 0 || n == 0) return;  // nothing to write; a grid of 0 blocks is a launch error
  const int blocks = (n + kWarps - 1) / kWarps, threads = kWarps * 32;
  const bool vectorized = k % 8 == 0 && reinterpret_cast<uintptr_t>(x) % 16 == 0 &&
                          reinterpret_cast<uintptr_t>(w) % 16 == 0;
  if (!vectorized) {
    gemv_any_kernel<<<blocks, threads, 0, stream>>>(x, w, bias, residual, m, n, k, y);
    return;
  }
  switch (m) {
#define TFM_GEMV_CASE(M)                                                        \
  case M:                                                                       \
    gemv_kernel<W, M><<<blocks, threads, 0, stream>>>(x, w, bias, residual, n, k, y); \
    break;
    TFM_GEMV_CASE(1)
    TFM_GEMV_CASE(2)
    TFM_GEMV_CASE(3)
    TFM_GEMV_CASE(4)
    TFM_GEMV_CASE(5)
    TFM_GEMV_CASE(6)
    TFM_GEMV_CASE(7)
    TFM_GEMV_CASE(8)
#undef TFM_GEMV_CASE
    default:
      throw Error("[cuda gemv] " + std::to_string(m) + " rows: at most " +
                  std::to_string(kGemvMaxRows));
  }
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

}  // namespace tfm::cuda
