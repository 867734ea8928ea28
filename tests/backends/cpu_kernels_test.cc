// Every CPU kernel against the scalar reference in src/ops, on odd sizes.
#include <gtest/gtest.h>

#include <algorithm>
#include <array>
#include <atomic>
#include <string>

#include "backends/cpu/cpu_isa.h"
#include "backends/cpu/kernels.h"
#include "backends/cpu/packed_products.h"
#include "backends/cpu/row_runs.h"
#include "backends/cpu/vector_kernels.h"
#include "ops/reference.h"
#include "support/argmax_rows.h"
#include "support/random_values.h"
#include "tfm/error.h"

namespace tfm {
namespace {

using testing::random_values;

using testing::expect_close;

using testing::bf16_bits;
using testing::floats_of_bf16;

// The weights' dtype and, for bf16 weights, the path products with many rows take: every path
// this CPU can run (cpu::cpu_isa), each against the reference on what it reads.
enum class Weights { kF32, kBf16Widened, kBf16Products };

class LinearTest : public ::testing::TestWithParam<std::tuple<int64_t, int64_t, int64_t, Weights>> {
};

TEST_P(LinearTest, MatchesReference) {
  const auto [m, n, k, weights] = GetParam();
  if (weights == Weights::kBf16Products && cpu::big_products_path() != cpu::BigProducts::kBf16) {
    GTEST_SKIP() << "no native bf16 dot products here: " << cpu::describe(cpu::cpu_isa());
  }
  auto x = random_values(static_cast<size_t>(m * k), 1);
  auto w = random_values(static_cast<size_t>(n * k), 2);
  const auto bias = random_values(static_cast<size_t>(n), 3);
  std::vector<float> got(static_cast<size_t>(m * n)), want(got.size());
  if (weights == Weights::kF32) {
    cpu::linear(x.data(), w.data(), DType::f32, bias.data(), m, n, k, got.data());
  } else {
    const std::vector<uint16_t> w16 = bf16_bits(w);
    w = floats_of_bf16(w16);  // the reference sees the same rounded weights
    const bool products = weights == Weights::kBf16Products;
    cpu::linear_bf16_weights(x.data(), w16.data(), m, n, k, got.data(),
                             products ? cpu::BigProducts::kBf16 : cpu::BigProducts::kWidened);
    // Bf16 products of many rows read x rounded to bf16 too (a few GEMV rows read it whole).
    if (cpu::reads_rounded_activations(
            m, products ? cpu::BigProducts::kBf16 : cpu::BigProducts::kWidened)) {
      x = floats_of_bf16(bf16_bits(x));
    }
    for (int64_t i = 0; i < m; ++i)
      for (int64_t j = 0; j < n; ++j) got[static_cast<size_t>(i * n + j)] += bias[j];
  }
  ops::reference::linear(x.data(), w.data(), bias.data(), m, n, k, want.data());
  expect_close(got, want, 1e-4f);
}

INSTANTIATE_TEST_SUITE_P(Shapes, LinearTest,
                         ::testing::Combine(::testing::Values(1, 3, 5, 8, 9, 33, 67),
                                            ::testing::Values(1, 5, 131, 300),
                                            ::testing::Values(1, 17, 64, 97),
                                            ::testing::Values(Weights::kF32, Weights::kBf16Widened,
                                                              Weights::kBf16Products)));

// Products that share x (q, k and v's; gate and up's), each with its own rows, bias and output, in
// one call: one row of x and every row count the tiles or the dot products take included.
TEST(CpuKernels, ProductsSharingX) {
  const int64_t k = 97;
  const std::array<int64_t, 3> rows{131, 5, 64};
  for (const int64_t m : {1, 3, 17, 67}) {
    const auto x = random_values(static_cast<size_t>(m * k), 4);
    std::vector<std::vector<uint16_t>> w16;
    std::vector<std::vector<float>> bias, got;
    std::vector<cpu::SharedXProduct> products;
    for (size_t i = 0; i < rows.size(); ++i) {
      w16.push_back(bf16_bits(random_values(static_cast<size_t>(rows[i] * k), 5 + i)));
      bias.push_back(random_values(static_cast<size_t>(rows[i]), 8 + i));
      got.emplace_back(static_cast<size_t>(m * rows[i]), NAN);
    }
    for (size_t i = 0; i < rows.size(); ++i) {
      products.push_back({w16[i].data(), rows[i], bias[i].data(), got[i].data()});
    }
    cpu::linear_shared_x(x.data(), products.data(), 3, DType::bf16, m, k);
    const auto read_x = cpu::reads_rounded_activations(m, cpu::big_products_path())
                            ? floats_of_bf16(bf16_bits(x))
                            : x;
    for (size_t i = 0; i < rows.size(); ++i) {
      std::vector<float> want(got[i].size());
      ops::reference::linear(read_x.data(), floats_of_bf16(w16[i]).data(), bias[i].data(), m,
                             rows[i], k, want.data());
      expect_close(got[i], want, 1e-4f, "m=" + std::to_string(m) + " product " + std::to_string(i));
    }
  }
}

std::vector<float> transposed(const std::vector<float>& v, int64_t rows, int64_t cols) {
  std::vector<float> out(v.size());
  for (int64_t i = 0; i < rows; ++i)
    for (int64_t j = 0; j < cols; ++j) out[j * rows + i] = v[i * cols + j];
  return out;
}

// A linear layer's two backward products of bf16 operands as bf16 dot products (the path a CPU
// with native bf16 takes under autocast), on odd sizes, added into what the output held: dx = dy
// w and dw = dy^T x, against the reference product of the transposed operands.
TEST(CpuKernels, Bf16GradientProducts) {
  if (cpu::big_products_path() != cpu::BigProducts::kBf16) {
    GTEST_SKIP() << "no native bf16 dot products here: " << cpu::describe(cpu::cpu_isa());
  }
  for (const auto& [m, n, k] : {std::array<int64_t, 3>{9, 5, 17}, {67, 131, 97}, {33, 300, 64}}) {
    const std::vector<uint16_t> dy = bf16_bits(random_values(static_cast<size_t>(m * n), 4));
    const std::vector<uint16_t> w = bf16_bits(random_values(static_cast<size_t>(n * k), 5));
    const std::vector<uint16_t> x = bf16_bits(random_values(static_cast<size_t>(m * k), 6));
    const std::vector<float> dx0 = random_values(static_cast<size_t>(m * k), 7);
    const std::vector<float> dw0 = random_values(static_cast<size_t>(n * k), 8);
    std::vector<float> dx = dx0, dw = dw0;
    cpu::linear_grad_input_bf16(dy.data(), w.data(), m, n, k, dx.data(), true);
    cpu::linear_grad_weight_bf16(dy.data(), x.data(), m, n, k, dw.data(), true);
    std::vector<float> want_dx(dx.size()), want_dw(dw.size());
    ops::reference::linear(floats_of_bf16(dy).data(), transposed(floats_of_bf16(w), n, k).data(),
                           nullptr, m, k, n, want_dx.data());
    ops::reference::linear(transposed(floats_of_bf16(dy), m, n).data(),
                           transposed(floats_of_bf16(x), m, k).data(), nullptr, n, k, m,
                           want_dw.data());
    for (size_t i = 0; i < dx.size(); ++i) want_dx[i] += dx0[i];
    for (size_t i = 0; i < dw.size(); ++i) want_dw[i] += dw0[i];
    const std::string shape = std::to_string(m) + "x" + std::to_string(n) + "x" + std::to_string(k);
    expect_close(dx, want_dx, 1e-4f, "dx " + shape);
    expect_close(dw, want_dw, 1e-4f, "dw " + shape);
  }
}

// Autocast's forward products of bf16 rows, rounded to bf16 output, on odd sizes: rows few
// enough for tfm's AMX tiles where the CPU has them, and as many as oneDNN takes.
TEST(CpuKernels, Bf16ProductsRoundedToBf16) {
  if (cpu::big_products_path() != cpu::BigProducts::kBf16) {
    GTEST_SKIP() << "no native bf16 dot products here: " << cpu::describe(cpu::cpu_isa());
  }
  for (const auto& [m, n, k] : {std::array<int64_t, 3>{9, 5, 17},
                                {67, 131, 97},
                                {cpu::cpu_isa().dot_product_rows + 3, 300, 64}}) {
    const std::vector<uint16_t> x = bf16_bits(random_values(static_cast<size_t>(m * k), 9));
    const std::vector<uint16_t> w = bf16_bits(random_values(static_cast<size_t>(n * k), 10));
    std::vector<uint16_t> got(static_cast<size_t>(m * n));
    cpu::linear_bf16_rows_rounded(x.data(), w.data(), m, n, k, got.data());
    std::vector<float> want(got.size());
    ops::reference::linear(floats_of_bf16(x).data(), floats_of_bf16(w).data(), nullptr, m, n, k,
                           want.data());
    const std::string shape = std::to_string(m) + "x" + std::to_string(n) + "x" + std::to_string(k);
    // Sums in another order may round to the neighbouring bf16: within one bf16 step.
    expect_close(floats_of_bf16(got), floats_of_bf16(bf16_bits(want)), 1.f / 128, shape);
  }
}

TEST(CpuKernels, RmsNorm) {
  const int64_t rows = 7, hidden = 45;
  const auto x = random_values(rows * hidden, 4);
  const auto w = random_values(hidden, 5, 0.5f, 1.5f);
  std::vector<float> got(x.size()), want(x.size());
  cpu::rms_norm(x.data(), w.data(), rows, hidden, 1e-6f, got.data());
  ops::reference::rms_norm(x.data(), w.data(), rows, hidden, 1e-6f, want.data());
  expect_close(got, want, 1e-5f);
}

TEST(CpuKernels, Rope) {
  const int64_t batch = 2, seq = 5, heads = 3, dim = 10;
  const auto x = random_values(batch * seq * heads * dim, 6);
  const std::vector<int32_t> positions{0, 1, 2, 3, 4, 1, 1, 0, 7, 300};
  std::vector<float> inv_freq(dim / 2);
  for (int64_t i = 0; i < dim / 2; ++i) inv_freq[i] = std::pow(10000.f, -2.f * i / dim);
  std::vector<float> got(x.size()), want(x.size());
  cpu::rope(x.data(), positions.data(), inv_freq.data(), batch, seq, heads, dim, 1.f, got.data());
  ops::reference::rope(x.data(), positions.data(), inv_freq.data(), batch, seq, heads, dim, 1.f,
                       want.data());
  expect_close(got, want, 2e-5f);
}

// RoPE's tables hold 512 angles: a head of 1024 is rotated as the reference does; a wider one is
// refused by name, by rope and by the norms' backward that rotates inside, never overrun.
TEST(CpuKernels, RopeUpToItsWidestHeadAndNoWider) {
  const int64_t dim = 1024;
  const auto x = random_values(2 * dim, 7);
  const std::vector<int32_t> positions{3, 60};
  std::vector<float> inv_freq(dim / 2);
  for (int64_t i = 0; i < dim / 2; ++i) inv_freq[i] = std::pow(10000.f, -2.f * i / dim);
  std::vector<float> got(x.size()), want(x.size());
  cpu::rope(x.data(), positions.data(), inv_freq.data(), 1, 2, 1, dim, 1.f, got.data());
  ops::reference::rope(x.data(), positions.data(), inv_freq.data(), 1, 2, 1, dim, 1.f, want.data());
  expect_close(got, want, 2e-5f);

  const int64_t wide = dim + 2;
  const auto xw = random_values(2 * wide, 8);
  std::vector<float> wide_freq(wide / 2, 0.5f), out(xw.size()), w(wide, 1.f), dw(wide, 0.f);
  const auto names_the_head = [](const auto& call) {
    try {
      call();
      ADD_FAILURE() << "a head_dim of 1026 was not refused";
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find("head_dim 1026"), std::string::npos) << e.what();
    }
  };
  names_the_head([&] {
    cpu::rope(xw.data(), positions.data(), wide_freq.data(), 1, 2, 1, wide, 1.f, out.data());
  });
  const cpu::RopeGradRows rotation{positions.data(), wide_freq.data(), 1, 2, 1, 1.f};
  names_the_head([&] {
    cpu::rms_norm_grads({xw.data(), DType::f32}, w.data(), {xw.data(), DType::f32}, nullptr, 2,
                        wide, 1e-6f, out.data(), DType::f32, dw.data(), &rotation);
  });
}

TEST(CpuKernels, AttentionWithPaddingAndGroups) {
  const int64_t batch = 2, seq = 3, len = 11, hq = 6, hkv = 2, d = 9;
  const auto q = random_values(batch * seq * hq * d, 7);
  const auto k = random_values(batch * len * hkv * d, 8);
  const auto v = random_values(batch * len * hkv * d, 9);
  std::vector<int32_t> mask(batch * len, 1);
  mask[len + 0] = mask[len + 1] = 0;  // row 1 left-padded
  mask[5] = 0;                        // a hole in row 0
  const std::vector<int32_t> slots{4, 5, 6};
  std::vector<float> got(q.size()), want(q.size());
  cpu::attention(q.data(), k.data(), v.data(), DType::f32, mask.data(), slots.data(), batch, seq,
                 len, hq, hkv, d, 0.33f, got.data());
  ops::reference::attention(q.data(), k.data(), v.data(), mask.data(), slots.data(), batch, seq,
                            len, hq, hkv, d, 0.33f, want.data());
  expect_close(got, want, 1e-5f);
}

// Many queries take the matrix-product path (scores and outputs through sgemm).
TEST(CpuKernels, AttentionOverManyQueries) {
  const int64_t batch = 2, seq = 20, len = 37, hq = 4, hkv = 2, d = 16;
  const auto q = random_values(batch * seq * hq * d, 14);
  const auto k = random_values(batch * len * hkv * d, 15);
  const auto v = random_values(batch * len * hkv * d, 16);
  std::vector<int32_t> mask(batch * len, 1);
  for (int64_t j = 0; j < 19; ++j) mask[len + j] = 0;  // row 1: its first queries see nothing
  mask[3] = 0;
  std::vector<int32_t> slots(seq);
  for (int64_t i = 0; i < seq; ++i) slots[i] = static_cast<int32_t>(17 + i);
  std::vector<float> got(q.size()), want(q.size());
  cpu::attention(q.data(), k.data(), v.data(), DType::f32, mask.data(), slots.data(), batch, seq,
                 len, hq, hkv, d, 0.25f, got.data());
  ops::reference::attention(q.data(), k.data(), v.data(), mask.data(), slots.data(), batch, seq,
                            len, hq, hkv, d, 0.25f, want.data());
  expect_close(got, want, 1e-5f);
}

// A causal prefill longer than one block of queries: each block stops at its last visible key.
TEST(CpuKernels, CausalAttentionOverSeveralQueryBlocks) {
  const int64_t batch = 2, seq = 150, hq = 2, hkv = 1, d = 8;
  const auto q = random_values(batch * seq * hq * d, 17);
  const auto k = random_values(batch * seq * hkv * d, 18);
  const auto v = random_values(batch * seq * hkv * d, 19);
  std::vector<int32_t> mask(batch * seq, 1);
  for (int64_t j = 0; j < 70; ++j) mask[seq + j] = 0;  // row 1 left-padded past the first block
  std::vector<int32_t> slots(seq);
  for (int64_t i = 0; i < seq; ++i) slots[i] = static_cast<int32_t>(i);
  std::vector<float> got(q.size()), want(q.size());
  cpu::attention(q.data(), k.data(), v.data(), DType::f32, mask.data(), slots.data(), batch, seq,
                 seq, hq, hkv, d, 0.3f, got.data());
  ops::reference::attention(q.data(), k.data(), v.data(), mask.data(), slots.data(), batch, seq,
                            seq, hq, hkv, d, 0.3f, want.data());
  expect_close(got, want, 1e-5f);
}

TEST(CpuKernels, CacheWrite) {
  const int64_t batch = 2, len = 6, seq = 2, row = 5;
  const auto update = random_values(batch * seq * row, 10);
  std::vector<float> got(batch * len * row, 0.f), want = got;
  const std::vector<int32_t> slots{3, 4};
  cpu::cache_write(got.data(), DType::f32, update.data(), slots.data(), batch, len, seq, row);
  ops::reference::cache_write(want.data(), update.data(), slots.data(), batch, len, seq, row);
  EXPECT_EQ(got, want);
}

// Greedy decoding's pick, over rows of one vector block and of several (1024 floats a block), with
// the largest in a later block, ties across blocks and NaNs at block starts.
TEST(CpuKernels, ArgmaxIsMaxElementsIndex) {
  for (const int64_t n : {int64_t{37}, int64_t{2501}, int64_t{151936}}) {
    const std::vector<float> x = testing::argmax_edge_rows(n);
    std::vector<int32_t> out(static_cast<size_t>(testing::kArgmaxRows), -7);
    cpu::argmax_rows(x.data(), testing::kArgmaxRows, n, out.data());
    for (int64_t r = 0; r < testing::kArgmaxRows; ++r) {
      const float* row = x.data() + r * n;
      EXPECT_EQ(out[r], std::max_element(row, row + n) - row) << "row " << r << " of " << n;
    }
  }
}

TEST(CpuKernels, FusedElementwiseChain) {
  const int64_t n = 1000;  // not a multiple of the block size
  const auto a = random_values(n, 11, -6.f, 6.f), b = random_values(n, 12),
             c = random_values(n, 13);
  // silu(a) * b + c
  graph::ElementwiseProgram program{{{graph::EwCode::kLoad, 0},
                                     {graph::EwCode::kSilu},
                                     {graph::EwCode::kLoad, 1},
                                     {graph::EwCode::kMul},
                                     {graph::EwCode::kLoad, 2},
                                     {graph::EwCode::kAdd}}};
  const float* inputs[] = {a.data(), b.data(), c.data()};
  const cpu::Floats operands[] = {
      {a.data(), DType::f32}, {b.data(), DType::f32}, {c.data(), DType::f32}};
  std::vector<float> got(n), want(n);
  cpu::elementwise(program, operands, n, got.data(), DType::f32);
  ops::reference::elementwise(program, inputs, n, want.data());
  expect_close(got, want, 1e-6f);
}

// Autocast's chains: bf16 operands widened and bf16 results rounded inside the chain, beside an
// f32 operand, for a paired program (two results) on odd sizes, one of them split over threads.
TEST(CpuKernels, FusedElementwiseChainOfBf16) {
  for (const int64_t n : {int64_t{1000}, int64_t{70001}}) {
    const std::vector<uint16_t> a = bf16_bits(random_values(n, 15, -6.f, 6.f)),
                                b = bf16_bits(random_values(n, 16));
    const auto c = random_values(n, 17);
    // silu(a) * b and c + b
    graph::ElementwiseProgram program{{{graph::EwCode::kLoad, 0},
                                       {graph::EwCode::kSilu},
                                       {graph::EwCode::kLoad, 1},
                                       {graph::EwCode::kMul},
                                       {graph::EwCode::kLoad, 2},
                                       {graph::EwCode::kLoad, 1},
                                       {graph::EwCode::kAdd}},
                                      2};
    const cpu::Floats inputs[] = {
        {a.data(), DType::bf16}, {b.data(), DType::bf16}, {c.data(), DType::f32}};
    std::vector<uint16_t> got(n), got_second(n);
    cpu::elementwise(program, inputs, n, got.data(), DType::bf16, got_second.data());

    const std::vector<float> wide_a = floats_of_bf16(a), wide_b = floats_of_bf16(b);
    const float* wide[] = {wide_a.data(), wide_b.data(), c.data()};
    std::vector<float> want(n), want_second(n);
    const graph::ElementwiseProgram first{{program.instrs.begin(), program.instrs.begin() + 4}},
        second{{program.instrs.begin() + 4, program.instrs.end()}};
    ops::reference::elementwise(first, wide, n, want.data());
    ops::reference::elementwise(second, wide, n, want_second.data());
    // Rounded to bf16 from values that may differ in the last f32 bits: within one bf16 step.
    expect_close(floats_of_bf16(got), floats_of_bf16(bf16_bits(want)), 1.f / 128, "first");
    expect_close(floats_of_bf16(got_second), floats_of_bf16(bf16_bits(want_second)), 1.f / 128,
                 "second");
  }
}

TEST(CpuKernels, EmbeddingBf16AndOutOfRange) {
  const int64_t vocab = 13, hidden = 7;
  const auto table = random_values(vocab * hidden, 14);
  const std::vector<uint16_t> table16 = bf16_bits(table);
  const std::vector<float> rounded = floats_of_bf16(table16);
  const std::vector<int32_t> ids{12, 0, 5};
  std::vector<float> got(ids.size() * hidden), want(got.size());
  cpu::embedding(table16.data(), DType::bf16, vocab, hidden, ids.data(), 3, got.data());
  ops::reference::embedding(rounded.data(), vocab, hidden, ids.data(), 3, want.data());
  EXPECT_EQ(got, want);
  const std::vector<int32_t> bad{13};
  EXPECT_THROW(cpu::embedding(table.data(), DType::f32, vocab, hidden, bad.data(), 1, got.data()),
               Error);
}

}  // namespace
}  // namespace tfm

namespace tfm {
namespace {

struct AttentionShape {
  int64_t batch, seq, len, q_heads, kv_heads, head_dim;
};

// The kernel's attention over a bf16 cache against the reference's over the cache as the kernel
// stored it (rounded to bf16), with scale 0.25.
void expect_bf16_cache_attention(const std::vector<float>& q, const std::vector<uint16_t>& k_cache,
                                 const std::vector<uint16_t>& v_cache,
                                 const std::vector<int32_t>& mask,
                                 const std::vector<int32_t>& slots, const AttentionShape& s) {
  std::vector<float> got(q.size()), want(q.size());
  cpu::attention(q.data(), k_cache.data(), v_cache.data(), DType::bf16, mask.data(), slots.data(),
                 s.batch, s.seq, s.len, s.q_heads, s.kv_heads, s.head_dim, 0.25f, got.data());
  const std::vector<float> k_ref = floats_of_bf16(k_cache), v_ref = floats_of_bf16(v_cache);
  // On AMX tiles or AVX512_BF16's dot products (16 queries or more) q is read as bf16 and the
  // weights rounded to bf16 for their product with v (relative error 2^-9 each): the reference
  // reads q rounded too.
  const bool tiles = s.seq >= 16 && cpu::packed_product() != nullptr;
  const std::vector<float> q_ref = tiles ? floats_of_bf16(bf16_bits(q)) : q;
  ops::reference::attention(q_ref.data(), k_ref.data(), v_ref.data(), mask.data(), slots.data(),
                            s.batch, s.seq, s.len, s.q_heads, s.kv_heads, s.head_dim, 0.25f,
                            want.data());
  expect_close(got, want, tiles ? 4e-3f : 1e-5f);
}

TEST(CpuKernels, Bf16KvCacheWriteAndAttention) {
  const int64_t batch = 1, seq = 2, len = 7, hq = 4, hkv = 2, d = 16;
  const auto q = random_values(batch * seq * hq * d, 15);
  const auto k = random_values(batch * seq * hkv * d, 16), v = random_values(k.size(), 17);
  std::vector<uint16_t> k_cache(batch * len * hkv * d, 0), v_cache(k_cache.size(), 0);
  const std::vector<int32_t> slots{2, 3};
  cpu::cache_write(k_cache.data(), DType::bf16, k.data(), slots.data(), batch, len, seq, hkv * d);
  cpu::cache_write(v_cache.data(), DType::bf16, v.data(), slots.data(), batch, len, seq, hkv * d);
  std::vector<int32_t> mask(batch * len, 0);
  mask[2] = mask[3] = 1;
  expect_bf16_cache_attention(q, k_cache, v_cache, mask, slots, {batch, seq, len, hq, hkv, d});
  EXPECT_EQ(bf16_bits_to_f32(k_cache[2 * hkv * d]), bf16_bits_to_f32(f32_to_bf16_bits(k[0])));
}

// rows_in_runs hands each row to exactly one call, whatever the count against the threads and
// runs' claims, also from inside a parallel region (its inner region then has one thread).
TEST(CpuKernels, RowsInRunsVisitEachRowOnce) {
  for (const int64_t n : {0, 1, 5, 16, 17, 1000, 4099}) {
    std::vector<std::atomic<int>> visits(static_cast<size_t>(n));
    cpu::rows_in_runs(n, [&](int64_t r) { visits[static_cast<size_t>(r)]++; });
#pragma omp parallel num_threads(2)
    cpu::rows_in_runs(n, [&](int64_t r) { visits[static_cast<size_t>(r)]++; });
    const int expected = 1 + 2;  // once alone, then once from each of the two outer threads
    for (int64_t r = 0; r < n; ++r) ASSERT_EQ(visits[static_cast<size_t>(r)], expected) << n;
  }
}

// One decode query over a long bf16 cache, enough work that the threads split it by KV head,
// against the reference: two rows (one left-padded), four KV heads of two query heads each.
TEST(CpuKernels, Bf16CacheAttentionOfOneQuerySplitByKvHead) {
  const int64_t batch = 2, seq = 1, len = 300, hq = 8, hkv = 4, d = 64;
  const auto q = random_values(batch * seq * hq * d, 21);
  std::vector<uint16_t> k_cache = bf16_bits(random_values(batch * len * hkv * d, 22));
  std::vector<uint16_t> v_cache = bf16_bits(random_values(k_cache.size(), 23));
  const std::vector<int32_t> slots{280};
  std::vector<int32_t> mask(batch * len, 0);
  for (int64_t j = 0; j <= 280; ++j) {
    mask[j] = 1;
    mask[len + j] = j >= 9 ? 1 : 0;
  }
  ASSERT_GT(batch * seq * hq * slots[0] * d, cpu::kParallelMinElements);
  expect_bf16_cache_attention(q, k_cache, v_cache, mask, slots, {batch, seq, len, hq, hkv, d});
}

// A prefill chunk of s.seq queries at slots first, first + 1, ... over a bf16 cache of random keys
// and values (seeds from `seed`), each row's first padding[b] slots masked, against the reference.
void expect_chunk_attention(const AttentionShape& s, int64_t first,
                            const std::vector<int64_t>& padding, uint64_t seed) {
  const auto q = random_values(s.batch * s.seq * s.q_heads * s.head_dim, seed);
  const auto cache_values = static_cast<size_t>(s.batch * s.len * s.kv_heads * s.head_dim);
  const std::vector<uint16_t> k_cache = bf16_bits(random_values(cache_values, seed + 1));
  const std::vector<uint16_t> v_cache = bf16_bits(random_values(cache_values, seed + 2));
  std::vector<int32_t> slots(s.seq), mask(s.batch * s.len, 0);
  for (int64_t i = 0; i < s.seq; ++i) slots[i] = static_cast<int32_t>(first + i);
  for (int64_t b = 0; b < s.batch; ++b) {
    for (int64_t j = padding[b]; j < first + s.seq; ++j) mask[b * s.len + j] = 1;
  }
  expect_bf16_cache_attention(q, k_cache, v_cache, mask, slots, s);
}

// Many queries over a bf16 cache (a prefill chunk: AMX tiles or AVX512_BF16's dot products, or the
// keys and values widened for matrix products) against the reference on the cache as stored: two
// rows, the second left-padded, grouped heads, the chunk after earlier slots.
TEST(CpuKernels, Bf16CacheAttentionOfManyQueries) {
  expect_chunk_attention({2, 37, 50, 4, 2, 16}, 6, {0, 4}, 18);
}

// A chunk of two query blocks (64 and 7 queries) whose keys end inside their tiles, over heads of
// 80 (two whole tiles of 32 and part of a third): the packed keys and values serve blocks that see
// different numbers of keys, and the second block's weights must not read the first's past its
// own keys.
TEST(CpuKernels, Bf16CacheAttentionOfTwoQueryBlocksOverPartialTiles) {
  expect_chunk_attention({1, 71, 90, 4, 1, 80}, 11, {3}, 24);
}

}  // namespace
}  // namespace tfm
