// Every build of the vector kernels this CPU runs (AVX2+FMA everywhere, AVX-512 where cpu_isa()
// finds it; the GEMV on native bf16 dot products where it finds AVX512_BF16), each against a scalar
// reference in double precision on odd sizes: tails shorter than a vector, rows that do not fill a
// tile, more x rows than one pass takes.
#include "backends/cpu/vector_kernels.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <string>
#include <type_traits>

#include "backends/cpu/cpu_isa.h"
#include "support/random_values.h"
#include "tfm/dtype.h"

namespace tfm::cpu {
namespace {

using testing::expect_close;
using testing::random_values;

using testing::bf16_bits;

double widen(float v) { return v; }
double widen(uint16_t v) { return bf16_bits_to_f32(v); }

template <typename W>
std::vector<float> gemv_reference(const std::vector<float>& x, const std::vector<W>& w, int64_t m,
                                  int64_t n, int64_t k) {
  std::vector<float> out(static_cast<size_t>(m * n));
  for (int64_t i = 0; i < m; ++i) {
    for (int64_t r = 0; r < n; ++r) {
      double sum = 0;
      for (int64_t p = 0; p < k; ++p) sum += widen(w[r * k + p]) * x[i * k + p];
      out[i * n + r] = static_cast<float>(sum);
    }
  }
  return out;
}

std::vector<float> widened(const std::vector<uint16_t>& bits) {
  std::vector<float> out(bits.size());
  for (size_t i = 0; i < bits.size(); ++i) out[i] = bf16_bits_to_f32(bits[i]);
  return out;
}

std::vector<const VectorKernels*> every_set() { return runnable_vector_kernels(); }

std::string set_name(const ::testing::TestParamInfo<const VectorKernels*>& info) {
  std::string name;
  for (char c : std::string(info.param->isa)) {
    if (std::isalnum(static_cast<unsigned char>(c))) name += c;
  }
  return name;
}

class VectorKernelsTest : public ::testing::TestWithParam<const VectorKernels*> {};

TEST_P(VectorKernelsTest, GemvOfF32AndBf16Weights) {
  const VectorKernels& kernels = *GetParam();
  for (const int64_t m : {1, 2, 3, 4, 5, 7, 8, 11}) {
    for (const auto& [n, k] :
         {std::pair<int64_t, int64_t>{13, 37}, {29, 130}, {8, 16}, {3, 5}, {9, 96}}) {
      const auto x = random_values(static_cast<size_t>(m * k), 1 + m);
      const auto w = random_values(static_cast<size_t>(n * k), 2 + n);
      const std::string what =
          "m=" + std::to_string(m) + " n=" + std::to_string(n) + " k=" + std::to_string(k);
      std::vector<float> out(static_cast<size_t>(m * n), NAN);
      kernels.gemv_f32(x.data(), w.data(), m, n, k, out.data());
      expect_close(out, gemv_reference(x, w, m, n, k), 1e-5f, what + " f32");
      const auto wb = bf16_bits(w);
      std::fill(out.begin(), out.end(), NAN);
      kernels.gemv_bf16(x.data(), wb.data(), m, n, k, out.data());
      expect_close(out, gemv_reference(x, wb, m, n, k), 1e-5f, what + " bf16");
    }
  }
}

// One row of x by several weights in one pass, odd row counts and k.
TEST_P(VectorKernelsTest, GemvOfOneRowByEachOfSeveralWeights) {
  const VectorKernels& kernels = *GetParam();
  for (const int64_t k : {1, 17, 130}) {
    const auto x = random_values(static_cast<size_t>(k), 11);
    std::vector<std::vector<uint16_t>> w;
    std::vector<std::vector<float>> out;
    std::vector<Bf16Rows> weights;
    for (const int64_t n : {7, 1, 33}) {
      w.push_back(bf16_bits(random_values(static_cast<size_t>(n * k), 12 + n)));
      out.emplace_back(static_cast<size_t>(n), NAN);
      weights.push_back({w.back().data(), n, out.back().data()});
    }
    kernels.gemv_bf16_one_row_each(x.data(), weights.data(), 3, k);
    for (size_t i = 0; i < weights.size(); ++i) {
      expect_close(out[i], gemv_reference(x, w[i], 1, weights[i].n, k), 1e-5f,
                   "k=" + std::to_string(k) + " weights " + std::to_string(i));
    }
  }
}

TEST(VectorKernels, GemvOnBf16DotProductsReadsXRoundedToBf16) {
  const GemvBf16 gemv = gemv_bf16_dot_products();
  if (gemv == nullptr) GTEST_SKIP() << "no AVX512_BF16 here";
  // 33 rows: groups of rows over each tile.
  for (const int64_t m : {1, 2, 5, 8, 11, 33}) {
    for (const auto& [n, k] : {std::pair<int64_t, int64_t>{13, 37}, {29, 130}, {9, 96}, {3, 5}}) {
      const auto x = random_values(static_cast<size_t>(m * k), 5 + m);
      const auto w = bf16_bits(random_values(static_cast<size_t>(n * k), 6 + n));
      std::vector<float> out(static_cast<size_t>(m * n), NAN);
      gemv(x.data(), w.data(), m, n, k, out.data());
      expect_close(
          out, gemv_reference(widened(bf16_bits(x)), w, m, n, k), 1e-5f,
          "m=" + std::to_string(m) + " n=" + std::to_string(n) + " k=" + std::to_string(k));
    }
  }
}

// Whole and partial tiles of x, of weights and of k (AMX: 16 rows, blocks of 32 rows, 32 values;
// AVX512_BF16: groups of 4 rows, 4 weight rows, 32 values), odd k included, k beyond one chunk of
// 8 AMX tiles, and as many rows as a prefill chunk's (odd).
void expect_bf16_products(const TileProducts& tiles) {
  for (const int64_t m : {1, 5, 16, 17, 33, 48, 131}) {
    for (const auto& [n, k] : {std::pair<int64_t, int64_t>{13, 37},
                               {29, 130},
                               {64, 64},
                               {70, 96},
                               {3, 5},
                               {33, 33},
                               {40, 300}}) {
      const auto x = random_values(static_cast<size_t>(m * k), 7 + m);
      const auto w = bf16_bits(random_values(static_cast<size_t>(n * k), 8 + n));
      const auto want = gemv_reference(widened(bf16_bits(x)), w, m, n, k);
      const std::string what =
          "m=" + std::to_string(m) + " n=" + std::to_string(n) + " k=" + std::to_string(k);
      std::vector<float> out(static_cast<size_t>(m * n), NAN);
      tiles.of_bf16(bf16_bits(x).data(), w.data(), m, n, k, out.data());
      expect_close(out, want, 1e-5f, what);
    }
    // of_bf16_each: one x, three weights, each ending in a partial block but the last.
    const int64_t k = 130;
    const auto x = bf16_bits(random_values(static_cast<size_t>(m * k), 9 + m));
    std::vector<std::vector<uint16_t>> w;
    std::vector<std::vector<float>> out;
    std::vector<Bf16Rows> weights;
    for (const int64_t n : {45, 3, 64}) {
      w.push_back(bf16_bits(random_values(static_cast<size_t>(n * k), 10 + n)));
      out.emplace_back(static_cast<size_t>(m * n), NAN);
      weights.push_back({w.back().data(), n, out.back().data()});
    }
    tiles.of_bf16_each(x.data(), weights.data(), 3, m, k);
    for (size_t i = 0; i < weights.size(); ++i) {
      expect_close(out[i], gemv_reference(widened(x), w[i], m, weights[i].n, k), 1e-5f,
                   "each m=" + std::to_string(m) + " weights " + std::to_string(i));
    }
  }
}

TEST(VectorKernels, TileProductsReadXRoundedToBf16) {
  const TileProducts* tiles = tile_products();
  if (tiles == nullptr) GTEST_SKIP() << "no AMX-BF16 here";
  expect_bf16_products(*tiles);
}

TEST(VectorKernels, DotProductsOfBf16Rows) {
  const TileProducts* dots = dot_products();
  if (dots == nullptr) GTEST_SKIP() << "no AVX512_BF16 here";
  expect_bf16_products(*dots);
}

// x stays f32: the reference takes it unrounded.
TEST(VectorKernels, WidenedProductsKeepXExact) {
  const GemvBf16 widened = widened_products();
  if (widened == nullptr) GTEST_SKIP() << "no AVX-512 here";
  for (const int64_t m : {1, 7, 8, 9, 17, 131}) {
    for (const auto& [n, k] : {std::pair<int64_t, int64_t>{13, 37},
                               {29, 130},
                               {64, 64},
                               {3, 5},
                               {33, 33},
                               {301, 1024}}) {
      const auto x = random_values(static_cast<size_t>(m * k), 7 + m);
      const auto w = bf16_bits(random_values(static_cast<size_t>(n * k), 8 + n));
      std::vector<float> out(static_cast<size_t>(m * n), NAN);
      widened(x.data(), w.data(), m, n, k, out.data());
      expect_close(
          out, gemv_reference(x, w, m, n, k), 1e-5f,
          "m=" + std::to_string(m) + " n=" + std::to_string(n) + " k=" + std::to_string(k));
    }
  }
}

constexpr int32_t kCacheRows = 46;

// Scores and weighted sums over listed key rows for a query of q_heads heads, against double
// sums. Each row holds kv_heads heads and sits `stride` apart in the cache, with other values
// between rows, and the list skips rows.
template <typename KV>
void check_listed_keys(const VectorKernels& kernels, const std::vector<KV>& cache, int64_t stride,
                       int64_t q_heads, int64_t kv_heads, int64_t dim, const std::string& what) {
  // 37 keys: whole blocks of a vector's width of keys (8 or 16) and some after them.
  std::vector<int32_t> keys;
  for (int32_t j = 0; j < kCacheRows; ++j) {
    if (j % 5 != 1) keys.push_back(j);
  }
  const auto count = static_cast<int64_t>(keys.size());
  const int64_t group = q_heads / kv_heads;
  const auto q = random_values(static_cast<size_t>(q_heads * dim), 3);
  const auto probs = random_values(static_cast<size_t>(q_heads * count), 4, 0.f, 1.f);
  std::vector<float> want_scores(static_cast<size_t>(q_heads * count));
  std::vector<float> want_out(static_cast<size_t>(q_heads * dim));
  for (int64_t h = 0; h < q_heads; ++h) {
    const int64_t at = (h / group) * dim;
    for (int64_t i = 0; i < count; ++i) {
      double dot = 0;
      for (int64_t d = 0; d < dim; ++d)
        dot += q[h * dim + d] * widen(cache[keys[i] * stride + at + d]);
      want_scores[h * count + i] = static_cast<float>(0.5 * dot);
    }
    for (int64_t d = 0; d < dim; ++d) {
      double total = 0;
      for (int64_t i = 0; i < count; ++i)
        total += probs[h * count + i] * widen(cache[keys[i] * stride + at + d]);
      want_out[h * dim + d] = static_cast<float>(total);
    }
  }
  std::vector<float> scores(want_scores.size(), NAN), out(want_out.size(), NAN);
  if constexpr (std::is_same_v<KV, float>) {
    kernels.key_scores_f32(q.data(), q_heads, kv_heads, cache.data(), stride, keys.data(), count,
                           dim, 0.5f, scores.data());
    kernels.weighted_values_f32(probs.data(), q_heads, kv_heads, cache.data(), stride, keys.data(),
                                count, dim, out.data());
  } else {
    kernels.key_scores_bf16(q.data(), q_heads, kv_heads, cache.data(), stride, keys.data(), count,
                            dim, 0.5f, scores.data());
    kernels.weighted_values_bf16(probs.data(), q_heads, kv_heads, cache.data(), stride, keys.data(),
                                 count, dim, out.data());
  }
  expect_close(scores, want_scores, 1e-5f, "scores " + what);
  expect_close(out, want_out, 1e-5f, "weighted values " + what);
}

TEST_P(VectorKernelsTest, AttentionOverListedKeys) {
  const VectorKernels& kernels = *GetParam();
  // Groups of 5 query heads a KV head: a pass of 4 and one of 1; dims with whole vectors and
  // leftover values.
  for (const auto& [q_heads, kv_heads] :
       std::vector<std::pair<int64_t, int64_t>>{{1, 1}, {2, 1}, {6, 2}, {9, 3}, {10, 2}}) {
    for (const int64_t dim : {1, 7, 16, 33, 80, 128}) {
      const int64_t stride = kv_heads * dim + 3;
      const auto cache = random_values(static_cast<size_t>(kCacheRows * stride), 5);
      const std::string what = "q_heads=" + std::to_string(q_heads) +
                               " kv_heads=" + std::to_string(kv_heads) +
                               " dim=" + std::to_string(dim);
      check_listed_keys(kernels, cache, stride, q_heads, kv_heads, dim, what + " f32");
      check_listed_keys(kernels, bf16_bits(cache), stride, q_heads, kv_heads, dim, what + " bf16");
    }
  }
}

TEST_P(VectorKernelsTest, ExpShiftedSiluAndItsGradient) {
  const VectorKernels& kernels = *GetParam();
  for (const int64_t n : {1, 5, 17, 40}) {
    auto x = random_values(static_cast<size_t>(n), 6, -20.f, 20.f);
    x[0] = -INFINITY;  // a masked score: exp gives 0
    std::vector<float> out(x.size());
    kernels.exp_shifted(x.data(), out.data(), n, 3.5f, 0.25f);
    std::vector<float> want(x.size());
    for (int64_t i = 0; i < n; ++i) want[i] = static_cast<float>(std::exp(x[i] - 3.5) * 0.25);
    expect_close(out, want, 1e-6f, "exp_shifted n=" + std::to_string(n));

    x[0] = -3.f;
    const auto dy = random_values(static_cast<size_t>(n), 7);
    std::vector<float> silu = x, grad = x, want_silu(x.size()), want_grad(x.size());
    for (int64_t i = 0; i < n; ++i) {
      const double s = 1 / (1 + std::exp(-static_cast<double>(x[i])));
      want_silu[i] = static_cast<float>(x[i] * s);
      want_grad[i] = static_cast<float>(dy[i] * s * (1 + x[i] * (1 - s)));
    }
    kernels.silu(silu.data(), n);
    kernels.silu_grad(grad.data(), dy.data(), n);
    expect_close(silu, want_silu, 1e-6f, "silu n=" + std::to_string(n));
    expect_close(grad, want_grad, 1e-6f, "silu_grad n=" + std::to_string(n));
  }
}

// Attention weights in double: exp(scale s[j] - the largest kept), over [begin, end) where the mask
// keeps j; scores dropped by either are NaN or huge, so reading one shows.
TEST_P(VectorKernelsTest, AttentionWeightsOverTheKeptKeys) {
  const VectorKernels& kernels = *GetParam();
  const float scale = 0.088f;
  for (const int64_t keys : {1, 5, 17, 40, 100}) {
    for (const int64_t begin : {int64_t{0}, keys / 3}) {
      const int64_t end = keys - keys / 4;
      auto scores = random_values(static_cast<size_t>(keys), 9, -60.f, 60.f);
      std::vector<int32_t> mask(static_cast<size_t>(keys), 1);
      for (int64_t j = 0; j < keys; ++j) {
        if (j % 7 == 3) mask[static_cast<size_t>(j)] = 0;
        const bool dropped = j < begin || j >= end || j % 7 == 3;
        if (dropped) scores[static_cast<size_t>(j)] = j % 2 == 0 ? NAN : 1e30f;
      }
      double top = -INFINITY;
      for (int64_t j = begin; j < end; ++j) {
        if (j % 7 != 3) top = std::max(top, static_cast<double>(scale * scores[j]));
      }
      std::vector<uint16_t> weights(static_cast<size_t>(keys), 0xffff);
      const float inv = kernels.attention_weights_bf16(scores.data(), mask.data(), begin, end, keys,
                                                       scale, weights.data());
      const std::string what = "keys=" + std::to_string(keys) + " begin=" + std::to_string(begin);
      double sum = 0;
      for (int64_t j = 0; j < keys; ++j) {
        const bool kept = j >= begin && j < end && j % 7 != 3;
        const double want = kept ? std::exp(scale * static_cast<double>(scores[j]) - top) : 0;
        sum += want;
        EXPECT_NEAR(bf16_bits_to_f32(weights[static_cast<size_t>(j)]), want, want / 128 + 1e-30)
            << what << " at " << j;
      }
      if (sum == 0) {
        EXPECT_EQ(inv, 0.f) << what;
      } else {
        EXPECT_NEAR(inv, 1 / sum, 1e-5 / sum) << what;
      }
    }
  }
}

// The bf16 nearest to v, found by comparing the two candidates around it (ties to the even
// one): a closed form independent of the kernels' bit arithmetic. Not for NaN.
uint16_t nearest_bf16(float v) {
  uint32_t bits;
  std::memcpy(&bits, &v, 4);
  const auto below = static_cast<uint16_t>(bits >> 16);  // toward zero
  if (std::isinf(v)) return below;
  const auto above = static_cast<uint16_t>(below + 1);  // away from zero (may be infinity)
  const double to_below = std::abs(static_cast<double>(v) - bf16_bits_to_f32(below));
  // IEEE rounds as if the exponent went on: past the largest bf16, infinity stands at 2^128.
  const double above_value =
      (above & 0x7fff) == 0x7f80 ? std::copysign(0x1p128, v) : bf16_bits_to_f32(above);
  const double to_above = std::abs(static_cast<double>(v) - above_value);
  if (to_below != to_above) return to_below < to_above ? below : above;
  return (below & 1) == 0 ? below : above;
}

TEST_P(VectorKernelsTest, RoundsToTheNearestBf16) {
  const VectorKernels& kernels = *GetParam();
  const uint32_t specials[] = {
      0x00000000, 0x80000000, 0x3f808000, 0x3f818000, 0xbf808000,   // zeros and ties
      0x3f80ffff, 0x3f807fff, 0x7f7fffff, 0xff7fffff,               // near and at overflow
      0x00000001, 0x007fffff, 0x80008000,                           // subnormals
      0x7f800000, 0xff800000, 0x7fc00000, 0x7f800001, 0xffa01234};  // infinities and NaNs
  for (const int64_t n : {1, 7, 16, 17, 40, 100}) {
    auto x = random_values(static_cast<size_t>(n), 8, -1e4f, 1e4f);
    for (int64_t i = 0; i < n; i += 2) {
      const uint32_t bits = specials[static_cast<size_t>(i / 2) % std::size(specials)];
      std::memcpy(&x[static_cast<size_t>(i)], &bits, 4);
    }
    std::vector<uint16_t> out(x.size());
    kernels.round_bf16(x.data(), out.data(), n);
    for (int64_t i = 0; i < n; ++i) {
      const float v = x[static_cast<size_t>(i)];
      const float got = bf16_bits_to_f32(out[static_cast<size_t>(i)]);
      if (std::isnan(v)) {
        EXPECT_TRUE(std::isnan(got)) << "n=" << n << " at " << i;
        EXPECT_EQ(std::signbit(got), std::signbit(v)) << "n=" << n << " at " << i;
      } else {
        EXPECT_EQ(out[static_cast<size_t>(i)], nearest_bf16(v))
            << "n=" << n << " at " << i << " value " << v;
      }
    }
  }
}

INSTANTIATE_TEST_SUITE_P(RunnableHere, VectorKernelsTest, ::testing::ValuesIn(every_set()),
                         set_name);

TEST(VectorKernels, EveryIsaTheCpuHasIsRunAndTheWidestChosen) {
  std::vector<std::string> names;
  for (const VectorKernels* k : runnable_vector_kernels()) names.emplace_back(k->isa);
  std::vector<std::string> want{"AVX2+FMA"};
  if (cpu_isa().avx512) want.emplace_back("AVX-512");
  EXPECT_EQ(names, want);
  EXPECT_EQ(std::string(vector_kernels().isa), want.back());
}

}  // namespace
}  // namespace tfm::cpu
