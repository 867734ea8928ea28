// Products with a packed right operand (packed_products.h), on every kernel this CPU runs, against
// double sums: keys packed by rows and values by columns, each packed for a larger matrix than the
// product reads (as attention packs a head's visible keys once for query blocks that see fewer),
// partial tiles of every operand, strided rows, rows of scale, and nothing written between out's
// rows or from the left operand's rows past m.
#include "backends/cpu/packed_products.h"

#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "support/random_values.h"
#include "tfm/dtype.h"

namespace tfm::cpu {
namespace {

using testing::bf16_bits;
using testing::expect_close;
using testing::random_values;

constexpr uint16_t kNanBits = 0x7fc0;

double widen(uint16_t v) { return bf16_bits_to_f32(v); }

struct Shape {
  int64_t m, n, k;
};

// a [m, k] in whole row tiles of lda values, zero past k and NaN in the rows past m.
std::vector<uint16_t> left_operand(const std::vector<uint16_t>& a, const Shape& s, int64_t lda) {
  const int64_t rows = (s.m + 15) / 16 * 16;
  std::vector<uint16_t> wide(static_cast<size_t>(rows * lda), kNanBits);
  for (int64_t i = 0; i < s.m; ++i) {
    std::fill_n(&wide[i * lda], lda, uint16_t{0});
    std::copy_n(&a[i * s.k], s.k, &wide[i * lda]);
  }
  return wide;
}

// The product into out's rows n + 5 apart (-1 before), its [m, n] back; -1 left between rows.
std::vector<float> run(PackedProduct product, const std::vector<uint16_t>& a, int64_t lda,
                       const std::vector<uint16_t>& packed, int64_t depth_tiles, const Shape& s,
                       const float* scale, const std::string& what) {
  const int64_t ldo = s.n + 5;
  std::vector<float> out(static_cast<size_t>(s.m * ldo), -1.f), got, between;
  product(a.data(), lda, s.m, packed.data(), depth_tiles, s.n, s.k, scale, out.data(), ldo);
  for (int64_t i = 0; i < s.m; ++i) {
    got.insert(got.end(), &out[i * ldo], &out[i * ldo + s.n]);
    between.insert(between.end(), &out[i * ldo + s.n], &out[(i + 1) * ldo]);
  }
  expect_close(between, std::vector<float>(between.size(), -1.f), 0.f, what + " between rows");
  return got;
}

TEST(PackedProducts, KeysByRowsAndValuesByColumnsOnEveryKernel) {
  const std::vector<PackedProduct> products = runnable_packed_products();
  if (products.empty()) GTEST_SKIP() << "no AMX-BF16 or AVX512_BF16 here";
  for (const int64_t m : {1, 5, 16, 17, 33, 64}) {
    // Whole and partial tiles of n (16) and k (32), odd k, k of many tiles.
    for (const auto& [n, k] :
         {std::pair<int64_t, int64_t>{13, 37}, {32, 128}, {70, 96}, {3, 5}, {48, 300}, {17, 64}}) {
      const Shape s{m, n, k};
      // Packed for 20 more columns and 40 more values of depth than the product reads.
      const int64_t big_n = n + 20, big_k = k + 40, ld_w = big_k + 3, ld_v = big_n + 7;
      const auto a = bf16_bits(random_values(static_cast<size_t>(m * k), 30 + m));
      const auto w = bf16_bits(random_values(static_cast<size_t>(big_n * ld_w), 31 + n));
      const auto v = bf16_bits(random_values(static_cast<size_t>(big_k * ld_v), 32 + k));
      std::vector<float> scale(static_cast<size_t>(m));
      for (int64_t i = 0; i < m; ++i) scale[i] = 0.5f + 0.25f * static_cast<float>(i % 5);
      std::vector<float> want_keys(static_cast<size_t>(m * n)), want_values(want_keys.size());
      for (int64_t i = 0; i < m; ++i) {
        for (int64_t j = 0; j < n; ++j) {
          double key = 0, value = 0;
          for (int64_t p = 0; p < k; ++p) {
            key += widen(a[i * k + p]) * widen(w[j * ld_w + p]);
            value += widen(a[i * k + p]) * widen(v[p * ld_v + j]);
          }
          want_keys[i * n + j] = static_cast<float>(key);
          want_values[i * n + j] = static_cast<float>(scale[i] * value);
        }
      }
      std::vector<uint16_t> keys(static_cast<size_t>(packed_values(big_k, big_n)), kNanBits);
      std::vector<uint16_t> values(keys.size(), kNanBits);
      avx512::pack_rows(w.data(), ld_w, big_n, big_k, keys.data());
      avx512::pack_columns(v.data(), ld_v, big_k, big_n, values.data());
      const int64_t lda = packed_depth_tiles(k) * kPackedDepth + 3;
      const auto left = left_operand(a, s, lda);
      for (size_t p = 0; p < products.size(); ++p) {
        const std::string what = "kernel " + std::to_string(p) + " m=" + std::to_string(m) +
                                 " n=" + std::to_string(n) + " k=" + std::to_string(k);
        expect_close(run(products[p], left, lda, keys, packed_depth_tiles(big_k), s, nullptr,
                         what + " keys"),
                     want_keys, 1e-5f, what + " keys");
        expect_close(run(products[p], left, lda, values, packed_depth_tiles(big_k), s, scale.data(),
                         what + " values"),
                     want_values, 1e-5f, what + " values");
      }
    }
  }
}

}  // namespace
}  // namespace tfm::cpu
