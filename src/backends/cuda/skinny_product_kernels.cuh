// The kernels of products with 9 to 16 rows (see skinny_products.cu), in a header of their own so
// tests/cuda_emulation can run them on the CPU.
#pragma once

#include <cuda_bf16.h>
#include <mma.h>

#include "backends/cuda/device_math.cuh"
#include "backends/cuda/kernels.h"
#include "backends/cuda/warp_mma.cuh"

namespace tfm::cuda {
namespace {

constexpr int kSkinnyWarps = 8;  // per block; each tile of 16 columns takes 1, 2, 4 or 8 of them
constexpr int kTile = 16;        // WMMA's bf16 fragments: 16 x 16 x 16

using SkinnyA = nvcuda::wmma::fragment<nvcuda::wmma::matrix_a, kTile, kTile, kTile, __nv_bfloat16,
                                       nvcuda::wmma::row_major>;
// w [n, k] row-major is w^T [k, n] column-major: the product's right-hand side as stored.
using SkinnyB = nvcuda::wmma::fragment<nvcuda::wmma::matrix_b, kTile, kTile, kTile, __nv_bfloat16,
                                       nvcuda::wmma::col_major>;
using SkinnyC = nvcuda::wmma::fragment<nvcuda::wmma::accumulator, kTile, kTile, kTile, float>;

// The grid for `tiles` tiles of `slices` warps each.
inline int skinny_blocks(int64_t tiles, int slices) {
  const int64_t tiles_per_block = kSkinnyWarps / slices;
  return static_cast<int>((tiles + tiles_per_block - 1) / tiles_per_block);
}

constexpr int kGroupSteps = 4;  // k steps whose weights a warp loads before it multiplies

// x's rows 0 .. 15 in bf16 as the tiles read them: rows past m are zeros and, with an input norm,
// each row is RMS-normed on the way (g * (x / rms(x)), rounded as the rms_norm kernel rounds).
template <bool kNorm>
struct SkinnyRows {
  static constexpr bool kNormed = kNorm;
  const float* x;
  int m, k;
  const float* g;  // the norm's weight (kNorm)
  float eps;
};

// Shared memory a launch of `products` products per warp needs: each warp's x tiles for a group of
// steps, its sums per product (to add up a tile's slices), and the rows' 1 / rms.
inline size_t skinny_shared_bytes(int products) {
  return kSkinnyWarps * kGroupSteps * kTile * kTile * sizeof(__nv_bfloat16) +
         static_cast<size_t>(products) * kSkinnyWarps * kTile * kTile * sizeof(float) +
         kTile * sizeof(float);
}

// 1 / rms of each of x's first 16 rows (those past m: 0), by the block's warps, into inv_rms.
template <bool kNorm>
__device__ __forceinline__ void rows_inverse_rms(const SkinnyRows<kNorm>& rows, float* inv_rms) {
  if constexpr (kNorm) {
    const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
    for (int row = warp; row < kTile; row += kSkinnyWarps) {
      float sum_sq = 0.f;
      if (row < rows.m) {
        const float* in = rows.x + static_cast<int64_t>(row) * rows.k;
        for (int i = lane; i < rows.k; i += 32) sum_sq += in[i] * in[i];
      }
      sum_sq = warp_sum(sum_sq);
      if (lane == 0) {
        inv_rms[row] =
            row < rows.m ? 1.f / sqrtf(sum_sq / static_cast<float>(rows.k) + rows.eps) : 0.f;
      }
    }
    __syncthreads();
  }
}

// Writes the 16 x 16 tile of x's rows at column `step`, as bf16, into `tile` (row-major): lane l
// converts row l / 2, columns (l % 2) * 8 .. + 7, and stores them as one 16-byte piece. Plain
// loads, not the read-only path: x was written by the kernel before, which may still have been
// running when this one started (overlapped_launch.h).
template <bool kNorm>
__device__ __forceinline__ void stage_rows(const SkinnyRows<kNorm>& rows, const float* inv_rms,
                                           int step, __nv_bfloat16* tile) {
  const int lane = threadIdx.x % 32, row = lane / 2, column = step + (lane % 2) * 8;
  float v[8] = {};
  if (row < rows.m) {
    const float* in = rows.x + static_cast<int64_t>(row) * rows.k + column;
#pragma unroll
    for (int i = 0; i < 8; ++i) v[i] = in[i];
    if constexpr (kNorm) {
#pragma unroll
      for (int i = 0; i < 8; ++i) v[i] = rows.g[column + i] * (v[i] * inv_rms[row]);
    }
  }
  uint4 packed;
  packed.x = bf16_pair(v[0], v[1]), packed.y = bf16_pair(v[2], v[3]);
  packed.z = bf16_pair(v[4], v[5]), packed.w = bf16_pair(v[6], v[7]);
  *reinterpret_cast<uint4*>(tile + row * kTile + (lane % 2) * 8) = packed;
}

// Each warp multiplies x's 16 rows by one tile of 16 weight rows of each of P products, over its
// slice of k: warp w takes the tile blockIdx.x * (kSkinnyWarps / slices) + w / slices and every
// slices-th step of 16 from (w % slices) * 16, loading the weights of kGroupSteps steps before it
// multiplies them. The slices of a tile are then summed in shared memory in a fixed order, and
// `write(row, tile, column, values)` is called for each of the tile's outputs in rows below m,
// column 0..15 within the tile, values[p] product p's sum. `weights(tile, p)` gives product p's
// first weight row of a tile. Every tile starts 32-byte aligned, k % 16 == 0.
template <int P, bool kNorm, typename Weights, typename Write>
__device__ __forceinline__ void skinny_tiles(const SkinnyRows<kNorm>& rows, Weights weights,
                                             int tiles, int slices, Write write) {
  TFM_DYNAMIC_SHARED_MEMORY(shared);
  const int warp = threadIdx.x / 32, slice = warp % slices, k = rows.k;
  // [kSkinnyWarps][kGroupSteps][16 x 16] bf16, then [P][kSkinnyWarps][16 x 16] f32, then [16] f32.
  auto* staged = reinterpret_cast<__nv_bfloat16*>(shared) + warp * kGroupSteps * kTile * kTile;
  auto* partial = reinterpret_cast<float*>(shared + kSkinnyWarps * kGroupSteps * kTile * kTile *
                                                        sizeof(__nv_bfloat16));
  float* inv_rms = partial + P * kSkinnyWarps * kTile * kTile;
  const int tile = blockIdx.x * (kSkinnyWarps / slices) + warp / slices;
  const bool active = tile < tiles;
  const int stride = kTile * slices;  // between a warp's steps of k
  if (active) {  // the first group's weights: lane l, row l % 16 of the tile, every other step
    const int lane = threadIdx.x % 32;
#pragma unroll
    for (int p = 0; p < P; ++p) {
      const __nv_bfloat16* row = weights(tile, p) + static_cast<int64_t>(lane % kTile) * k;
      for (int s = lane / kTile, step = slice * kTile + s * stride; s < kGroupSteps && step < k;
           s += 2, step += 2 * stride) {
        prefetch_l2(row + step);
      }
    }
  }
  await_previous_kernels();
  rows_inverse_rms(rows, inv_rms);
  SkinnyC acc[P];
#pragma unroll
  for (int p = 0; p < P; ++p) nvcuda::wmma::fill_fragment(acc[p], 0.f);
  if (active) {
    const __nv_bfloat16* w[P];
#pragma unroll
    for (int p = 0; p < P; ++p) w[p] = weights(tile, p);
    for (int first = slice * kTile; first < k; first += stride * kGroupSteps) {
      // Every weight load of the group goes out before x's rows are staged, whose shared stores
      // the loads could not be moved past.
      SkinnyB b[P][kGroupSteps];
#pragma unroll
      for (int s = 0; s < kGroupSteps; ++s) {
        if (first + s * stride >= k) break;
#pragma unroll
        for (int p = 0; p < P; ++p) {
          nvcuda::wmma::load_matrix_sync(b[p][s], w[p] + first + s * stride, k);
        }
      }
#pragma unroll
      for (int s = 0; s < kGroupSteps; ++s) {
        if (first + s * stride >= k) break;
        stage_rows(rows, inv_rms, first + s * stride, staged + s * kTile * kTile);
      }
      __syncwarp();
#pragma unroll
      for (int s = 0; s < kGroupSteps; ++s) {
        if (first + s * stride >= k) break;
        SkinnyA a;
        nvcuda::wmma::load_matrix_sync(a, staged + s * kTile * kTile, kTile);
#pragma unroll
        for (int p = 0; p < P; ++p) nvcuda::wmma::mma_sync(acc[p], a, b[p][s], acc[p]);
      }
      __syncwarp();  // the tiles are read before the next group stages over them
    }
  }
#pragma unroll
  for (int p = 0; p < P; ++p) {
    nvcuda::wmma::store_matrix_sync(partial + (p * kSkinnyWarps + warp) * kTile * kTile, acc[p],
                                    kTile, nvcuda::wmma::mem_row_major);
  }
  __syncthreads();
  if (!active) return;
  const int first_warp = warp - slice;
  for (int e = slice * 32 + static_cast<int>(threadIdx.x % 32); e < kTile * kTile;
       e += 32 * slices) {
    const int row = e / kTile;
    if (row >= rows.m) continue;
    float values[P];
#pragma unroll
    for (int p = 0; p < P; ++p) {
      float total = 0.f;
      for (int s = 0; s < slices; ++s) {
        total += partial[(p * kSkinnyWarps + first_warp + s) * kTile * kTile + e];
      }
      values[p] = total;
    }
    write(row, tile, e % kTile, values);
  }
}

// y = (x w^T + bias) + residual, as the GEMV; bias and residual may be null.
template <bool kNorm>
__global__ void __launch_bounds__(kSkinnyWarps * 32)
    skinny_linear_kernel(const SkinnyRows<kNorm> rows, const __nv_bfloat16* __restrict__ w,
                         const float* __restrict__ bias, const float* __restrict__ residual, int n,
                         int slices, float* __restrict__ y) {
  const int k = rows.k;
  skinny_tiles<1>(
      rows, [&](int tile, int) { return w + static_cast<int64_t>(tile) * kTile * k; }, n / kTile,
      slices,
      [&](int row, int tile, int column, const float(&v)[1]) {
        const int col = tile * kTile + column;
        const int64_t at = static_cast<int64_t>(row) * n + col;
        y[at] = (v[0] + (bias ? bias[col] : 0.f)) + (residual ? residual[at] : 0.f);
      });
}

// q, k and v's products, their tiles one after the other (every n[i] % 16 == 0).
template <bool kNorm>
__global__ void __launch_bounds__(kSkinnyWarps * 32)
    skinny_qkv_kernel(const SkinnyRows<kNorm> rows, const __grid_constant__ QkvProducts p,
                      int slices) {
  const int k = rows.k;
  const auto product_of = [&](int& tile) {
    int i = 0;
    while (i < 2 && tile >= p.n[i] / kTile) tile -= static_cast<int>(p.n[i++] / kTile);
    return i;
  };
  const int tiles = static_cast<int>((p.n[0] + p.n[1] + p.n[2]) / kTile);
  skinny_tiles<1>(
      rows,
      [&](int tile, int) {
        const int i = product_of(tile);
        return static_cast<const __nv_bfloat16*>(p.w[i]) + static_cast<int64_t>(tile) * kTile * k;
      },
      tiles, slices,
      [&](int row, int tile, int column, const float(&v)[1]) {
        const int i = product_of(tile);
        const int col = tile * kTile + column;
        p.y[i][row * p.n[i] + col] = v[0] + (p.bias[i] ? p.bias[i][col] : 0.f);
      });
}

// silu(x wg^T + bg) * (x wu^T + bu); the biases may be null.
template <bool kNorm>
__global__ void __launch_bounds__(kSkinnyWarps * 32)
    skinny_gated_kernel(const SkinnyRows<kNorm> rows, const __nv_bfloat16* __restrict__ wg,
                        const __nv_bfloat16* __restrict__ wu, const float* __restrict__ bg,
                        const float* __restrict__ bu, int n, int slices, float* __restrict__ y) {
  const int k = rows.k;
  skinny_tiles<2>(
      rows,
      [&](int tile, int product) {
        return (product == 0 ? wg : wu) + static_cast<int64_t>(tile) * kTile * k;
      },
      n / kTile, slices,
      [&](int row, int tile, int column, const float(&v)[2]) {
        const int col = tile * kTile + column;
        const float gate = v[0] + (bg ? bg[col] : 0.f), up = v[1] + (bu ? bu[col] : 0.f);
        y[static_cast<int64_t>(row) * n + col] = silu(gate) * up;
      });
}

}  // namespace
}  // namespace tfm::cuda
