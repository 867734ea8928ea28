#include "backends/cpu/multiply_add_chains.h"

#include "backends/cpu/simd_intrinsics.h"

// One target for the file: the FMAs' chains hold no bf16 instruction, so they run wherever the CPU
// has AVX-512.
#pragma GCC push_options
#pragma GCC target("avx512f,avx512bf16")

namespace tfm::cpu::avx512 {
namespace {

template <typename Step>
float sum_of_chains(long steps, Step step) {
  __m512 acc[kChains];
  for (auto& a : acc) a = _mm512_setzero_ps();
  for (long i = 0; i < steps; ++i) {
#pragma GCC unroll 12
    for (auto& a : acc) a = step(a);
  }
  __m512 total = acc[0];
  for (int c = 1; c < kChains; ++c) total = _mm512_add_ps(total, acc[c]);
  return _mm512_reduce_add_ps(total);
}

}  // namespace

float bf16_dot_chains(long steps) {
  const auto one = reinterpret_cast<__m512bh>(_mm512_set1_epi16(0x3f80));
  return sum_of_chains(steps, [one](__m512 a) { return _mm512_dpbf16_ps(a, one, one); });
}

float f32_fma_chains(long steps) {
  const __m512 x = _mm512_set1_ps(1.f), y = _mm512_set1_ps(1e-9f);
  return sum_of_chains(steps, [x, y](__m512 a) { return _mm512_fmadd_ps(a, x, y); });
}

}  // namespace tfm::cpu::avx512

#pragma GCC pop_options
