// The row-wise backward kernels (see backward.cu), in a header of their own so tests/cuda_emulation
// can run them on the CPU.
#pragma once

#include <cmath>
#include <cstdint>

#include "backends/cuda/backward_kernels.h"
#include "backends/cuda/device_math.cuh"

namespace tfm::cuda {
namespace {

constexpr int kThreads = 256;

// Sums over rows in two passes, so that few columns still fill the GPU: the rows are cut into
// chunks of kChunkRows, a block sums one chunk for 32 neighbouring columns (coalesced reads),
// its kRowSlices threads per column adding in slice order, into a double per (chunk, column);
// then one thread per column adds the chunks in order. The order is fixed: reruns give the same
// bits.
constexpr int kColumns = 32, kRowSlices = 16, kSumThreads = kColumns * kRowSlices;
constexpr int64_t kChunkRows = 1024;

inline int64_t row_chunks(int64_t rows) {
  return rows == 0 ? 1 : (rows + kChunkRows - 1) / kChunkRows;
}

template <typename Term>
__global__ void __launch_bounds__(kSumThreads)
    column_chunk_sum_kernel(Term term, int64_t rows, int64_t n, double* __restrict__ partials) {
  const int64_t j = blockIdx.x * static_cast<int64_t>(kColumns) + threadIdx.x;
  const int64_t first = blockIdx.y * kChunkRows, last = min(first + kChunkRows, rows);
  double sum = 0;
  if (j < n) {
    for (int64_t r = first + threadIdx.y; r < last; r += kRowSlices) sum += term(r, j);
  }
  __shared__ double partial[kRowSlices][kColumns];
  partial[threadIdx.y][threadIdx.x] = sum;
  __syncthreads();
  if (threadIdx.y != 0 || j >= n) return;
  double total = 0;
  for (int s = 0; s < kRowSlices; ++s) total += partial[s][threadIdx.x];
  partials[blockIdx.y * n + j] = total;
}

__global__ void __launch_bounds__(kThreads)
    sum_chunks_kernel(const double* __restrict__ partials, int64_t chunks, int64_t n,
                      bool accumulate, float* __restrict__ out) {
  const int64_t j = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x;
  if (j >= n) return;
  double total = 0;
  for (int64_t c = 0; c < chunks; ++c) total += partials[c * n + j];
  // Accumulating, the f32 sum is added as an accumulation step would add it.
  out[j] = accumulate ? out[j] + static_cast<float>(total) : static_cast<float>(total);
}

struct Element {
  const float* x;
  int64_t n;
  __device__ double operator()(int64_t r, int64_t j) const { return x[r * n + j]; }
};

// RMSNorm's weight gradient term dy * x * r, rounded as the cpu does (the f32 product, then
// times the double r). x (as every X below): f32, or a bf16 product's output (autocast), widened
// as it is loaded.
template <typename X>
struct NormalizedProduct {
  const X* x;
  const float* dy;
  const float* inv_rms;  // per row
  int64_t n;
  __device__ double operator()(int64_t r, int64_t j) const {
    return static_cast<double>(dy[r * n + j] * widen(x[r * n + j])) * inv_rms[r];
  }
};

// 1 / sqrt(mean(x^2) + eps) of one row over a warp, in double and rounded to f32 as on the cpu.
template <typename X>
__device__ float row_inv_rms(const X* row, int hidden, float eps) {
  double sum_sq = 0;
  for (int i = threadIdx.x % 32; i < hidden; i += 32) {
    const double value = widen(row[i]);
    sum_sq += value * value;
  }
  sum_sq = warp_sum(sum_sq);
  return static_cast<float>(1.0 / sqrt(sum_sq / hidden + eps));
}

// One warp per row.
template <typename X>
__global__ void inv_rms_kernel(const X* __restrict__ x, int64_t rows, int hidden, float eps,
                               float* __restrict__ out) {
  const int64_t row = (blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x) / 32;
  if (row >= rows) return;
  const float r = row_inv_rms(x + row * hidden, hidden, eps);
  if (threadIdx.x % 32 == 0) out[row] = r;
}

// One warp per row: dx = r w dy - x r^3 mean(w dy x), with r = row_inv_rms.
// dx in f32, or in bf16 for a product's operand (graph::fold_casts): rounded from the f32 value,
// as the cast it replaces rounds. `residual` (or null) is added to the f32 value, as the
// elementwise add it replaces (graph::fold_residuals_into_norm_grads) added it.
template <typename Out, typename X>
__global__ void rms_norm_grad_input_kernel(const X* __restrict__ x, const float* __restrict__ w,
                                           const float* __restrict__ dy,
                                           const float* __restrict__ residual, int64_t rows,
                                           int hidden, float eps, Out* __restrict__ dx) {
  const int64_t row = (blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x) / 32;
  const int lane = threadIdx.x % 32;
  if (row >= rows) return;
  const X* xr = x + row * hidden;
  const float* dyr = dy + row * hidden;
  const double r = row_inv_rms(xr, hidden, eps);
  double dot = 0;
  for (int i = lane; i < hidden; i += 32) dot += static_cast<double>(w[i]) * dyr[i] * widen(xr[i]);
  dot = warp_sum(dot);
  const double coef = r * r * r * dot / hidden;
  for (int i = lane; i < hidden; i += 32) {
    const float value = static_cast<float>(r * w[i] * dyr[i] - widen(xr[i]) * coef);
    dx[row * hidden + i] = narrow<Out>(residual ? value + residual[row * hidden + i] : value);
  }
}

// RMSNorm's input and weight gradients in one pass over x and dy (graph::fold_norm_weight_grads),
// for rows of at most 32 x kLaneColumns values. A warp per row, as rms_norm_grad_input_kernel
// (the same dx bits), each lane holding its columns of the row in registers and the weight
// gradient's sums of those columns over the rows its warp takes. A block takes a chunk of
// `chunk_rows` rows (a multiple of its warps, which take every warps-th row); its warps add their
// sums into the chunk's in warp order, and sum_chunks_kernel adds the chunks in order: reruns
// give the same bits.
constexpr int kNormGradWarps = kThreads / 32;
// Chunks of rows the blocks take: enough blocks to fill the GPU, few enough sums for
// sum_chunks_kernel's thread per column to add.
constexpr int64_t kNormGradChunks = 256;

inline int64_t norm_grad_chunk_rows(int64_t rows) {
  const int64_t per_chunk = (rows + kNormGradChunks - 1) / kNormGradChunks;
  const int64_t whole_warps = (per_chunk + kNormGradWarps - 1) / kNormGradWarps * kNormGradWarps;
  return whole_warps > kNormGradWarps ? whole_warps : kNormGradWarps;
}

inline int64_t norm_grad_chunks(int64_t rows) {
  const int64_t chunk_rows = norm_grad_chunk_rows(rows);
  return rows == 0 ? 1 : (rows + chunk_rows - 1) / chunk_rows;
}

// With `rope`, dy is RoPE's output gradient, rotated back by minus each head's angle as it is
// loaded: rows of exactly 32 x kLaneColumns values, so a lane holds both of a rotated pair
// (columns c and c + kLaneColumns / 2). With `copy`, each dx value is also written there rounded
// to bf16 (graph::fold_narrow_copies).

template <int kLaneColumns, typename Out, typename X, typename DY = float>
__global__ void __launch_bounds__(kThreads)
    rms_norm_grads_kernel(const X* __restrict__ x, const float* __restrict__ w,
                          const DY* __restrict__ dy, const float* __restrict__ residual,
                          int64_t rows, int hidden, float eps, int64_t chunk_rows,
                          Out* __restrict__ dx, double* __restrict__ chunk_sums, RopeRows rope = {},
                          __nv_bfloat16* __restrict__ copy = nullptr) {
  constexpr int kHalf = kLaneColumns / 2;
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int64_t first = blockIdx.x * chunk_rows, last = min(first + chunk_rows, rows);
  double sums[kLaneColumns];
#pragma unroll
  for (int c = 0; c < kLaneColumns; ++c) sums[c] = 0;
  for (int64_t row = first + warp; row < last; row += kNormGradWarps) {
    float xs[kLaneColumns], dys[kLaneColumns];
#pragma unroll
    for (int c = 0; c < kLaneColumns; ++c) {
      const int i = lane + 32 * c;
      xs[c] = i < hidden ? widen(x[row * hidden + i]) : 0.f;
      dys[c] = i < hidden ? widen(dy[row * hidden + i]) : 0.f;
    }
    if (rope.positions != nullptr) {
      // As rope_grad: the forward rotation with negated frequencies, the angle formed in f32.
      const auto position = static_cast<float>(rope.positions[row / rope.heads]);
#pragma unroll
      for (int c = 0; c < kHalf; ++c) {
        const float angle = position * -rope.inv_freq[lane + 32 * c];
        const float cs = cosf(angle) * rope.attention_scaling;
        const float sn = sinf(angle) * rope.attention_scaling;
        const float d1 = dys[c], d2 = dys[c + kHalf];
        dys[c] = d1 * cs - d2 * sn;
        dys[c + kHalf] = d2 * cs + d1 * sn;
      }
    }
    double sum_sq = 0, dot = 0;
#pragma unroll
    for (int c = 0; c < kLaneColumns; ++c) {
      const int i = lane + 32 * c;
      sum_sq += static_cast<double>(xs[c]) * xs[c];
      if (i < hidden) dot += static_cast<double>(w[i]) * dys[c] * xs[c];
    }
    const double r = static_cast<float>(1.0 / sqrt(warp_sum(sum_sq) / hidden + eps));
    const double coef = r * r * r * warp_sum(dot) / hidden;
#pragma unroll
    for (int c = 0; c < kLaneColumns; ++c) {
      const int i = lane + 32 * c;
      if (i >= hidden) continue;
      const float value = static_cast<float>(r * w[i] * dys[c] - xs[c] * coef);
      const float result = residual ? value + residual[row * hidden + i] : value;
      dx[row * hidden + i] = narrow<Out>(result);
      if (copy != nullptr) copy[row * hidden + i] = narrow<__nv_bfloat16>(result);
      sums[c] += static_cast<double>(dys[c] * xs[c]) * r;
    }
  }
  // Every warp reaches each barrier, rows or none.
  __shared__ double chunk[32 * kLaneColumns];
  for (int turn = 0; turn < kNormGradWarps; ++turn) {
    if (warp == turn) {
#pragma unroll
      for (int c = 0; c < kLaneColumns; ++c) {
        const int i = lane + 32 * c;
        if (i < hidden) chunk[i] = (turn == 0 ? 0.0 : chunk[i]) + sums[c];
      }
    }
    __syncthreads();
  }
  for (int i = threadIdx.x; i < hidden; i += blockDim.x) {
    chunk_sums[blockIdx.x * static_cast<int64_t>(hidden) + i] = chunk[i];
  }
}

// One thread per column walks the tokens in order: repeated ids add in the cpu's order, with no
// atomics. Only `hidden` threads, but the gradient is needed once per step.
__global__ void embedding_grad_kernel(const float* __restrict__ dy, const int32_t* __restrict__ ids,
                                      int64_t count, int64_t vocab, int64_t hidden,
                                      float* __restrict__ d_table) {
  const int64_t h = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x;
  if (h >= hidden) return;
  for (int64_t i = 0; i < count; ++i) {
    const int64_t id = ids[i];
    // Ids are checked on the host (they are the embedding's); this only keeps a bad one in bounds.
    if (id < 0 || id >= vocab) continue;
    d_table[id * hidden + h] += dy[i * hidden + h];
  }
}

__global__ void negate_kernel(const float* __restrict__ x, int64_t count, float* __restrict__ out) {
  const int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x;
  if (i < count) out[i] = -x[i];
}

}  // namespace
}  // namespace tfm::cuda
