// Products of bf16 weights with a few rows of x on CPUs with AVX512_BF16: x rounded to bf16 (as
// torch's bf16 activations are) and multiplied with the weights in pairs by vdpbf16ps, accumulated
// in f32, every row in one pass over the weights (the f32 GEMV takes passes of 4). linear.cc takes
// it from 5 rows to cpu_isa().dot_product_rows. Under a target pragma, run only where cpu_isa()
// finds AVX512_BF16.
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
    // The next tile's rows, in address order, into L2: a tile is read as R short interleaved
    // streams, which the hardware prefetcher picks up late. Into L1 (T0) instead, 5 to 8 rows of
    // x streamed Qwen3-0.6B's weights at 17-20 GB/s against 23-27 (AMD EPYC, gemv_bench).
    const char* ahead = reinterpret_cast<const char*>(w + (r0 + R) * k) + p * R * 2;
    for (int line = 0; line < R * 64; line += 64) _mm_prefetch(ahead + line, _MM_HINT_T1);
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

using Tile = void (*)(const uint16_t*, const uint16_t*, int64_t, int64_t, float*, int64_t);

// A tile is 4 weight rows against groups of up to 4 rows of x: 16 accumulators and 4 weight
// registers. Against 2 weight rows and 8 rows of x, 8 rows took 49-55 ms against 41-45 for
// Qwen3-0.6B's products (more loads of x per weight, gemv_bench).
constexpr int kTileRows = 4;
constexpr int64_t kGroup = 4;

template <int R, size_t... Rows>
constexpr std::array<Tile, sizeof...(Rows)> tiles(std::index_sequence<Rows...>) {
  return {&tile<static_cast<int>(Rows) + 1, R>...};
}

// tile<M, R> for M = 1 to kGroup rows of x, at M - 1.
template <int R>
constexpr auto kTiles = tiles<R>(std::make_index_sequence<kGroup>{});

// One tile of R weight rows against every row of x, a group at a time: after the first group the
// tile is read from the caches, so the weights stream from memory once for any number of rows.
// (Blocks of k small enough for L1, accumulators carried between them, were no faster.)
template <int R>
void tile_all_rows(const uint16_t* x, int64_t m, const uint16_t* w, int64_t r0, int64_t k,
                   float* out, int64_t n) {
  for (int64_t m0 = 0; m0 < m; m0 += kGroup) {
    const int64_t rows = std::min(kGroup, m - m0);
    kTiles<R>[static_cast<size_t>(rows - 1)](x + m0 * k, w, r0, k, out + m0 * n, n);
  }
}

}  // namespace

void gemv_bf16(const float* x, const uint16_t* w, int64_t m, int64_t n, int64_t k, float* out) {
  thread_local std::vector<uint16_t> rounded;
  rounded.resize(static_cast<size_t>(m * k));
  round_to_bf16(x, m * k, rounded.data());
  // The caller's rounded rows: in the threads below, `rounded` names each thread's own.
  const uint16_t* xr = rounded.data();
  const int64_t whole_tiles = n / kTileRows;
#pragma omp parallel for schedule(dynamic, 16)
  for (int64_t t = 0; t < whole_tiles; ++t) {
    tile_all_rows<kTileRows>(xr, m, w, t * kTileRows, k, out, n);
  }
  for (int64_t r = whole_tiles * kTileRows; r < n; ++r) tile_all_rows<1>(xr, m, w, r, k, out, n);
}

}  // namespace tfm::cpu::avx512_bf16

#pragma GCC pop_options
