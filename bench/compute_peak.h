// The host's arithmetic peak, which bounds CPU prefill and the products of many rows the way the
// read bandwidth bounds decode: independent multiply-adds on registers, every thread, nothing
// read from memory. Shared by the benchmarks that compare a product's rate with it.
#pragma once

#include <omp.h>

#include <algorithm>
#include <chrono>

#include "backends/cpu/amx_tiles.h"
#include "backends/cpu/multiply_add_chains.h"
#include "backends/cpu/simd_intrinsics.h"

namespace tfm::bench {

namespace detail {

// Independent chains, as many as tfm's own (multiply_add_chains.h), for the 256-bit loop below.
constexpr int kChains = tfm::cpu::avx512::kChains;
constexpr long kSteps = 20'000'000;

template <typename Step>
double peak_gflops(double flops_per_step, Step step, long steps = kSteps) {
  double best = 0;
  for (int rep = 0; rep < 3; ++rep) {
    const auto start = std::chrono::steady_clock::now();
    float sink = 0;
    int threads = 1;
#pragma omp parallel reduction(+ : sink)
    {
      sink += step();
#pragma omp single nowait
      threads = omp_get_num_threads();
    }
    const std::chrono::duration<double> s = std::chrono::steady_clock::now() - start;
    __asm__ volatile("" : : "m"(sink));  // the chains' results used, so that they are computed
    best = std::max(best, flops_per_step * steps * threads / s.count() / 1e9);
  }
  return best;
}

constexpr long kTileSteps = 4'000'000;

// 4 independent product tiles, each 16 x 16 f32 += 16 x 32 bf16 times 32 x 16.
__attribute__((target("amx-tile,amx-bf16"))) inline float amx_bf16_chains() {
  tfm::cpu::configure_tiles();
  alignas(64) static const uint16_t kOperand[16 * 32] = {};
  _tile_loadd(4, kOperand, 64);
  _tile_loadd(5, kOperand, 64);
  _tile_loadd(6, kOperand, 64);
  _tile_loadd(7, kOperand, 64);
  _tile_zero(0);
  _tile_zero(1);
  _tile_zero(2);
  _tile_zero(3);
  for (long i = 0; i < kTileSteps / 4; ++i) {
    _tile_dpbf16ps(0, 4, 6);
    _tile_dpbf16ps(1, 4, 7);
    _tile_dpbf16ps(2, 5, 6);
    _tile_dpbf16ps(3, 5, 7);
  }
  alignas(64) float c[16 * 16];
  _tile_stored(0, c, 64);
  _tile_release();
  return c[0];
}

inline float f32_fma_chains() {
  __m256 acc[kChains];
  for (auto& a : acc) a = _mm256_setzero_ps();
  const __m256 x = _mm256_set1_ps(1.f), y = _mm256_set1_ps(1e-9f);
  for (long i = 0; i < kSteps / kChains; ++i) {
#pragma GCC unroll 12
    for (auto& a : acc) a = _mm256_fmadd_ps(a, x, y);
  }
  __m256 total = acc[0];
  for (int c = 1; c < kChains; ++c) total = _mm256_add_ps(total, acc[c]);
  return _mm256_cvtss_f32(total);
}

}  // namespace detail

// vdpbf16ps on 512-bit registers: 32 bf16 products and 32 adds each. Only where the CPU has
// AVX512_BF16 (cpu_isa()).
inline double bf16_dot_peak_gflops() {
  return detail::peak_gflops(
      64.0, [] { return tfm::cpu::avx512::bf16_dot_chains(detail::kSteps / detail::kChains); });
}

// AMX's TDPBF16PS: 16 x 16 x 32 bf16 products and as many adds each. Only where the CPU has
// AMX-BF16 (cpu_isa()).
inline double amx_bf16_peak_gflops() {
  return detail::peak_gflops(2.0 * 16 * 16 * 32, detail::amx_bf16_chains, detail::kTileSteps);
}

// 256-bit f32 FMAs (the AVX2 baseline): 8 products and 8 adds each.
inline double f32_fma_peak_gflops() { return detail::peak_gflops(16.0, detail::f32_fma_chains); }

// 512-bit f32 FMAs: 16 products and 16 adds each. Only where the CPU has AVX-512 (cpu_isa()).
inline double f32_fma512_peak_gflops() {
  return detail::peak_gflops(
      32.0, [] { return tfm::cpu::avx512::f32_fma_chains(detail::kSteps / detail::kChains); });
}

}  // namespace tfm::bench
