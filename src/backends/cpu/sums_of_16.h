// 16 dot products' vector sums reduced at once, for the product kernels under an AVX-512 target
// pragma (include it after the pragma: its code takes the includer's ISA).
#pragma once

#include "backends/cpu/simd_intrinsics.h"

namespace tfm::cpu::avx512_lanes {

// The sums of 16 vectors' lanes, each in its own lane of one vector: sums[s] = sum of a[kSlot[s]]
// (kSlot below), in 4 steps of folding pairs of vectors together, where 16 separate horizontal
// sums take 4 dependent shuffles and adds each. Always inlined: with two builds of every tile,
// GCC called it and passed the 16 sums through the stack.
__attribute__((always_inline)) inline __m512 sums_of_16(const __m512 (&a)[16]) {
  __m512 b[8], c[4], d[2];
  // b[j]: a[j]'s 256-bit halves added (its 128-bit blocks 0-1), then a[j + 8]'s (blocks 2-3).
  for (int j = 0; j < 8; ++j) {
    b[j] = _mm512_add_ps(_mm512_shuffle_f32x4(a[j], a[j + 8], _MM_SHUFFLE(1, 0, 1, 0)),
                         _mm512_shuffle_f32x4(a[j], a[j + 8], _MM_SHUFFLE(3, 2, 3, 2)));
  }
  // c[j]: one 128-bit block of 4 partial sums per vector: a[j], a[j + 8], a[j + 4], a[j + 12].
  for (int j = 0; j < 4; ++j) {
    c[j] = _mm512_add_ps(_mm512_shuffle_f32x4(b[j], b[j + 4], _MM_SHUFFLE(2, 0, 2, 0)),
                         _mm512_shuffle_f32x4(b[j], b[j + 4], _MM_SHUFFLE(3, 1, 3, 1)));
  }
  // d[j], in each block: two partial sums of c[j]'s vector interleaved with two of c[j + 2]'s.
  for (int j = 0; j < 2; ++j) {
    d[j] = _mm512_add_ps(_mm512_unpacklo_ps(c[j], c[j + 2]), _mm512_unpackhi_ps(c[j], c[j + 2]));
  }
  return _mm512_add_ps(_mm512_shuffle_ps(d[0], d[1], _MM_SHUFFLE(1, 0, 1, 0)),
                       _mm512_shuffle_ps(d[0], d[1], _MM_SHUFFLE(3, 2, 3, 2)));
}

// Which of sums_of_16's inputs each lane of its result sums.
constexpr int kSlot[16] = {0, 2, 1, 3, 8, 10, 9, 11, 4, 6, 5, 7, 12, 14, 13, 15};

}  // namespace tfm::cpu::avx512_lanes
