#include "backends/cpu/multiply_add_chains.h"

#include "backends/cpu/simd_intrinsics.h"

namespace tfm::cpu::avx512 {
namespace {
// Enough independent chains to hide a multiply-add's latency on every x86 core.
constexpr int kChains = 12;
}  // namespace

__attribute__((target("avx512f,avx512bf16"))) float bf16_dot_chains(long steps) {
  __m512 acc[kChains];
  for (auto& a : acc) a = _mm512_setzero_ps();
  const auto one = reinterpret_cast<__m512bh>(_mm512_set1_epi16(0x3f80));
  for (long i = 0; i < steps; ++i) {
#pragma GCC unroll 12
    for (auto& a : acc) a = _mm512_dpbf16_ps(a, one, one);
  }
  __m512 total = acc[0];
  for (int c = 1; c < kChains; ++c) total = _mm512_add_ps(total, acc[c]);
  return _mm512_reduce_add_ps(total);
}

__attribute__((target("avx512f"))) float f32_fma_chains(long steps) {
  __m512 acc[kChains];
  for (auto& a : acc) a = _mm512_setzero_ps();
  const __m512 x = _mm512_set1_ps(1.f), y = _mm512_set1_ps(1e-9f);
  for (long i = 0; i < steps; ++i) {
#pragma GCC unroll 12
    for (auto& a : acc) a = _mm512_fmadd_ps(a, x, y);
  }
  __m512 total = acc[0];
  for (int c = 1; c < kChains; ++c) total = _mm512_add_ps(total, acc[c]);
  return _mm512_reduce_add_ps(total);
}

}  // namespace tfm::cpu::avx512
