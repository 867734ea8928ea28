// Products whose right operand is packed once and read many times: attention's keys and values,
// packed once a call and read by every query block of a prefill chunk (attention_tiles.cc). The
// packed layout is AMX's right operand, which is also the pairs vdpbf16ps multiplies: each
// product reads its left operand's rows where they lie and writes out's rows directly. (Products
// with the keys and values read in place as AMX's left operand turned every 16 x 16 product tile
// on its way out, which for scores over a head of 128 cost more than their 4 tile products.)
#pragma once

#include <cstdint>
#include <vector>

namespace tfm::cpu {

// B [k, n] packed in tiles of 32 values of k by 16 of n: tile (j, t) (columns 16 j.., depth
// 32 t..) at (j * packed_depth_tiles(k) + t) * 512, its row p holding, for each column c, the
// pair B[32 t + 2 p + (0, 1), 16 j + c]; zero past k and past n.
constexpr int64_t kPackedDepth = 32, kPackedColumns = 16;
constexpr int64_t kPackedTileValues = kPackedDepth * kPackedColumns;
// Rows of the left operand AMX reads at a time (see PackedProduct).
constexpr int64_t kLeftTileRows = 16;
inline int64_t packed_depth_tiles(int64_t k) { return (k + kPackedDepth - 1) / kPackedDepth; }
inline int64_t packed_values(int64_t k, int64_t n) {
  return packed_depth_tiles(k) * ((n + kPackedColumns - 1) / kPackedColumns) * kPackedTileValues;
}

// The packing runs on AVX-512, only where packed_product() is not null (namespace avx512: the
// build's AVX-512 code lives in its kernels' namespaces alone, tools/check_isa.sh).
namespace avx512 {
// B = w^T for w [n, k] bf16 with rows ld apart (keys: column j of a product is each left row's dot
// product with w's row j), into packed_values(k, n) values at `to`.
void pack_rows(const uint16_t* w, int64_t ld, int64_t n, int64_t k, uint16_t* to);
// B = v for v [k, n] bf16 with rows ld apart (values: a product's row is v's rows summed, weighted
// by the left row). As pack_rows.
void pack_columns(const uint16_t* v, int64_t ld, int64_t k, int64_t n, uint16_t* to);
}  // namespace avx512

// out[i * ldo + j] = scale[i] * (a[i * lda + :k] . B[:k, j]) for i < m, j < n (no scale where
// null), bf16 a and B, f32 sums, on the calling thread. B is packed as above for a depth of
// depth_tiles * 32 >= k (a larger matrix's first k rows). AMX reads a in whole tiles: a holds
// ceil(m / kLeftTileRows) * kLeftTileRows rows (rows past m are read, their products dropped) of
// lda >= ceil(k / 32) * 32 values, zero past k.
using PackedProduct = void (*)(const uint16_t* a, int64_t lda, int64_t m, const uint16_t* b,
                               int64_t depth_tiles, int64_t n, int64_t k, const float* scale,
                               float* out, int64_t ldo);

// AMX's tiles where the CPU has AMX-BF16, else AVX512_BF16's dot products where cpu_isa() chose
// them (dot_product_rows); null otherwise.
PackedProduct packed_product();
// Every one this CPU runs, chosen or not (the tests run each against a reference).
std::vector<PackedProduct> runnable_packed_products();

}  // namespace tfm::cpu
