// One warp-wide tensor-core step, mma.sync m16n8k16 (bf16 in, f32 accumulate), on fragments kept
// in registers: d[16 x 8] += a[16 x 16] * b[16 x 8]. With g = lane / 4 and t = lane % 4, a lane
// holds (PTX ISA, "Matrix Fragments for mma.m16n8k16"):
//   a[0]: row g,     columns 2t, 2t + 1        a[1]: row g + 8, columns 2t, 2t + 1
//   a[2]: row g,     columns 2t + 8, 2t + 9    a[3]: row g + 8, columns 2t + 8, 2t + 9
//   b[0]: rows 2t, 2t + 1 of column g          b[1]: rows 2t + 8, 2t + 9 of column g
//   d[0], d[1]: row g, columns 2t, 2t + 1      d[2], d[3]: row g + 8, columns 2t, 2t + 1
// each register two bf16, the lower index in the low half. tests/cuda_emulation defines
// TFM_EMULATED_WARP_MMA and its own mma_16x8x16, load_matrices_x4 and transposed_matrix with
// these semantics.
#pragma once

#include <cuda_bf16.h>

#include <cstdint>

namespace tfm::cuda {

// Two floats as the bf16 pair of one fragment register.
__device__ __forceinline__ uint32_t bf16_pair(float low, float high) {
  const __nv_bfloat162 pair{__float2bfloat16_rn(low), __float2bfloat16_rn(high)};
  return *reinterpret_cast<const uint32_t*>(&pair);
}

#ifndef TFM_EMULATED_WARP_MMA
__device__ __forceinline__ void mma_16x8x16(float (&d)[4], const uint32_t (&a)[4],
                                            const uint32_t (&b)[2]) {
  asm volatile(
      "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, "
      "{%8, %9}, {%0, %1, %2, %3};"
      : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]));
}

// Four 8x8 bf16 matrices from shared memory into fragment registers, a warp at once (ldmatrix
// .x4): lane l gives the address of row l % 8 of matrix l / 8 (16 bytes, 16-byte aligned), and
// r[j] gets matrix j's row g, columns 2t, 2t + 1 (the layout above), or with kTransposed its rows
// 2t, 2t + 1 of column g: a right-hand fragment from a tile stored with the product's k along
// its rows.
template <bool kTransposed>
__device__ __forceinline__ void load_matrices_x4(uint32_t (&r)[4], const __nv_bfloat16* row) {
  const auto address = static_cast<unsigned>(__cvta_generic_to_shared(row));
  if constexpr (kTransposed) {
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0, %1, %2, %3}, [%4];"
                 : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
                 : "r"(address));
  } else {
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0, %1, %2, %3}, [%4];"
                 : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
                 : "r"(address));
  }
}

// The transpose of an 8x8 bf16 matrix held one register a lane as a[0] above (row g, columns 2t,
// 2t + 1), a warp at once (movmatrix .trans): the lane gets row g, columns 2t, 2t + 1 of the
// transpose.
__device__ __forceinline__ uint32_t transposed_matrix(uint32_t m) {
  uint32_t r;
  asm volatile("movmatrix.sync.aligned.m8n8.trans.b16 %0, %1;" : "=r"(r) : "r"(m));
  return r;
}
#endif

}  // namespace tfm::cuda
