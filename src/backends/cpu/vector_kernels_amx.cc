// Products of bf16 weights with rows of x on AMX tiles (TDPBF16PS: a 16 x 32 bf16 tile times a
// 32 x 16 one, summed into a 16 x 16 f32 tile), x rounded to bf16 as torch's bf16 activations are.
// The weights are read where they lie: a tile of 16 weight rows and 32 columns is 16 strided rows
// of 64 bytes, so the weights are the tiles' left operand and x, packed once per product in the
// pairs layout the right operand takes, the right one. Each product tile is then out's transpose:
// it is turned in registers on its way out. oneDNN's matmul instead copies all the weights into its
// own layout on every call; here only batches of more than 128 rows copy a block's weights, read
// again for each pair of row tiles (block_all_rows). Also the AMX kernel of packed_products.h,
// whose right operand is packed already: its product tiles are out's own. Under a target pragma,
// run only where cpu_isa() finds AMX-BF16 and the OS has granted the tile state.
#include <algorithm>
#include <cstdint>
#include <cstring>
#include <vector>

#include "backends/cpu/amx_tiles.h"
#include "backends/cpu/packed_products.h"
#include "backends/cpu/scratch.h"
#include "backends/cpu/simd_intrinsics.h"
#include "backends/cpu/vector_kernels.h"

#pragma GCC push_options
#pragma GCC target("avx512f,avx512bw,avx512vl,amx-tile,amx-bf16")
#include "backends/cpu/transpose_16x16.h"

namespace tfm::cpu::amx {
namespace {

constexpr int64_t kTile = 16;   // rows of a tile; f32 columns of a product tile
constexpr int64_t kDepth = 32;  // bf16 values of k in one tile row (64 bytes)
constexpr int64_t kTileValues = kTile * kDepth;
constexpr int64_t kBlockRows = 2 * kTile;  // weight rows per block: two left tiles
constexpr int64_t kChunk = 8;  // depth tiles of a block's weights in L1 at a time (16 KB)
// Up to this many row tiles of x, a block's weights are read in place, not copied (block_all_rows):
// with up to 8 (128 rows of x), the copy saved no more than it cost (Qwen3-0.6B's products, 2
// threads, on a Xeon with AMX; copied by a pass of its own, at 64 rows 642-684 GFLOP/s against
// 734-754 in place, at 256 rows 1594-1650 against 1420-1434; stored from the tiles from 3 row
// tiles up, at 64 rows 650-674 against 668-686, at 128 rows 1042-1049 against 1063-1098).
constexpr int64_t kRowTilesReadInPlace = 8;

// Tiles (amx_tiles.h) 0-3 hold products, 4-5 weights, 6-7 x.

// out [m, n] = x [m, k] . w [n, k]^T, and how it splits into tiles: row tiles of x, depth tiles of
// k (`whole` of them full), blocks of 32 weight rows.
struct Product {
  const uint16_t* x;
  const uint16_t* w;
  int64_t m, n, k;
  float* out;
  int64_t row_tiles = (m + kTile - 1) / kTile, depth_tiles = (k + kDepth - 1) / kDepth;
  int64_t whole = k % kDepth == 0 ? depth_tiles : depth_tiles - 1;
  int64_t blocks = (n + kBlockRows - 1) / kBlockRows;
};

// The 16 x 16 product tile c (row i: weight row i; column j: row j of x) into out[j * ldo + i],
// for the first `rows` rows of x and `cols` weight rows.
void store_transposed(const float* c, int64_t rows, int64_t cols, float* out, int64_t ldo) {
  __m512 r[16];
  for (int i = 0; i < 16; ++i) r[i] = _mm512_loadu_ps(c + i * kTile);
  avx512::transpose_16x16(r);
  const __mmask16 mask = cols >= kTile ? 0xffff : static_cast<__mmask16>((1u << cols) - 1);
  for (int64_t j = 0; j < rows; ++j) _mm512_mask_storeu_ps(out + j * ldo, mask, r[j]);
}

// Depth tiles of one block of 32 weight rows: tile i of the first `whole` at w + i * step, its
// rows `stride` bytes apart; a last one, if any, at `tail` (32 rows of 64 bytes, zero past k).
// Products go to out[., 0 : cols].
struct WeightTiles {
  const uint16_t* w;
  int64_t step, stride, whole;
  const uint16_t* tail;
  int64_t cols;
};

// The next block's weights asked into L2 a few lines with each step of this block's products, so
// that memory streams them while the tiles multiply: fetched in one burst, by a pass that copied
// the block or asked for all of it at once, they stalled the products.
struct Ahead {
  const char* next = nullptr;  // none: the last block, or one not read in place
  int64_t stride = 0, lines_per_row = 0, per_step = 0;
  int64_t row = 0, line = 0;  // the next line to ask for

  void step() {
    if (next == nullptr) return;
    for (int64_t asked = 0; asked < per_step && row < kBlockRows; ++asked) {
      _mm_prefetch(next + row * stride + line * 64, _MM_HINT_T1);
      if (++line == lines_per_row) {
        line = 0;
        ++row;
      }
    }
  }
};

// `count` depth tiles of a weight block against one row tile of x (x0) or two (x0, x1; x tiles
// of one row tile lie one after another), added to the product tiles at `sums` (zero when
// `first`); the whole weight tiles also stored one after another at `copy_to`, if given.
template <bool kTwoRowTiles>
void multiply(const WeightTiles& b, int64_t count, const uint16_t* x0, const uint16_t* x1,
              bool first, float* sums, Ahead& ahead, uint16_t* copy_to) {
  constexpr int64_t kProducts = kTile * kTile;
  if (first) {
    _tile_zero(0);
    _tile_zero(2);
    if constexpr (kTwoRowTiles) {
      _tile_zero(1);
      _tile_zero(3);
    }
  } else {
    _tile_loadd(0, sums, 64);
    _tile_loadd(2, sums + 2 * kProducts, 64);
    if constexpr (kTwoRowTiles) {
      _tile_loadd(1, sums + kProducts, 64);
      _tile_loadd(3, sums + 3 * kProducts, 64);
    }
  }
  for (int64_t i = 0; i < count; ++i) {
    ahead.step();
    if (i < b.whole) {
      const uint16_t* a = b.w + i * b.step;
      _tile_loadd(4, a, b.stride);
      _tile_loadd(5, reinterpret_cast<const char*>(a) + kTile * b.stride, b.stride);
      if (copy_to != nullptr) {
        _tile_stored(4, copy_to + i * kBlockRows * kDepth, 64);
        _tile_stored(5, copy_to + i * kBlockRows * kDepth + kTileValues, 64);
      }
    } else {
      _tile_loadd(4, b.tail, 64);
      _tile_loadd(5, b.tail + kTileValues, 64);
    }
    _tile_loadd(6, x0 + i * kTileValues, 64);
    _tile_dpbf16ps(0, 4, 6);
    _tile_dpbf16ps(2, 5, 6);
    if constexpr (kTwoRowTiles) {
      _tile_loadd(7, x1 + i * kTileValues, 64);
      _tile_dpbf16ps(1, 4, 7);
      _tile_dpbf16ps(3, 5, 7);
    }
  }
  _tile_stored(0, sums, 64);
  _tile_stored(2, sums + 2 * kProducts, 64);
  if constexpr (kTwoRowTiles) {
    _tile_stored(1, sums + kProducts, 64);
    _tile_stored(3, sums + 3 * kProducts, 64);
  }
}

// One weight block against every row of x, a chunk of depth tiles at a time: with more than
// kRowTilesReadInPlace row tiles, the first pair of row tiles reads each chunk in place and stores
// its tiles one after another into this thread's copy, which the other pairs read: rows a
// power-of-two stride apart map to few L1 sets, and a chunk read in place for each pair would not
// stay in L1. (A separate pass that copied the block first waited on memory for a sixth of its
// products' time: with the copy stored from the tiles, Qwen3-0.6B's products at 256 rows ran at
// 1385-1502 GFLOP/s against 1182-1298, gemv_bench on a Xeon with AMX, 2 cores.) With more than
// two row tiles, the next block (`next`, if any) is asked into L2.
void block_all_rows(const WeightTiles& b, const uint16_t* packed, int64_t m, int64_t depth_tiles,
                    float* out, int64_t ldo, const char* next) {
  constexpr int64_t kProducts = kTile * kTile;
  const int64_t row_tiles = (m + kTile - 1) / kTile;
  const int64_t pairs = (row_tiles + 1) / 2;
  thread_local Scratch sums_of_rows;
  sums_of_rows.resize(static_cast<size_t>(pairs * 4 * kProducts));
  thread_local Bf16Scratch block_copy;
  Ahead ahead{row_tiles > 2 ? next : nullptr, b.stride, depth_tiles,
              (kBlockRows + pairs - 1) / pairs};
  const bool copy = row_tiles > kRowTilesReadInPlace;
  if (copy) block_copy.resize(static_cast<size_t>(b.whole * kBlockRows * kDepth));
  const WeightTiles copied{block_copy.data(), kBlockRows * kDepth, 64, b.whole, b.tail, b.cols};
  for (int64_t kb0 = 0; kb0 < depth_tiles; kb0 += kChunk) {
    const int64_t count = std::min(kChunk, depth_tiles - kb0);
    const auto chunk_of = [&](const WeightTiles& w) {
      return WeightTiles{w.w + kb0 * w.step, w.step, w.stride, w.whole - kb0, w.tail, w.cols};
    };
    // The first pair reads the chunk in place and stores the copy, if any, that the others read.
    const WeightTiles in_place = chunk_of(b), later = copy ? chunk_of(copied) : in_place;
    uint16_t* const copy_to = copy ? block_copy.data() + kb0 * copied.step : nullptr;
    for (int64_t mb = 0; mb < row_tiles; mb += 2) {
      const uint16_t* x0 = packed + (mb * depth_tiles + kb0) * kTileValues;
      float* sums = sums_of_rows.data() + (mb / 2) * 4 * kProducts;
      const bool first_pair = mb == 0;
      const WeightTiles& chunk = first_pair ? in_place : later;
      uint16_t* const store_to = first_pair ? copy_to : nullptr;
      if (mb + 1 < row_tiles) {
        multiply<true>(chunk, count, x0, x0 + depth_tiles * kTileValues, kb0 == 0, sums, ahead,
                       store_to);
      } else {
        multiply<false>(chunk, count, x0, nullptr, kb0 == 0, sums, ahead, store_to);
      }
    }
  }
  for (int64_t mb = 0; mb < row_tiles; ++mb) {
    const int64_t rows = std::min(kTile, m - mb * kTile);
    const float* sums = sums_of_rows.data() + (mb / 2) * 4 * kProducts + (mb % 2) * kProducts;
    for (int64_t half = 0; half < 2; ++half) {
      const int64_t cols = std::min(kTile, b.cols - half * kTile);
      if (cols <= 0) continue;
      store_transposed(sums + 2 * half * kProducts, rows, cols,
                       out + mb * kTile * ldo + half * kTile, ldo);
    }
  }
}

// Weight block blk of p against every row of x (packed): the weights read where they lie, or,
// for a partial block or depth tile, from this thread's zero-padded copies.
void block_product(const Product& p, int64_t blk, const uint16_t* packed) {
  thread_local Bf16Scratch tail, last_rows;
  const int64_t r0 = blk * kBlockRows, cols = std::min(kBlockRows, p.n - r0);
  const uint16_t* w = p.w + r0 * p.k;
  WeightTiles b{w, kDepth, p.k * 2, p.whole, nullptr, cols};
  if (cols < kBlockRows) {
    const int64_t padded = p.depth_tiles * kDepth;
    last_rows.assign(static_cast<size_t>(kBlockRows * padded), 0);
    for (int64_t r = 0; r < cols; ++r) std::memcpy(&last_rows[r * padded], w + r * p.k, p.k * 2);
    b = {last_rows.data(), kDepth, padded * 2, p.depth_tiles, nullptr, cols};
  } else if (p.whole < p.depth_tiles) {
    tail.assign(static_cast<size_t>(kBlockRows * kDepth), 0);
    for (int64_t r = 0; r < kBlockRows; ++r) {
      std::memcpy(&tail[r * kDepth], w + r * p.k + p.whole * kDepth, (p.k - p.whole * kDepth) * 2);
    }
    b.tail = tail.data();
  }
  const bool next_whole = r0 + 2 * kBlockRows <= p.n;
  const char* next = next_whole ? reinterpret_cast<const char*>(w + kBlockRows * p.k) : nullptr;
  block_all_rows(b, packed, p.m, p.depth_tiles, p.out + r0, p.n, next);
}

uint16_t* packed_x_buffer(const Product& p) {
  thread_local Bf16Scratch packed;
  packed.resize(static_cast<size_t>(p.row_tiles * p.depth_tiles * kTileValues));
  return packed.data();
}

// Tile t = (mb, kb) of x [m, k] into the right operand's layout
// (packed_products.h: x's rows are its columns) at packed + t * 512: packed as one tile of its own.
void pack_x_tile(const Product& p, int64_t t, uint16_t* packed) {
  const int64_t mb = t / p.depth_tiles, kb = t % p.depth_tiles;
  avx512::pack_rows(p.x + mb * kTile * p.k + kb * kDepth, p.k, std::min(kTile, p.m - mb * kTile),
                    std::min(kDepth, p.k - kb * kDepth), packed + t * kTileValues);
}

// Tiles in products with a packed right operand: 0-3 sums (row tile r, column tile c: 2 r + c),
// 4-5 rows of a, 6-7 packed columns.

// A sum tile (stored by `store(to, stride)`: the tile's number is an immediate), the products of
// a's rows from `out`'s row on and B's columns from its column on (`rows` and `cols` of them in
// out), into out (each row times its scale, if any): straight from the tile where it is whole and
// unscaled.
template <typename Store>
void store_sums(const Store& store, float* out, int64_t ldo, int64_t rows, int64_t cols,
                const float* scale) {
  if (rows <= 0 || cols <= 0) return;
  if (scale == nullptr && rows >= kTile && cols >= kTile) {
    store(out, ldo * 4);
    return;
  }
  alignas(64) float sums[kTile * kTile];
  store(sums, 64);
  const __mmask16 mask = cols >= kTile ? 0xffff : static_cast<__mmask16>((1u << cols) - 1);
  for (int64_t i = 0; i < std::min(kTile, rows); ++i) {
    __m512 row = _mm512_load_ps(sums + i * kTile);
    if (scale != nullptr) row = _mm512_mul_ps(row, _mm512_set1_ps(scale[i]));
    _mm512_mask_storeu_ps(out + i * ldo, mask, row);
  }
}

// kRows row tiles of a (at a) against kCols packed column tiles (at b, each depth_tiles tiles
// long), over the first `tiles_of_k` depth tiles, into out (rows and cols left from its origin).
template <int kRows, int kCols>
void packed_tiles(const uint16_t* a, int64_t lda, const uint16_t* b, int64_t depth_tiles,
                  int64_t tiles_of_k, float* out, int64_t ldo, int64_t rows, int64_t cols,
                  const float* scale) {
  const uint16_t* b1 = b + depth_tiles * kTileValues;
  const uint16_t* a1 = a + kTile * lda;
  _tile_zero(0);
  if constexpr (kCols == 2) _tile_zero(1);
  if constexpr (kRows == 2) _tile_zero(2);
  if constexpr (kRows == 2 && kCols == 2) _tile_zero(3);
  for (int64_t t = 0; t < tiles_of_k; ++t) {
    _tile_loadd(4, a + t * kDepth, lda * 2);
    _tile_loadd(6, b + t * kTileValues, 64);
    _tile_dpbf16ps(0, 4, 6);
    if constexpr (kCols == 2) {
      _tile_loadd(7, b1 + t * kTileValues, 64);
      _tile_dpbf16ps(1, 4, 7);
    }
    if constexpr (kRows == 2) {
      _tile_loadd(5, a1 + t * kDepth, lda * 2);
      _tile_dpbf16ps(2, 5, 6);
      if constexpr (kCols == 2) _tile_dpbf16ps(3, 5, 7);
    }
  }
  const float* scale1 = scale == nullptr ? nullptr : scale + kTile;
  const auto sum0 = [](float* to, int64_t stride) { _tile_stored(0, to, stride); };
  store_sums(sum0, out, ldo, rows, cols, scale);
  if constexpr (kCols == 2) {
    const auto sum1 = [](float* to, int64_t stride) { _tile_stored(1, to, stride); };
    store_sums(sum1, out + kTile, ldo, rows, cols - kTile, scale);
  }
  if constexpr (kRows == 2) {
    const auto sum2 = [](float* to, int64_t stride) { _tile_stored(2, to, stride); };
    store_sums(sum2, out + kTile * ldo, ldo, rows - kTile, cols, scale1);
  }
  if constexpr (kRows == 2 && kCols == 2) {
    const auto sum3 = [](float* to, int64_t stride) { _tile_stored(3, to, stride); };
    store_sums(sum3, out + kTile * ldo + kTile, ldo, rows - kTile, cols - kTile, scale1);
  }
}

}  // namespace

void gemm_bf16_each(const uint16_t* x, const Bf16Rows* weights, int64_t count, int64_t m,
                    int64_t k) {
  std::vector<Product> parts;
  int64_t blocks = 0;
  for (int64_t i = 0; i < count; ++i) {
    parts.push_back({x, weights[i].w, m, weights[i].n, k, weights[i].out});
    blocks += parts.back().blocks;
  }
  const Product& first = parts.front();
  uint16_t* packed = packed_x_buffer(first);  // the caller's, shared by the threads below
#pragma omp parallel
  {
    configure_tiles();
#pragma omp for schedule(static)
    for (int64_t t = 0; t < first.row_tiles * first.depth_tiles; ++t) pack_x_tile(first, t, packed);
// Each thread's blocks one after another, so that the block `Ahead` asks for is its own next
// one: in chunks of 4 handed out in turn, the products of 64 to 256 rows ran 2-11% slower.
#pragma omp for schedule(static)
    for (int64_t b = 0; b < blocks; ++b) {
      const Product* part = parts.data();
      int64_t blk = b;
      while (blk >= part->blocks) blk -= (part++)->blocks;
      block_product(*part, blk, packed);
    }
    _tile_release();
  }
}

void gemm_bf16(const uint16_t* x, const uint16_t* w, int64_t m, int64_t n, int64_t k, float* out) {
  const Bf16Rows weights{w, n, out};
  gemm_bf16_each(x, &weights, 1, m, k);
}

// Two row tiles of a at a time against each pair of column tiles: the row tiles stay in L1 while
// the columns stream past.
void packed_product(const uint16_t* a, int64_t lda, int64_t m, const uint16_t* b,
                    int64_t depth_tiles, int64_t n, int64_t k, const float* scale, float* out,
                    int64_t ldo) {
  configure_tiles();
  const int64_t tiles_of_k = packed_depth_tiles(k);
  for (int64_t i = 0; i < m; i += 2 * kTile) {
    const bool two_rows = m - i > kTile;
    const float* row_scale = scale == nullptr ? nullptr : scale + i;
    const uint16_t* a_i = a + i * lda;
    for (int64_t j = 0; j < n; j += 2 * kTile) {
      const bool two_cols = n - j > kTile;
      const uint16_t* b_j = b + (j / kTile) * depth_tiles * kTileValues;
      float* o = out + i * ldo + j;
      const auto run = [&](auto tiles) {
        tiles(a_i, lda, b_j, depth_tiles, tiles_of_k, o, ldo, m - i, n - j, row_scale);
      };
      if (two_rows && two_cols) {
        run(packed_tiles<2, 2>);
      } else if (two_rows) {
        run(packed_tiles<2, 1>);
      } else if (two_cols) {
        run(packed_tiles<1, 2>);
      } else {
        run(packed_tiles<1, 1>);
      }
    }
  }
  _tile_release();
}

}  // namespace tfm::cpu::amx

#pragma GCC pop_options
