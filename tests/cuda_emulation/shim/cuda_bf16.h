// bf16 for the CPU emulation of CUDA kernels (see cuda_runtime.h here), through the project's
// own conversions: rounding to nearest even, as __float2bfloat16_rn does.
#pragma once

#include <cstdint>

#include "cuda_runtime.h"
#include "tfm/dtype.h"

struct __nv_bfloat16 {
  uint16_t bits;
};
struct alignas(4) __nv_bfloat162 {
  __nv_bfloat16 x, y;
};

inline __nv_bfloat16 __float2bfloat16_rn(float f) { return {tfm::f32_to_bf16_bits(f)}; }
inline float __bfloat162float(__nv_bfloat16 b) { return tfm::bf16_bits_to_f32(b.bits); }
inline float2 __bfloat1622float2(__nv_bfloat162 pair) {
  return {__bfloat162float(pair.x), __bfloat162float(pair.y)};
}

// mma.sync m16n8k16 (see src/backends/cuda/warp_mma.cuh, which leaves it to this emulation): the
// warp's lanes put their fragments in a table, and each computes its own four results from all.
#define TFM_EMULATED_WARP_MMA
inline void mma_16x8x16(float (&d)[4], const uint32_t (&a)[4], const uint32_t (&b)[2]) {
  struct Fragments {
    uint32_t a[4], b[2];
  };
  static Fragments table[32][32];
  using tfm::cuda_emulation::linear_thread;
  const unsigned warp = linear_thread() / 32, lane = linear_thread() % 32;
  table[warp][lane] = {{a[0], a[1], a[2], a[3]}, {b[0], b[1]}};
  __syncwarp();
  const auto half = [](uint32_t reg, int i) {
    return tfm::bf16_bits_to_f32(static_cast<uint16_t>(i == 0 ? reg : reg >> 16));
  };
  float am[16][16], bm[16][8];
  for (unsigned l = 0; l < 32; ++l) {
    const unsigned g = l / 4, t = l % 4;
    const Fragments& f = table[warp][l];
    for (int i = 0; i < 2; ++i) {
      am[g][2 * t + i] = half(f.a[0], i);
      am[g + 8][2 * t + i] = half(f.a[1], i);
      am[g][2 * t + 8 + i] = half(f.a[2], i);
      am[g + 8][2 * t + 8 + i] = half(f.a[3], i);
      bm[2 * t + i][g] = half(f.b[0], i);
      bm[2 * t + 8 + i][g] = half(f.b[1], i);
    }
  }
  __syncwarp();  // every lane has read the table before any writes it again
  const unsigned g = lane / 4, t = lane % 4;
  for (int i = 0; i < 4; ++i) {
    const unsigned row = g + (i >= 2 ? 8 : 0), column = 2 * t + i % 2;
    float sum = d[i];
    for (int k = 0; k < 16; ++k) sum += am[row][k] * bm[k][column];
    d[i] = sum;
  }
}

// ldmatrix .x4 (see warp_mma.cuh): the lanes put their rows' addresses in a table, and each
// gathers its own four registers from the rows of all.
template <bool kTransposed>
void load_matrices_x4(uint32_t (&r)[4], const __nv_bfloat16* row) {
  static const __nv_bfloat16* table[32][32];
  using tfm::cuda_emulation::linear_thread;
  tfm::cuda_emulation::check_shared(row, 16, "ldmatrix");
  const unsigned warp = linear_thread() / 32, lane = linear_thread() % 32;
  table[warp][lane] = row;
  __syncwarp();
  const unsigned g = lane / 4, t = lane % 4;
  for (unsigned j = 0; j < 4; ++j) {
    const __nv_bfloat16* const* rows = table[warp] + 8 * j;  // matrix j's eight rows
    const __nv_bfloat16 low = kTransposed ? rows[2 * t][g] : rows[g][2 * t];
    const __nv_bfloat16 high = kTransposed ? rows[2 * t + 1][g] : rows[g][2 * t + 1];
    r[j] = uint32_t{low.bits} | uint32_t{high.bits} << 16;
  }
  __syncwarp();  // every lane has read the table before any writes it again
}

// movmatrix .trans (see warp_mma.cuh): the lanes put their registers in a table, and each gathers
// its row of the transpose, row g = lane / 4 of which is column g of the matrix.
inline uint32_t transposed_matrix(uint32_t m) {
  static uint32_t table[32][32];
  using tfm::cuda_emulation::linear_thread;
  const unsigned warp = linear_thread() / 32, lane = linear_thread() % 32;
  table[warp][lane] = m;
  __syncwarp();
  // Element (r, c) of the matrix: lane 4 r + c / 2, half c % 2.
  const auto element = [&](unsigned r, unsigned c) {
    return static_cast<uint16_t>(table[warp][4 * r + c / 2] >> (16 * (c % 2)));
  };
  const unsigned g = lane / 4, t = lane % 4;
  const uint32_t r = uint32_t{element(2 * t, g)} | uint32_t{element(2 * t + 1, g)} << 16;
  __syncwarp();  // every lane has read the table before any writes it again
  return r;
}
