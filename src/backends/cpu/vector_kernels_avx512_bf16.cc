// Products of bf16 weights with a few rows of x on CPUs with AVX512_BF16: x rounded to bf16 (as
// torch's bf16 activations are) and multiplied with the weights in pairs by vdpbf16ps, accumulated
// in f32, every row in one pass over the weights (the f32 GEMV takes passes of 4). linear.cc takes
// it from 5 rows to cpu_isa().dot_product_rows. Under a target pragma, run only where cpu_isa()
// finds AVX512_BF16.
#include <algorithm>
#include <array>
#include <cstdint>
#include <cstring>
#include <utility>
#include <vector>

#include "backends/cpu/packed_products.h"
#include "backends/cpu/scratch.h"
#include "backends/cpu/simd_intrinsics.h"
#include "backends/cpu/vector_kernels.h"

#pragma GCC push_options
#pragma GCC target("avx512f,avx512bw,avx512vl,avx512bf16")
#include "backends/cpu/sums_of_16.h"

namespace tfm::cpu::avx512_bf16 {
namespace {

constexpr int64_t kPairs = 32;  // bf16 values in one 512-bit register

// Masked loads only where k is not a multiple of 32: on an AMD EPYC (Zen 4) every load masked held
// 32 rows' products at 345 GFLOP/s, 74% of vdpbf16ps's peak; unmasked, 397 (gemv_bench).
template <bool Masked>
__m512bh load(__mmask32 mask, const uint16_t* from) {
  if constexpr (Masked) return reinterpret_cast<__m512bh>(_mm512_maskz_loadu_epi16(mask, from));
  return reinterpret_cast<__m512bh>(_mm512_loadu_si512(from));
}

// out [m, n] = x [m, k] . w [n, k]^T, bf16 x and w.
struct Operands {
  const uint16_t* x;
  const uint16_t* w;
  int64_t k;
  float* out;
  int64_t n;
};

// Rows [i0, i0 + M) of out, columns [r0, r0 + R): each weight register serves every row of x.
template <int M, int R, bool Masked>
void tile(const Operands& o, int64_t i0, int64_t r0) {
  const int64_t k = o.k, ldx = k, ldw = k, ldo = o.n;
  const uint16_t* x = o.x + i0 * ldx;
  const uint16_t* w = o.w + r0 * ldw;
  float* out = o.out + i0 * ldo + r0;
  __m512 acc[M][R];
  for (int i = 0; i < M; ++i)
    for (int r = 0; r < R; ++r) acc[i][r] = _mm512_setzero_ps();
  for (int64_t p = 0; p < k; p += kPairs) {
    // The last k % 32 values with the rest of the registers zero: masked loads read nothing past k
    // (the unmasked build never reads the mask).
    const __mmask32 mask = k - p >= kPairs ? ~__mmask32{0} : _cvtu32_mask32((1u << (k - p)) - 1);
    // The next tile's rows, in address order, into L2: a tile is read as R short interleaved
    // streams, which the hardware prefetcher picks up late. Into L1 (T0) instead, 5 to 8 rows of
    // x streamed Qwen3-0.6B's weights at 17-20 GB/s against 23-27 (AMD EPYC, gemv_bench).
    const char* ahead = reinterpret_cast<const char*>(w + R * ldw) + p * R * 2;
    for (int line = 0; line < R * 64; line += 64) _mm_prefetch(ahead + line, _MM_HINT_T1);
    __m512bh wv[R];
    for (int r = 0; r < R; ++r) wv[r] = load<Masked>(mask, w + r * ldw + p);
    for (int i = 0; i < M; ++i) {
      const auto xv = load<Masked>(mask, x + i * ldx + p);
      for (int r = 0; r < R; ++r) acc[i][r] = _mm512_dpbf16_ps(acc[i][r], xv, wv[r]);
    }
  }
  if constexpr (M == 4 && R == 4) {
    __m512 in[16];
#pragma GCC unroll 16
    for (int s = 0; s < 16; ++s) in[avx512_lanes::kSlot[s]] = acc[s / 4][s % 4];
    const __m512 sums = avx512_lanes::sums_of_16(in);  // lane 4 i + r: row i of x, weight row r
    _mm_storeu_ps(out, _mm512_extractf32x4_ps(sums, 0));
    _mm_storeu_ps(out + ldo, _mm512_extractf32x4_ps(sums, 1));
    _mm_storeu_ps(out + 2 * ldo, _mm512_extractf32x4_ps(sums, 2));
    _mm_storeu_ps(out + 3 * ldo, _mm512_extractf32x4_ps(sums, 3));
  } else {
    for (int i = 0; i < M; ++i)
      for (int r = 0; r < R; ++r) out[i * ldo + r] = _mm512_reduce_add_ps(acc[i][r]);
  }
}

using Tile = void (*)(const Operands&, int64_t, int64_t);

// A tile is 4 weight rows against groups of up to 4 rows of x: 16 accumulators and 4 weight
// registers. Against 2 weight rows and 8 rows of x, 8 rows took 49-55 ms against 41-45 for
// Qwen3-0.6B's products (more loads of x per weight, gemv_bench).
constexpr int kTileRows = 4;
constexpr int64_t kGroup = 4;

template <int R, bool Masked, size_t... Rows>
constexpr std::array<Tile, sizeof...(Rows)> tiles(std::index_sequence<Rows...>) {
  return {&tile<static_cast<int>(Rows) + 1, R, Masked>...};
}

// tile<M, R, Masked> for M = 1 to kGroup rows of x, at M - 1.
template <int R, bool Masked>
constexpr auto kTiles = tiles<R, Masked>(std::make_index_sequence<kGroup>{});

// One tile of R weight rows from r0 against every row of x, a group at a time: after the first
// group the tile is read from the caches, so the weights stream from memory once for any number of
// rows. (Blocks of k small enough for L1, accumulators carried between them, were no faster.)
template <int R>
void tile_all_rows(const Operands& o, int64_t m, int64_t r0) {
  const auto& tiles = o.k % kPairs == 0 ? kTiles<R, false> : kTiles<R, true>;
  for (int64_t i0 = 0; i0 < m; i0 += kGroup) {
    tiles[static_cast<size_t>(std::min(kGroup, m - i0) - 1)](o, i0, r0);
  }
}

// The tiles of whole kTileRows weight rows, shared among the threads of the enclosing parallel
// region.
void whole_tiles_in_parallel(const Operands& o, int64_t m, int64_t n) {
#pragma omp for schedule(dynamic, 16)
  for (int64_t t = 0; t < n / kTileRows; ++t) tile_all_rows<kTileRows>(o, m, t * kTileRows);
}

void last_rows(const Operands& o, int64_t m, int64_t n) {
  for (int64_t r = n / kTileRows * kTileRows; r < n; ++r) tile_all_rows<1>(o, m, r);
}

// M rows of a against each packed column tile of B (packed_products.h): a tile's rows of pairs
// lie one after another down its depth, each multiplied with the pair of every row of a at that
// depth.
template <int M>
void packed_rows(const uint16_t* a, int64_t lda, const uint16_t* b, int64_t depth_tiles, int64_t n,
                 int64_t k, const float* scale, float* out, int64_t ldo) {
  const int64_t pairs = (k + 1) / 2;  // an odd k's last pair reads a's zero past k
  for (int64_t j = 0; j * kPackedColumns < n; ++j) {
    const uint16_t* column = b + j * depth_tiles * kPackedTileValues;
    __m512 acc[M];
    for (int r = 0; r < M; ++r) acc[r] = _mm512_setzero_ps();
    for (int64_t q = 0; q < pairs; ++q) {
      const auto w = reinterpret_cast<__m512bh>(_mm512_loadu_si512(column + q * 32));
      for (int r = 0; r < M; ++r) {
        uint32_t pair;
        std::memcpy(&pair, a + r * lda + 2 * q, sizeof pair);
        acc[r] = _mm512_dpbf16_ps(
            acc[r], w, reinterpret_cast<__m512bh>(_mm512_set1_epi32(static_cast<int>(pair))));
      }
    }
    const int64_t cols = std::min(kPackedColumns, n - j * kPackedColumns);
    const __mmask16 mask = static_cast<__mmask16>((1u << cols) - 1);
    for (int r = 0; r < M; ++r) {
      const __m512 sums =
          scale == nullptr ? acc[r] : _mm512_mul_ps(acc[r], _mm512_set1_ps(scale[r]));
      _mm512_mask_storeu_ps(out + r * ldo + j * kPackedColumns, mask, sums);
    }
  }
}

template <size_t... I>
constexpr auto packed_rows_by_count(std::index_sequence<I...>) {
  return std::array{packed_rows<static_cast<int>(I) + 1>...};
}
constexpr auto kPackedRows = packed_rows_by_count(std::make_index_sequence<kGroup>());

}  // namespace

void gemv_bf16(const float* x, const uint16_t* w, int64_t m, int64_t n, int64_t k, float* out) {
  thread_local Bf16Scratch rounded;
  rounded.resize(static_cast<size_t>(m * k));
  // The caller's rounded rows: in the threads below, `rounded` names each thread's own.
  uint16_t* xr = rounded.data();
  const auto round = vector_kernels().round_bf16;
  const Operands o{xr, w, k, out, n};
  // x is rounded by both threads in the region the products run in: alone, the rounding thread
  // had the other spin (2% of a 32-row decode step).
#pragma omp parallel
  {
#pragma omp for schedule(static)
    for (int64_t i = 0; i < m; ++i) round(x + i * k, xr + i * k, k);
    whole_tiles_in_parallel(o, m, n);
  }
  last_rows(o, m, n);
}

void gemm_bf16(const uint16_t* x, const uint16_t* w, int64_t m, int64_t n, int64_t k, float* out) {
  const Operands o{x, w, k, out, n};
#pragma omp parallel
  whole_tiles_in_parallel(o, m, n);
  last_rows(o, m, n);
}

void packed_product(const uint16_t* a, int64_t lda, int64_t m, const uint16_t* b,
                    int64_t depth_tiles, int64_t n, int64_t k, const float* scale, float* out,
                    int64_t ldo) {
  for (int64_t i0 = 0; i0 < m; i0 += kGroup) {
    const auto& rows = kPackedRows[static_cast<size_t>(std::min(kGroup, m - i0) - 1)];
    rows(a + i0 * lda, lda, b, depth_tiles, n, k, scale == nullptr ? nullptr : scale + i0,
         out + i0 * ldo, ldo);
  }
}

}  // namespace tfm::cpu::avx512_bf16

#pragma GCC pop_options
