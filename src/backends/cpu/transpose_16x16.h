// A 16 x 16 matrix of 32-bit values in 16 AVX-512 registers transposed in place: what turns rows
// of bf16 pairs into the layout AMX's right operand and vdpbf16ps's pairs take (packed_products.h),
// and AMX's product tiles into out's rows. Include only under an AVX-512 target pragma, after
// simd_intrinsics.h. In namespace avx512, where tools/check_isa.sh allows AVX-512 code (an
// unoptimized build keeps its lambda out of line).
#pragma once

namespace tfm::cpu::avx512 {

// r[j] becomes column j. Always inlined: called with r on the stack, it took 13% of a prefill's
// products (perf).
[[gnu::always_inline]] inline void transpose_16x16(__m512 (&r)[16]) {
  __m512 t[16];
  for (int i = 0; i < 8; ++i) {
    t[2 * i] = _mm512_unpacklo_ps(r[2 * i], r[2 * i + 1]);
    t[2 * i + 1] = _mm512_unpackhi_ps(r[2 * i], r[2 * i + 1]);
  }
  // u[4 i + c], in each 128-bit block b: column 4 b + c of rows 4 i to 4 i + 3.
  __m512 u[16];
  for (int i = 0; i < 4; ++i) {
    const auto pd = [&](int j) { return _mm512_castps_pd(t[4 * i + j]); };
    u[4 * i] = _mm512_castpd_ps(_mm512_unpacklo_pd(pd(0), pd(2)));
    u[4 * i + 1] = _mm512_castpd_ps(_mm512_unpackhi_pd(pd(0), pd(2)));
    u[4 * i + 2] = _mm512_castpd_ps(_mm512_unpacklo_pd(pd(1), pd(3)));
    u[4 * i + 3] = _mm512_castpd_ps(_mm512_unpackhi_pd(pd(1), pd(3)));
  }
  for (int c = 0; c < 4; ++c) {
    const __m512 low_a = _mm512_shuffle_f32x4(u[c], u[4 + c], 0x44);
    const __m512 high_a = _mm512_shuffle_f32x4(u[c], u[4 + c], 0xEE);
    const __m512 low_b = _mm512_shuffle_f32x4(u[8 + c], u[12 + c], 0x44);
    const __m512 high_b = _mm512_shuffle_f32x4(u[8 + c], u[12 + c], 0xEE);
    r[c] = _mm512_shuffle_f32x4(low_a, low_b, 0x88);
    r[4 + c] = _mm512_shuffle_f32x4(low_a, low_b, 0xDD);
    r[8 + c] = _mm512_shuffle_f32x4(high_a, high_b, 0x88);
    r[12 + c] = _mm512_shuffle_f32x4(high_a, high_b, 0xDD);
  }
}

}  // namespace tfm::cpu::avx512
