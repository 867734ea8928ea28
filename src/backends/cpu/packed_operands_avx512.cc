// The packing of packed_products.h: whole tiles turned in AVX-512 registers, partial ones (past k
// or n) value by value with zeros. Under a target pragma, run only where packed_product() is not
// null (AMX-BF16 or AVX512_BF16, both on AVX-512).
#include <algorithm>
#include <cstdint>

#include "backends/cpu/packed_products.h"
#include "backends/cpu/simd_intrinsics.h"

#pragma GCC push_options
#pragma GCC target("avx512f,avx512bw,avx512vl")
#include "backends/cpu/transpose_16x16.h"

namespace tfm::cpu::avx512 {
namespace {

// Tile (j, t) of B [k, n] into its 512 values at `to`, value by value; pair(c, d) is B[d, c] for
// column c < cols and depth d < depth of the tile.
template <typename Pair>
void pack_partial(int64_t cols, int64_t depth, uint16_t* to, const Pair& at) {
  std::fill(to, to + kPackedTileValues, uint16_t{0});
  for (int64_t d = 0; d < depth; ++d) {
    for (int64_t c = 0; c < cols; ++c) to[(d / 2) * 32 + c * 2 + d % 2] = at(c, d);
  }
}

// Each tile (j, t) of B [k, n] packed at `to`: whole(from_column, from_depth, tile) where it is
// whole, else value by value from pair(c, d) = B[d, c] (relative to the tile's origin).
template <typename Whole, typename Pair>
void pack_tiles(int64_t k, int64_t n, uint16_t* to, const Whole& whole, const Pair& pair) {
  const int64_t depth_tiles = packed_depth_tiles(k);
  for (int64_t j = 0; j * kPackedColumns < n; ++j) {
    const int64_t column = j * kPackedColumns, cols = std::min(kPackedColumns, n - column);
    for (int64_t t = 0; t < depth_tiles; ++t) {
      const int64_t from = t * kPackedDepth, depth = std::min(kPackedDepth, k - from);
      uint16_t* tile = to + (j * depth_tiles + t) * kPackedTileValues;
      if (cols == kPackedColumns && depth == kPackedDepth) {
        whole(column, from, tile);
      } else {
        pack_partial(cols, depth, tile,
                     [&](int64_t c, int64_t d) { return pair(column + c, from + d); });
      }
    }
  }
}

}  // namespace

void pack_rows(const uint16_t* w, int64_t ld, int64_t n, int64_t k, uint16_t* to) {
  // Row c of w's tile is 16 pairs, 32 bits each: turned, row p holds pair p of every row.
  const auto whole = [&](int64_t column, int64_t depth, uint16_t* tile) {
    const uint16_t* from = w + column * ld + depth;
    __m512 r[16];
    for (int c = 0; c < 16; ++c) r[c] = _mm512_castsi512_ps(_mm512_loadu_si512(from + c * ld));
    transpose_16x16(r);
    for (int p = 0; p < 16; ++p) _mm512_storeu_si512(tile + p * 32, _mm512_castps_si512(r[p]));
  };
  pack_tiles(k, n, to, whole, [&](int64_t c, int64_t d) { return w[c * ld + d]; });
}

void pack_columns(const uint16_t* v, int64_t ld, int64_t k, int64_t n, uint16_t* to) {
  // Lane 2 c takes value c of the first row, lane 2 c + 1 value c of the second (index 32 + c).
  alignas(64) uint16_t interleave[32];
  for (int c = 0; c < 16; ++c) {
    interleave[2 * c] = static_cast<uint16_t>(c);
    interleave[2 * c + 1] = static_cast<uint16_t>(32 + c);
  }
  const __m512i pairs = _mm512_load_si512(interleave);
  const auto whole = [&](int64_t column, int64_t depth, uint16_t* tile) {
    const uint16_t* from = v + depth * ld + column;
    const auto row = [&](int64_t d) {
      return _mm512_castsi256_si512(
          _mm256_loadu_si256(reinterpret_cast<const __m256i*>(from + d * ld)));
    };
    for (int p = 0; p < 16; ++p) {
      _mm512_storeu_si512(tile + p * 32,
                          _mm512_permutex2var_epi16(row(2 * p), pairs, row(2 * p + 1)));
    }
  };
  pack_tiles(k, n, to, whole, [&](int64_t c, int64_t d) { return v[d * ld + c]; });
}

}  // namespace tfm::cpu::avx512

#pragma GCC pop_options
