// The kernels of products with 9 to 16 rows (see skinny_products.cu), in a header of their own so
// tests/cuda_emulation can run them on the CPU.
#pragma once

#include <cuda_bf16.h>
#include <mma.h>

#include "backends/cuda/device_math.cuh"
#include "backends/cuda/kernels.h"

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

// Shared memory a launch of `products` products per warp needs: each warp's tiles, to sum them.
inline size_t skinny_shared_bytes(int products) {
  return static_cast<size_t>(products) * kSkinnyWarps * kTile * kTile * sizeof(float);
}

// Each warp multiplies x's 16 rows [16, k] by one tile of 16 weight rows of each of P products,
// over its slice of k: warp w takes the tile blockIdx.x * (kSkinnyWarps / slices) + w / slices and
// every slices-th step of 16 from (w % slices) * 16. The slices of a tile are then summed in
// shared memory in a fixed order, and `write(row, tile, column, values)` is called for each of the
// tile's outputs in rows below m, column 0..15 within the tile, values[p] product p's sum.
// `rows(tile, p)` gives product p's first weight row of a tile. x and every tile start 32-byte
// aligned, k % 16 == 0.
template <int P, typename Rows, typename Write>
__device__ __forceinline__ void skinny_tiles(const __nv_bfloat16* __restrict__ x, Rows rows,
                                             int tiles, int m, int k, int slices, Write write) {
  TFM_DYNAMIC_SHARED_MEMORY(shared);
  auto* partial = reinterpret_cast<float*>(shared);  // [P][kSkinnyWarps][kTile * kTile]
  const int warp = threadIdx.x / 32, slice = warp % slices;
  const int tile = blockIdx.x * (kSkinnyWarps / slices) + warp / slices;
  const bool active = tile < tiles;
  SkinnyC acc[P];
#pragma unroll
  for (int p = 0; p < P; ++p) nvcuda::wmma::fill_fragment(acc[p], 0.f);
  if (active) {
    const __nv_bfloat16* w[P];
#pragma unroll
    for (int p = 0; p < P; ++p) w[p] = rows(tile, p);
#pragma unroll 4
    for (int step = slice * kTile; step < k; step += kTile * slices) {
      SkinnyA a;
      nvcuda::wmma::load_matrix_sync(a, x + step, k);
#pragma unroll
      for (int p = 0; p < P; ++p) {
        SkinnyB b;
        nvcuda::wmma::load_matrix_sync(b, w[p] + step, k);
        nvcuda::wmma::mma_sync(acc[p], a, b, acc[p]);
      }
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
    if (row >= m) continue;
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
__global__ void __launch_bounds__(kSkinnyWarps * 32)
    skinny_linear_kernel(const __nv_bfloat16* __restrict__ x, const __nv_bfloat16* __restrict__ w,
                         const float* __restrict__ bias, const float* __restrict__ residual, int m,
                         int n, int k, int slices, float* __restrict__ y) {
  skinny_tiles<1>(
      x, [&](int tile, int) { return w + static_cast<int64_t>(tile) * kTile * k; }, n / kTile, m, k,
      slices,
      [&](int row, int tile, int column, const float(&v)[1]) {
        const int col = tile * kTile + column;
        const int64_t at = static_cast<int64_t>(row) * n + col;
        y[at] = (v[0] + (bias ? bias[col] : 0.f)) + (residual ? residual[at] : 0.f);
      });
}

// q, k and v's products, their tiles one after the other (every n[i] % 16 == 0).
__global__ void __launch_bounds__(kSkinnyWarps * 32)
    skinny_qkv_kernel(const __nv_bfloat16* __restrict__ x, const __grid_constant__ QkvProducts p,
                      int m, int k, int slices) {
  const auto product_of = [&](int& tile) {
    int i = 0;
    while (i < 2 && tile >= p.n[i] / kTile) tile -= static_cast<int>(p.n[i++] / kTile);
    return i;
  };
  const int tiles = static_cast<int>((p.n[0] + p.n[1] + p.n[2]) / kTile);
  skinny_tiles<1>(
      x,
      [&](int tile, int) {
        const int i = product_of(tile);
        return static_cast<const __nv_bfloat16*>(p.w[i]) + static_cast<int64_t>(tile) * kTile * k;
      },
      tiles, m, k, slices,
      [&](int row, int tile, int column, const float(&v)[1]) {
        const int i = product_of(tile);
        const int col = tile * kTile + column;
        p.y[i][row * p.n[i] + col] = v[0] + (p.bias[i] ? p.bias[i][col] : 0.f);
      });
}

// silu(x wg^T + bg) * (x wu^T + bu); the biases may be null.
__global__ void __launch_bounds__(kSkinnyWarps * 32)
    skinny_gated_kernel(const __nv_bfloat16* __restrict__ x, const __nv_bfloat16* __restrict__ wg,
                        const __nv_bfloat16* __restrict__ wu, const float* __restrict__ bg,
                        const float* __restrict__ bu, int m, int n, int k, int slices,
                        float* __restrict__ y) {
  skinny_tiles<2>(
      x,
      [&](int tile, int product) {
        return (product == 0 ? wg : wu) + static_cast<int64_t>(tile) * kTile * k;
      },
      n / kTile, m, k, slices,
      [&](int row, int tile, int column, const float(&v)[2]) {
        const int col = tile * kTile + column;
        const float gate = v[0] + (bg ? bg[col] : 0.f), up = v[1] + (bu ? bu[col] : 0.f);
        y[static_cast<int64_t>(row) * n + col] = silu(gate) * up;
      });
}

}  // namespace
}  // namespace tfm::cuda
