// Products of bf16 weights with a few rows of x on CPUs with AVX512_BF16: x rounded to bf16 (as
// torch's bf16 activations are) and multiplied with the weights in pairs by vdpbf16ps, accumulated
// in f32, up to 8 rows in one pass over the weights (the f32 GEMV takes passes of 4). linear.cc
// takes it for 5 to 8 rows. Under a target pragma, run only where cpu_isa() finds AVX512_BF16.
#include <algorithm>
#include <array>
#include <cstdint>
#include <utility>
#include <vector>

#include "backends/cpu/bf16_gemm.h"
#include "backends/cpu/simd_intrinsics.h"
#include "backends/cpu/vector_kernels.h"
#include "tfm/dtype.h"

#pragma GCC push_options
#pragma GCC target("avx512f,avx512bw,avx512vl,avx512bf16")

namespace tfm::cpu::avx512_bf16 {
namespace {

constexpr int64_t kPairs = 32;  // bf16 values in one 512-bit register

// out[i, r0 + r] for M rows of x (bf16) and R weight rows: each weight register serves every row.
template <int M, int R>
void tile(const uint16_t* x, const uint16_t* w, int64_t r0, int64_t k, float* out, int64_t n) {
  __m512 acc[M][R];
  for (int i = 0; i < M; ++i)
    for (int r = 0; r < R; ++r) acc[i][r] = _mm512_setzero_ps();
  int64_t p = 0;
  for (; p + kPairs <= k; p += kPairs) {
    // The next tile's rows, in address order: a tile is read as R short interleaved streams,
    // which the hardware prefetcher picks up late (as the f32 kernels do).
    const char* ahead = reinterpret_cast<const char*>(w + (r0 + R) * k) + p * R * 2;
    for (int line = 0; line < R * 64; line += 64) _mm_prefetch(ahead + line, _MM_HINT_T0);
    __m512bh wv[R];
    for (int r = 0; r < R; ++r) {
      wv[r] = reinterpret_cast<__m512bh>(_mm512_loadu_si512(w + (r0 + r) * k + p));
    }
    for (int i = 0; i < M; ++i) {
      const auto xv = reinterpret_cast<__m512bh>(_mm512_loadu_si512(x + i * k + p));
      for (int r = 0; r < R; ++r) acc[i][r] = _mm512_dpbf16_ps(acc[i][r], xv, wv[r]);
    }
  }
  for (int i = 0; i < M; ++i) {
    for (int r = 0; r < R; ++r) {
      float sum = _mm512_reduce_add_ps(acc[i][r]);
      for (int64_t q = p; q < k; ++q) {
        sum += bf16_bits_to_f32(x[i * k + q]) * bf16_bits_to_f32(w[(r0 + r) * k + q]);
      }
      out[i * n + r0 + r] = sum;
    }
  }
}

template <int M>
void product(const uint16_t* x, const uint16_t* w, int64_t n, int64_t k, float* out) {
  // Accumulators for M x R outputs and R weight registers within the 32 registers.
  constexpr int R = M <= 4 ? 4 : 2;
  const int64_t tiles = n / R;
#pragma omp parallel for schedule(dynamic, 16)
  for (int64_t t = 0; t < tiles; ++t) tile<M, R>(x, w, t * R, k, out, n);
  for (int64_t r = tiles * R; r < n; ++r) tile<M, 1>(x, w, r, k, out, n);
}

using Product = void (*)(const uint16_t*, const uint16_t*, int64_t, int64_t, float*);

template <size_t... Rows>
constexpr std::array<Product, sizeof...(Rows)> products(std::index_sequence<Rows...>) {
  return {&product<static_cast<int>(Rows) + 1>...};
}

// product<M> for M = 1 to kRowsPerPass rows, at M - 1.
constexpr int64_t kRowsPerPass = 8;
constexpr auto kProducts = products(std::make_index_sequence<kRowsPerPass>{});

}  // namespace

void gemv_bf16(const float* x, const uint16_t* w, int64_t m, int64_t n, int64_t k, float* out) {
  thread_local std::vector<uint16_t> rounded;
  rounded.resize(static_cast<size_t>(m * k));
  round_to_bf16(x, m * k, rounded.data());
  // Up to 8 rows share one pass over the weights; more rows take more passes.
  for (int64_t m0 = 0; m0 < m; m0 += kRowsPerPass) {
    const int64_t rows = std::min(kRowsPerPass, m - m0);
    kProducts[static_cast<size_t>(rows - 1)](rounded.data() + m0 * k, w, n, k, out + m0 * n);
  }
}

}  // namespace tfm::cpu::avx512_bf16

#pragma GCC pop_options
