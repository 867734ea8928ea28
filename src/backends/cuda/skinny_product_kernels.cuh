// The kernels of products with 9 to 16 rows (see skinny_products.cu), in a header of their own so
// tests/cuda_emulation can run them on the CPU.
#pragma once

#include <cuda_bf16.h>

#include "backends/cuda/device_math.cuh"
#include "backends/cuda/kernels.h"
#include "backends/cuda/warp_mma.cuh"

namespace tfm::cuda {
namespace {

constexpr int kSkinnyWarps = 8;  // per block; each tile of 16 columns takes 1, 2, 4 or 8 of them
constexpr int kTile = 16;        // a tile's weight rows: the 16 output columns a warp computes
// A step of k: lane t of a row group reads 16 bytes (8 weights) from element 8 t of a chunk.
constexpr int kChunk = 32;
constexpr int kGroupChunks = 4;  // chunks whose weights a warp loads before it multiplies

// The grid for `tiles` tiles of `slices` warps each.
inline int skinny_blocks(int64_t tiles, int slices) {
  const int64_t tiles_per_block = kSkinnyWarps / slices;
  return static_cast<int>((tiles + tiles_per_block - 1) / tiles_per_block);
}

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

// The elements between the starts of x's staged rows: k, padded so that rows start 64 bytes
// apart modulo 128, where the two rows a quarter of a warp reads (64 bytes each) use all 32 banks.
__host__ __device__ constexpr int skinny_row_stride(int k) { return k % 64 == 0 ? k + 32 : k; }

// Shared memory a launch of `products` products per warp over k needs: x's 16 rows in bf16, then
// each warp's sums per product (to add up a tile's slices).
constexpr size_t skinny_shared_bytes(int products, int64_t k) {
  return kTile * static_cast<size_t>(skinny_row_stride(static_cast<int>(k))) *
             sizeof(__nv_bfloat16) +
         static_cast<size_t>(products) * kSkinnyWarps * kTile * kTile * sizeof(float);
}
// An sm_90 block may have 227 KB of shared memory.
static_assert(skinny_shared_bytes(2, kSkinnyMaxK) <= 227 * 1024);

// x[0..7], as two float4 where x and the norm's weight are 16-byte aligned (a compiled graph's
// values are), else one float at a time (an eager run's input may start anywhere).
__device__ __forceinline__ void load8_any(const float* x, bool vectors, float (&out)[8]) {
  if (vectors) return load8_cached(x, out);
#pragma unroll
  for (int i = 0; i < 8; ++i) out[i] = x[i];
}

// x's 16 rows, normed when asked, into xs as bf16 (row r at r * skinny_row_stride(k)), by the
// whole block: half a warp a row, lane j of it 8 columns from 8 j on, every 128. With a norm the
// lanes first read the row for its sum of squares; the second read, to stage it, finds it in L1.
// Plain loads, not the read-only path: x was written by the kernel before, which may still have
// been running when this one started (overlapped_launch.h).
template <bool kNorm>
__device__ __forceinline__ void stage_x(const SkinnyRows<kNorm>& rows, __nv_bfloat16* xs) {
  constexpr int kLanesPerRow = 16, kRowsAtOnce = kSkinnyWarps * 32 / kLanesPerRow;
  static_assert(kRowsAtOnce == kTile, "each row takes half a warp");
  const int row = static_cast<int>(threadIdx.x) / kLanesPerRow,
            first = static_cast<int>(threadIdx.x) % kLanesPerRow * 8;
  const int k = rows.k, ld = skinny_row_stride(k);
  const float* in = rows.x + static_cast<int64_t>(row) * k;
  const bool present = row < rows.m;
  const bool vectors =
      (reinterpret_cast<uintptr_t>(rows.x) | reinterpret_cast<uintptr_t>(rows.g)) % 16 == 0;
  float inv_rms = 1.f;
  if constexpr (kNorm) {
    float sum_sq = 0.f;
    if (present) {
#pragma unroll 4
      for (int c = first; c < k; c += kLanesPerRow * 8) {
        float v[8];
        load8_any(in + c, vectors, v);
#pragma unroll
        for (int i = 0; i < 8; ++i) sum_sq += v[i] * v[i];
      }
    }
#pragma unroll
    for (int offset = kLanesPerRow / 2; offset > 0; offset /= 2) {
      sum_sq += __shfl_xor_sync(0xffffffffu, sum_sq, offset);
    }
    inv_rms = 1.f / sqrtf(sum_sq / static_cast<float>(k) + rows.eps);
  }
#pragma unroll 4
  for (int c = first; c < k; c += kLanesPerRow * 8) {
    float v[8] = {};
    if (present) {
      load8_any(in + c, vectors, v);
      if constexpr (kNorm) {
        float g[8];
        load8_any(rows.g + c, vectors, g);
#pragma unroll
        for (int i = 0; i < 8; ++i) v[i] = g[i] * (v[i] * inv_rms);
      }
    }
    uint4 packed;
    packed.x = bf16_pair(v[0], v[1]), packed.y = bf16_pair(v[2], v[3]);
    packed.z = bf16_pair(v[4], v[5]), packed.w = bf16_pair(v[6], v[7]);
    *reinterpret_cast<uint4*>(xs + row * ld + c) = packed;
  }
}

// A chunk's weights of one lane, for one product: 8 of row g of the tile and 8 of row g + 8.
struct ChunkWeights {
  uint4 upper, lower;
};

// acc[0] (x's rows 0 .. 7) and acc[1] (rows 8 .. 15) += a chunk of 32 k. The order of k within a
// product does not matter, so each lane's 16 bytes of weights and of x are used as they lie
// rather than shuffled into mma's layout (warp_mma.cuh): its pairs 0 and 1 are the lane's k
// positions 2t, 2t + 1 and 2t + 8, 2t + 9 of one mma step, pairs 2 and 3 of a second, for the
// weights (a: rows g, g + 8) and x (b: column g) alike.
__device__ __forceinline__ void multiply_chunk(const ChunkWeights& w, const uint4& x_low,
                                               const uint4& x_high, float (&acc)[2][4]) {
  const uint32_t upper[4] = {w.upper.x, w.upper.y, w.upper.z, w.upper.w};
  const uint32_t lower[4] = {w.lower.x, w.lower.y, w.lower.z, w.lower.w};
  const uint32_t low[4] = {x_low.x, x_low.y, x_low.z, x_low.w};
  const uint32_t high[4] = {x_high.x, x_high.y, x_high.z, x_high.w};
#pragma unroll
  for (int step = 0; step < 2; ++step) {
    const uint32_t a[4] = {upper[2 * step], lower[2 * step], upper[2 * step + 1],
                           lower[2 * step + 1]};
    const uint32_t b_low[2] = {low[2 * step], low[2 * step + 1]};
    const uint32_t b_high[2] = {high[2 * step], high[2 * step + 1]};
    mma_16x8x16(acc[0], a, b_low);
    mma_16x8x16(acc[1], a, b_high);
  }
}

// Each warp multiplies x's 16 rows by one tile of 16 weight rows of each of P products, over its
// slice of k: warp w takes the tile blockIdx.x * (kSkinnyWarps / slices) + w / slices and every
// slices-th chunk of 32 from (w % slices) * 32, loading the weights of kGroupChunks chunks ahead of
// the ones it multiplies. x's rows are staged once a block, in bf16. The slices of a tile are then
// summed in shared memory in a fixed order, and `write(row, tile, column, values)` is called for
// each of the tile's outputs in rows below m, column 0..15 within the tile, values[p] product p's
// sum. `weights(tile, p)` gives product p's first weight row of a tile. Every tile starts 16-byte
// aligned, k % 32 == 0. The first group's weights go out before the wait on the kernel before when
// `early_weights` (device_math.cuh). Right after the wait, `before_write(row, tile, column)` is
// called for the same outputs, for the write's prefetches of what the kernels before wrote.
template <int P, bool kNorm, typename Weights, typename BeforeWrite, typename Write>
__device__ __forceinline__ void skinny_tiles(const SkinnyRows<kNorm>& rows, Weights weights,
                                             int tiles, int slices, bool early_weights,
                                             BeforeWrite before_write, Write write) {
  TFM_DYNAMIC_SHARED_MEMORY(shared);
  const int k = rows.k, ld = skinny_row_stride(k);
  auto* xs = reinterpret_cast<__nv_bfloat16*>(shared);
  // [P][kSkinnyWarps][16 rows of x][16 columns] f32, after x's rows.
  auto* partial = reinterpret_cast<float*>(shared + kTile * ld * sizeof(__nv_bfloat16));
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32, g = lane / 4, t = lane % 4;
  const int slice = warp % slices, stride = kChunk * slices;
  const int tile = blockIdx.x * (kSkinnyWarps / slices) + warp / slices;
  const bool active = tile < tiles;
  const __nv_bfloat16* w[P] = {};
  ChunkWeights group[P][kGroupChunks];
  const auto load_group = [&](int first) {
#pragma unroll
    for (int s = 0; s < kGroupChunks; ++s) {
      const int c = first + s * stride;
      if (c >= k) break;
#pragma unroll
      for (int p = 0; p < P; ++p) {
        // Weights are read once per step: stream them past the caches.
        group[p][s].upper = __ldcs(reinterpret_cast<const uint4*>(w[p] + c));
        group[p][s].lower = __ldcs(reinterpret_cast<const uint4*>(w[p] + 8 * k + c));
      }
    }
  };
  before_early_reads(early_weights);
  if (active) {
#pragma unroll
    for (int p = 0; p < P; ++p) w[p] = weights(tile, p) + static_cast<int64_t>(g) * k + 8 * t;
    load_group(slice * kChunk);
  }
  after_early_reads(early_weights);
  // The outputs this lane writes: the tile's (row, column) below row m, e = 16 row + column.
  const auto for_each_output = [&](auto f) {
    for (int e = slice * 32 + lane; e < kTile * kTile; e += 32 * slices) {
      if (e / kTile < rows.m) f(e, e / kTile, e % kTile);
    }
  };
  if (active) for_each_output([&](int, int row, int column) { before_write(row, tile, column); });
  stage_x(rows, xs);
  __syncthreads();
  float acc[P][2][4] = {};
  if (active) {
    const __nv_bfloat16* x_low = xs + g * ld + 8 * t;  // x's row g; row g + 8 is 8 ld on
    for (int first = slice * kChunk; first < k; first += stride * kGroupChunks) {
      ChunkWeights current[P][kGroupChunks];
#pragma unroll
      for (int s = 0; s < kGroupChunks; ++s) {
#pragma unroll
        for (int p = 0; p < P; ++p) current[p][s] = group[p][s];
      }
      if (first + stride * kGroupChunks < k) load_group(first + stride * kGroupChunks);
#pragma unroll
      for (int s = 0; s < kGroupChunks; ++s) {
        const int c = first + s * stride;
        if (c >= k) break;
        const uint4 low = *reinterpret_cast<const uint4*>(x_low + c);
        const uint4 high = *reinterpret_cast<const uint4*>(x_low + 8 * ld + c);
#pragma unroll
        for (int p = 0; p < P; ++p) multiply_chunk(current[p][s], low, high, acc[p]);
      }
    }
  }
  // acc[p][h]: rows 8 h + 2 t and 8 h + 2 t + 1 of x, columns g ([0], [1]) and g + 8 ([2], [3]).
#pragma unroll
  for (int p = 0; p < P; ++p) {
    float* sums = partial + (p * kSkinnyWarps + warp) * kTile * kTile;
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      const int row = 8 * h + 2 * t;
      sums[row * kTile + g] = acc[p][h][0], sums[(row + 1) * kTile + g] = acc[p][h][1];
      sums[row * kTile + g + 8] = acc[p][h][2], sums[(row + 1) * kTile + g + 8] = acc[p][h][3];
    }
  }
  __syncthreads();
  if (!active) return;
  const int first_warp = warp - slice;
  for_each_output([&](int e, int row, int column) {
    float values[P];
#pragma unroll
    for (int p = 0; p < P; ++p) {
      float total = 0.f;
      for (int s = 0; s < slices; ++s) {
        total += partial[(p * kSkinnyWarps + first_warp + s) * kTile * kTile + e];
      }
      values[p] = total;
    }
    write(row, tile, column, values);
  });
}

// A skinny kernel's before_write with nothing to prefetch.
__device__ __forceinline__ void nothing_to_prefetch(int, int, int) {}

// y = (x w^T + bias) + residual, as the GEMV; bias and residual may be null.
template <bool kNorm>
__global__ void __launch_bounds__(kSkinnyWarps * 32)
    skinny_linear_kernel(const SkinnyRows<kNorm> rows, const __nv_bfloat16* __restrict__ w,
                         const float* __restrict__ bias, const float* __restrict__ residual, int n,
                         int slices, float* __restrict__ y, bool early_weights) {
  const int k = rows.k;
  skinny_tiles<1>(
      rows, [&](int tile, int) { return w + static_cast<int64_t>(tile) * kTile * k; }, n / kTile,
      slices, early_weights,
      // The residual (written by a kernel before) comes into L1 while the products run, so that
      // the writes do not wait a round trip each for it.
      [&](int row, int tile, int column) {
        if (residual) prefetch_l1(residual + static_cast<int64_t>(row) * n + tile * kTile + column);
      },
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
                      int slices, bool early_weights) {
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
      tiles, slices, early_weights, nothing_to_prefetch,
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
                        const float* __restrict__ bu, int n, int slices, float* __restrict__ y,
                        bool early_weights) {
  const int k = rows.k;
  skinny_tiles<2>(
      rows,
      [&](int tile, int product) {
        return (product == 0 ? wg : wu) + static_cast<int64_t>(tile) * kTile * k;
      },
      n / kTile, slices, early_weights, nothing_to_prefetch,
      [&](int row, int tile, int column, const float(&v)[2]) {
        const int col = tile * kTile + column;
        const float gate = v[0] + (bg ? bg[col] : 0.f), up = v[1] + (bu ? bu[col] : 0.f);
        y[static_cast<int64_t>(row) * n + col] = silu(gate) * up;
      });
}

}  // namespace
}  // namespace tfm::cuda
