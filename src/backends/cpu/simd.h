// The float vector of the ISA a kernel file is compiled for, with loads that widen bf16 to f32 in
// registers: AVX-512 where the including file says so (TFM_SIMD_AVX512, inside its AVX-512 target
// pragma: vector_kernels_avx512.cc), else AVX2+FMA (the build's x86-64-v3 baseline), else scalar.
// Each ISA's definitions live in an inline namespace of their own, so the two builds' inline
// functions never meet at link time. tfm's kernels take it only through vector_kernels_body.h,
// chosen at run time (vector_kernels.h); the benchmarks' bandwidth probe uses the baseline.
#pragma once

#include <cmath>
#include <cstdint>

#include "backends/cpu/simd_intrinsics.h"
#include "tfm/dtype.h"

#if defined(TFM_SIMD_AVX512)
#include "backends/cpu/sums_of_16.h"
#define TFM_SIMD_ABI avx512
#elif defined(__AVX2__) && defined(__FMA__)
#define TFM_SIMD_ABI avx2
#else
#define TFM_SIMD_ABI scalar
#endif

namespace tfm::cpu::simd {
inline namespace TFM_SIMD_ABI {

#if defined(TFM_SIMD_AVX512)
inline constexpr const char* kIsaName = "AVX-512";
inline constexpr int kWidth = 16;
using Vec = __m512;
inline Vec zero() { return _mm512_setzero_ps(); }
inline Vec load(const float* p) { return _mm512_loadu_ps(p); }
inline Vec load(const uint16_t* p) {
  const __m256i half = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p));
  return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(half), 16));
}
inline Vec fma(Vec a, Vec b, Vec c) { return _mm512_fmadd_ps(a, b, c); }
inline Vec broadcast(float v) { return _mm512_set1_ps(v); }
inline void store(float* p, Vec v) { _mm512_storeu_ps(p, v); }
// f32_to_bf16_bits of each lane: the same integer steps, NaNs picked out by a compare.
inline void store_bf16(uint16_t* p, Vec v) {
  const __m512i bits = _mm512_castps_si512(v);
  const __m512i high = _mm512_srli_epi32(bits, 16);
  const __mmask16 nan = _mm512_cmpgt_epi32_mask(
      _mm512_and_si512(bits, _mm512_set1_epi32(0x7fffffff)), _mm512_set1_epi32(0x7f800000));
  const __m512i even =
      _mm512_add_epi32(_mm512_set1_epi32(0x7fff), _mm512_and_si512(high, _mm512_set1_epi32(1)));
  const __m512i rounded = _mm512_srli_epi32(_mm512_add_epi32(bits, even), 16);
  const __m512i quiet = _mm512_or_si512(high, _mm512_set1_epi32(0x40));
  _mm256_storeu_si256(reinterpret_cast<__m256i*>(p),
                      _mm512_cvtepi32_epi16(_mm512_mask_blend_epi32(nan, rounded, quiet)));
}
inline float sum(Vec v) { return _mm512_reduce_add_ps(v); }
// Lane i: the sum of a[i]'s lanes, for kWidth vectors at once (sums_of_16.h, its lanes put back in
// order): a dot product of each of kWidth rows sums its vector in far fewer steps than kWidth
// sum()s.
inline Vec sums(const Vec (&a)[kWidth]) {
  using avx512_lanes::kSlot;
  // kSlot swaps pairs of lanes, so it is its own inverse.
  const __m512i order = _mm512_setr_epi32(
      kSlot[0], kSlot[1], kSlot[2], kSlot[3], kSlot[4], kSlot[5], kSlot[6], kSlot[7], kSlot[8],
      kSlot[9], kSlot[10], kSlot[11], kSlot[12], kSlot[13], kSlot[14], kSlot[15]);
  return _mm512_permutexvar_ps(order, avx512_lanes::sums_of_16(a));
}
inline Vec max(Vec a, Vec b) { return _mm512_max_ps(a, b); }
inline float max_of(Vec v) { return _mm512_reduce_max_ps(v); }
// v's lanes where kWidth flags are nonzero, `otherwise`'s where they are 0.
inline Vec where_set(const int32_t* flags, Vec v, Vec otherwise) {
  const __m512i f = _mm512_loadu_si512(flags);
  return _mm512_mask_blend_ps(_mm512_test_epi32_mask(f, f), otherwise, v);
}
#elif defined(__AVX2__) && defined(__FMA__)
inline constexpr const char* kIsaName = "AVX2+FMA";
inline constexpr int kWidth = 8;
using Vec = __m256;
inline Vec zero() { return _mm256_setzero_ps(); }
inline Vec load(const float* p) { return _mm256_loadu_ps(p); }
inline Vec load(const uint16_t* p) {
  const __m128i half = _mm_loadu_si128(reinterpret_cast<const __m128i*>(p));
  return _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32(half), 16));
}
inline Vec fma(Vec a, Vec b, Vec c) { return _mm256_fmadd_ps(a, b, c); }
inline Vec broadcast(float v) { return _mm256_set1_ps(v); }
inline void store(float* p, Vec v) { _mm256_storeu_ps(p, v); }
inline void store_bf16(uint16_t* p, Vec v) {
  const __m256i bits = _mm256_castps_si256(v);
  const __m256i high = _mm256_srli_epi32(bits, 16);
  const __m256i nan = _mm256_cmpgt_epi32(_mm256_and_si256(bits, _mm256_set1_epi32(0x7fffffff)),
                                         _mm256_set1_epi32(0x7f800000));
  const __m256i even =
      _mm256_add_epi32(_mm256_set1_epi32(0x7fff), _mm256_and_si256(high, _mm256_set1_epi32(1)));
  const __m256i rounded = _mm256_srli_epi32(_mm256_add_epi32(bits, even), 16);
  const __m256i quiet = _mm256_or_si256(high, _mm256_set1_epi32(0x40));
  // packus works within 128-bit lanes: the permute brings both lanes' four halves together.
  const __m256i both = _mm256_blendv_epi8(rounded, quiet, nan);
  const __m256i packed = _mm256_permute4x64_epi64(_mm256_packus_epi32(both, both), 0x08);
  _mm_storeu_si128(reinterpret_cast<__m128i*>(p), _mm256_castsi256_si128(packed));
}
inline float sum(Vec v) {
  const __m128 quad = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
  const __m128 pair = _mm_add_ps(quad, _mm_movehl_ps(quad, quad));
  return _mm_cvtss_f32(_mm_add_ss(pair, _mm_shuffle_ps(pair, pair, 1)));
}
// Lane i: the sum of a[i]'s lanes, in three rounds of pairwise adds across eight vectors.
inline Vec sums(const Vec (&a)[kWidth]) {
  // pairs[j]: a[2j]'s and a[2j + 1]'s lanes added in pairs; quads[j]: four sums of four lanes
  // each (a[4j] to a[4j + 3]) in each 128-bit half, the low half's lanes 0-3, the high's 4-7.
  __m256 pairs[4], quads[2];
  for (int j = 0; j < 4; ++j) pairs[j] = _mm256_hadd_ps(a[2 * j], a[2 * j + 1]);
  for (int j = 0; j < 2; ++j) quads[j] = _mm256_hadd_ps(pairs[2 * j], pairs[2 * j + 1]);
  return _mm256_add_ps(_mm256_permute2f128_ps(quads[0], quads[1], 0x20),
                       _mm256_permute2f128_ps(quads[0], quads[1], 0x31));
}
inline Vec max(Vec a, Vec b) { return _mm256_max_ps(a, b); }
inline float max_of(Vec v) {
  const __m128 quad = _mm_max_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
  const __m128 pair = _mm_max_ps(quad, _mm_movehl_ps(quad, quad));
  return _mm_cvtss_f32(_mm_max_ss(pair, _mm_shuffle_ps(pair, pair, 1)));
}
inline Vec where_set(const int32_t* flags, Vec v, Vec otherwise) {
  const __m256i f = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(flags));
  const __m256 unset = _mm256_castsi256_ps(_mm256_cmpeq_epi32(f, _mm256_setzero_si256()));
  return _mm256_blendv_ps(v, otherwise, unset);
}
#else
inline constexpr const char* kIsaName = "scalar";
inline constexpr int kWidth = 1;
using Vec = float;
inline Vec zero() { return 0.f; }
inline Vec load(const float* p) { return *p; }
inline Vec load(const uint16_t* p) { return bf16_bits_to_f32(*p); }
inline Vec fma(Vec a, Vec b, Vec c) { return a * b + c; }
inline Vec broadcast(float v) { return v; }
inline void store(float* p, Vec v) { *p = v; }
inline void store_bf16(uint16_t* p, Vec v) { *p = f32_to_bf16_bits(v); }
inline float sum(Vec v) { return v; }
inline Vec sums(const Vec (&a)[kWidth]) { return a[0]; }
inline Vec max(Vec a, Vec b) { return a > b ? a : b; }
inline float max_of(Vec v) { return v; }
inline Vec where_set(const int32_t* flags, Vec v, Vec otherwise) {
  return *flags != 0 ? v : otherwise;
}
#endif

// e^x for a vector, ~2 ulp (Cephes' expf: x = n ln2 + r, a degree-6 polynomial for e^r, 2^n put
// into the exponent). NaN stays NaN; results below ~1e-38 or above ~3e38 saturate there.
#if defined(TFM_SIMD_AVX512)
inline Vec exp(Vec x) {
  x = _mm512_min_ps(_mm512_set1_ps(88.3762626647949f),
                    _mm512_max_ps(_mm512_set1_ps(-87.3365447505531f), x));
  const __m512 n = _mm512_roundscale_ps(_mm512_mul_ps(x, _mm512_set1_ps(1.44269504088896341f)),
                                        _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
  __m512 r = _mm512_fnmadd_ps(n, _mm512_set1_ps(0.693359375f), x);
  r = _mm512_fnmadd_ps(n, _mm512_set1_ps(-2.12194440e-4f), r);
  __m512 y = _mm512_set1_ps(1.9875691500e-4f);
  for (float c :
       {1.3981999507e-3f, 8.3334519073e-3f, 4.1665795894e-2f, 1.6666665459e-1f, 5.0000001201e-1f}) {
    y = _mm512_fmadd_ps(y, r, _mm512_set1_ps(c));
  }
  y = _mm512_fmadd_ps(y, _mm512_mul_ps(r, r), _mm512_add_ps(r, _mm512_set1_ps(1.f)));
  const __m512i bits =
      _mm512_slli_epi32(_mm512_add_epi32(_mm512_cvtps_epi32(n), _mm512_set1_epi32(127)), 23);
  return _mm512_mul_ps(y, _mm512_castsi512_ps(bits));
}
#elif defined(__AVX2__) && defined(__FMA__)
inline Vec exp(Vec x) {
  x = _mm256_min_ps(_mm256_set1_ps(88.3762626647949f),
                    _mm256_max_ps(_mm256_set1_ps(-87.3365447505531f), x));
  const __m256 n = _mm256_round_ps(_mm256_mul_ps(x, _mm256_set1_ps(1.44269504088896341f)),
                                   _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
  __m256 r = _mm256_fnmadd_ps(n, _mm256_set1_ps(0.693359375f), x);
  r = _mm256_fnmadd_ps(n, _mm256_set1_ps(-2.12194440e-4f), r);
  __m256 y = _mm256_set1_ps(1.9875691500e-4f);
  for (float c :
       {1.3981999507e-3f, 8.3334519073e-3f, 4.1665795894e-2f, 1.6666665459e-1f, 5.0000001201e-1f}) {
    y = _mm256_fmadd_ps(y, r, _mm256_set1_ps(c));
  }
  y = _mm256_fmadd_ps(y, _mm256_mul_ps(r, r), _mm256_add_ps(r, _mm256_set1_ps(1.f)));
  const __m256i bits =
      _mm256_slli_epi32(_mm256_add_epi32(_mm256_cvtps_epi32(n), _mm256_set1_epi32(127)), 23);
  return _mm256_mul_ps(y, _mm256_castsi256_ps(bits));
}
#else
inline Vec exp(Vec x) { return std::exp(x); }
#endif

// out[i] = f(a[i], b[i]) for a vector function f; the tail goes through f too (padded), so an
// element's result does not depend on where it sits.
template <typename F>
void map2(const float* a, const float* b, float* out, int64_t n, F f) {
  int64_t i = 0;
  for (; i + kWidth <= n; i += kWidth) store(out + i, f(load(a + i), load(b + i)));
  if (i == n) return;
  float ta[kWidth] = {}, tb[kWidth] = {}, to[kWidth];
  for (int64_t j = i; j < n; ++j) ta[j - i] = a[j], tb[j - i] = b[j];
  store(to, f(load(ta), load(tb)));
  for (int64_t j = i; j < n; ++j) out[j] = to[j - i];
}

template <typename F>
void map(const float* a, float* out, int64_t n, F f) {
  map2(a, a, out, n, [&f](Vec x, Vec) { return f(x); });
}

inline float widen(float v) { return v; }
inline float widen(uint16_t v) { return bf16_bits_to_f32(v); }

}  // namespace TFM_SIMD_ABI
}  // namespace tfm::cpu::simd
