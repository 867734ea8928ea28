// The CUDA row-wise backward kernels, their own source run on the CPU through the emulation in
// shim/ (no GPU needed): sums over rows (bias gradients) and RMSNorm's weight gradient against
// closed forms and the cpu backend's kernels (checked against finite differences in tests/graph),
// RMSNorm's input gradient against the cpu's, both in one pass against the cpu's two (x in f32,
// and in bf16 as a product writes it under autocast), the
// embedding table's gradient (repeated ids added, bad ids skipped) against the plain sum, and the
// negated frequencies RoPE's gradient rotates by.
// Shapes leave partial blocks: column counts not a multiple of 32, row counts not a multiple of
// the row slices or of a block's warps.
#include <gtest/gtest.h>

#include <cmath>

#include "backends/cpu/kernels.h"
#include "backends/cuda/backward_device_kernels.cuh"
#include "cuda_emulation/emulated_values.h"
#include "ops/reference.h"

namespace tfm::cuda {
namespace {

using testing::expect_close;
using testing::random_values;

constexpr float kTol = 1e-5f;

dim3 blocks(int64_t count, int threads) {
  return {static_cast<unsigned>(blocks_for(count, threads)), 1, 1};
}

// column_sum's launches in backward.cu: kColumns x kRowSlices threads per block of columns and
// chunk of rows, then a thread per column over the chunks.
template <typename Term>
void column_sum(Term term, int64_t rows, int64_t n, float* out, bool accumulate = false) {
  std::vector<double> partials(static_cast<size_t>(row_chunks(rows) * n));
  const dim3 grid{static_cast<unsigned>(blocks_for(n, kColumns)),
                  static_cast<unsigned>(row_chunks(rows)), 1};
  cuda_emulation::launch(grid, dim3{kColumns, kRowSlices, 1}, 0,
                         [&] { column_chunk_sum_kernel(term, rows, n, partials.data()); });
  cuda_emulation::launch(blocks(n, kThreads), kThreads, 0, [&] {
    sum_chunks_kernel(partials.data(), row_chunks(rows), n, accumulate, out);
  });
}

TEST(BackwardKernels, ReduceRows) {
  constexpr int64_t n = 70;
  for (const int64_t rows : {2500, 37, 5, 0}) {  // 2500: three chunks of rows, the last partial
    const std::vector<float> x = random_values(static_cast<size_t>(rows * n), 41);
    std::vector<float> want(n), out(n, -7.f);
    for (int64_t j = 0; j < n; ++j) {
      double sum = 0;
      for (int64_t r = 0; r < rows; ++r) sum += x[r * n + j];
      want[j] = static_cast<float>(sum);
    }
    column_sum(Element{x.data(), n}, rows, n, out.data());
    expect_close(out, want, kTol, "rows " + std::to_string(rows));
  }
}

// The launcher's two kernels: 1 / rms per row (a warp per row), then the column sum of
// dy * x * r.
TEST(BackwardKernels, RmsNormGradWeight) {
  constexpr int64_t rows = 37, hidden = 70;
  constexpr float eps = 1e-6f;
  const std::vector<float> x = random_values(static_cast<size_t>(rows * hidden), 42, -2.f, 2.f);
  const std::vector<float> dy = random_values(x.size(), 43);
  std::vector<float> inv_rms(rows, -7.f), dw(hidden, -7.f), want_inv_rms(rows), want_dw(hidden);
  for (int64_t r = 0; r < rows; ++r) {
    double sum_sq = 0;
    for (int64_t i = 0; i < hidden; ++i)
      sum_sq += static_cast<double>(x[r * hidden + i]) * x[r * hidden + i];
    want_inv_rms[r] = static_cast<float>(1.0 / std::sqrt(sum_sq / hidden + eps));
  }
  cpu::rms_norm_grad_weight(x.data(), dy.data(), rows, hidden, eps, want_dw.data());

  cuda_emulation::launch(blocks(rows * 32, kThreads), kThreads, 0, [&] {
    inv_rms_kernel(x.data(), rows, static_cast<int>(hidden), eps, inv_rms.data());
  });
  expect_close(inv_rms, want_inv_rms, kTol, "inv_rms");
  column_sum(NormalizedProduct{x.data(), dy.data(), inv_rms.data(), hidden}, rows, hidden,
             dw.data());
  expect_close(dw, want_dw, kTol, "dw");

  // Added into an accumulator that holds a sum already (graph::fold_accumulations).
  const std::vector<float> start = random_values(static_cast<size_t>(hidden), 44);
  std::vector<float> acc = start, want_acc(hidden);
  for (int64_t i = 0; i < hidden; ++i) want_acc[i] = start[i] + want_dw[i];
  column_sum(NormalizedProduct{x.data(), dy.data(), inv_rms.data(), hidden}, rows, hidden,
             acc.data(), true);
  expect_close(acc, want_acc, kTol, "acc + dw");

  // x as a bf16 product writes it under autocast (q or k before their norms), widened as loaded.
  const std::vector<__nv_bfloat16> narrow_x = testing::to_bf16(x);
  const std::vector<float> x_read = testing::widened(narrow_x);
  cpu::rms_norm_grad_weight(x_read.data(), dy.data(), rows, hidden, eps, want_dw.data());
  cuda_emulation::launch(blocks(rows * 32, kThreads), kThreads, 0, [&] {
    inv_rms_kernel(narrow_x.data(), rows, static_cast<int>(hidden), eps, inv_rms.data());
  });
  column_sum(NormalizedProduct{narrow_x.data(), dy.data(), inv_rms.data(), hidden}, rows, hidden,
             dw.data());
  expect_close(dw, want_dw, kTol, "dw of bf16 x");
}

TEST(BackwardKernels, RmsNormGradInput) {
  constexpr float eps = 1e-5f;
  struct Shape {
    int64_t rows, hidden;
  };
  for (const Shape& shape : {Shape{19, 70}, Shape{3, 300}}) {
    const int64_t rows = shape.rows, hidden = shape.hidden;
    const std::vector<float> x = random_values(static_cast<size_t>(rows * hidden), 44, -2.f, 2.f);
    const std::vector<float> w = random_values(static_cast<size_t>(hidden), 45, 0.5f, 1.5f);
    const std::vector<float> dy = random_values(x.size(), 46);
    std::vector<float> dx(x.size(), -7.f), want(x.size());
    cpu::rms_norm_grad_input(x.data(), w.data(), dy.data(), rows, hidden, eps, want.data());
    cuda_emulation::launch(blocks(rows * 32, kThreads), kThreads, 0, [&] {
      rms_norm_grad_input_kernel(x.data(), w.data(), dy.data(), nullptr, rows,
                                 static_cast<int>(hidden), eps, dx.data());
    });
    expect_close(dx, want, kTol, "rows " + std::to_string(rows));

    // bf16 for a product's operand (graph::fold_casts): each value rounded once from f32.
    std::vector<__nv_bfloat16> narrow(x.size(), __float2bfloat16_rn(-7.f));
    cuda_emulation::launch(blocks(rows * 32, kThreads), kThreads, 0, [&] {
      rms_norm_grad_input_kernel(x.data(), w.data(), dy.data(), nullptr, rows,
                                 static_cast<int>(hidden), eps, narrow.data());
    });
    const std::vector<float> got = testing::widened(narrow);
    for (size_t i = 0; i < want.size(); ++i) {
      ASSERT_NEAR(got[i], want[i], std::fabs(want[i]) / 256 + kTol) << "bf16 dx at " << i;
    }

    // With the residual stream's gradient added as it is written
    // (graph::fold_residuals_into_norm_grads).
    const std::vector<float> residual = random_values(x.size(), 47);
    std::vector<float> summed(x.size(), -7.f), want_summed = want;
    for (size_t i = 0; i < want_summed.size(); ++i) want_summed[i] += residual[i];
    cuda_emulation::launch(blocks(rows * 32, kThreads), kThreads, 0, [&] {
      rms_norm_grad_input_kernel(x.data(), w.data(), dy.data(), residual.data(), rows,
                                 static_cast<int>(hidden), eps, summed.data());
    });
    expect_close(summed, want_summed, kTol, "with residual, rows " + std::to_string(rows));

    // x as a bf16 product writes it under autocast, widened as it is loaded.
    const std::vector<__nv_bfloat16> narrow_x = testing::to_bf16(x);
    const std::vector<float> x_read = testing::widened(narrow_x);
    cpu::rms_norm_grad_input(x_read.data(), w.data(), dy.data(), rows, hidden, eps, want.data());
    cuda_emulation::launch(blocks(rows * 32, kThreads), kThreads, 0, [&] {
      rms_norm_grad_input_kernel(narrow_x.data(), w.data(), dy.data(), nullptr, rows,
                                 static_cast<int>(hidden), eps, dx.data());
    });
    expect_close(dx, want, kTol, "bf16 x, rows " + std::to_string(rows));
  }
}

// The fused kernel's launch in backward.cu (a block per chunk of rows, then the chunks' sums
// added into the accumulator), with chunks of `chunk_rows` rows: fewer blocks than the
// launcher's chunks would make of rows enough for a warp to take several.
template <int kLaneColumns, typename Out, typename X, typename DY>
void rms_norm_grads(const std::vector<X>& x, const std::vector<float>& w, const std::vector<DY>& dy,
                    const float* residual, int64_t rows, int64_t hidden, int64_t chunk_rows,
                    float eps, Out* dx, std::vector<float>& acc, const RopeRows& rope = {},
                    __nv_bfloat16* copy = nullptr) {
  const int64_t chunks = (rows + chunk_rows - 1) / chunk_rows;
  std::vector<double> chunk_sums(static_cast<size_t>(chunks * hidden), -7.0);
  cuda_emulation::launch(blocks(chunks, 1), kThreads, 0, [&] {
    rms_norm_grads_kernel<kLaneColumns, Out, X, DY>(x.data(), w.data(), dy.data(), residual, rows,
                                                    static_cast<int>(hidden), eps, chunk_rows, dx,
                                                    chunk_sums.data(), rope, copy);
  });
  cuda_emulation::launch(blocks(hidden, kThreads), kThreads, 0, [&] {
    sum_chunks_kernel(chunk_sums.data(), chunks, hidden, true, acc.data());
  });
}

// The launcher's chunks: whole warps of rows, about kNormGradChunks of them.
TEST(BackwardKernels, NormGradChunks) {
  static_assert(kNormGradWarps == 8 && kNormGradChunks == 256);
  EXPECT_EQ(norm_grad_chunk_rows(8192), 32);  // a batch of 8 x 1024 tokens
  EXPECT_EQ(norm_grad_chunks(8192), 256);
  EXPECT_EQ(norm_grad_chunk_rows(8192 * 16), 512);  // a row per head
  EXPECT_EQ(norm_grad_chunks(8192 * 16), 256);
  EXPECT_EQ(norm_grad_chunk_rows(2500), 16);  // 10 rows a chunk, rounded up to whole warps
  EXPECT_EQ(norm_grad_chunks(2500), 157);
  EXPECT_EQ(norm_grad_chunk_rows(5), 8);
  EXPECT_EQ(norm_grad_chunks(5), 1);
  EXPECT_EQ(norm_grad_chunks(0), 1);  // one chunk of zeros
}

// Both gradients in one pass (graph::fold_norm_weight_grads) against the cpu's two kernels: dx
// in f32 and in bf16, with and without the residual added, f32 with its bf16 copy, and the
// weight gradient added into an accumulator. Rows of fewer values than the lanes' registers hold,
// chunks of one row a warp and of several, the last chunk partial.
template <int kLaneColumns>
void check_rms_norm_grads(int64_t rows, int64_t hidden, int64_t chunk_rows) {
  SCOPED_TRACE("rows " + std::to_string(rows) + ", hidden " + std::to_string(hidden) +
               ", chunks of " + std::to_string(chunk_rows));
  constexpr float eps = 1e-6f;
  const std::vector<float> x = random_values(static_cast<size_t>(rows * hidden), 51, -2.f, 2.f);
  const std::vector<float> w = random_values(static_cast<size_t>(hidden), 52, 0.5f, 1.5f);
  const std::vector<float> dy = random_values(x.size(), 53);
  const std::vector<float> residual = random_values(x.size(), 54);
  const std::vector<float> start = random_values(static_cast<size_t>(hidden), 55);
  std::vector<float> want_dx(x.size()), want_acc = start;
  cpu::rms_norm_grad_input(x.data(), w.data(), dy.data(), rows, hidden, eps, want_dx.data());
  cpu::rms_norm_grad_weight(x.data(), dy.data(), rows, hidden, eps, want_acc.data(), true);

  std::vector<float> dx(x.size(), -7.f), acc = start;
  rms_norm_grads<kLaneColumns>(x, w, dy, nullptr, rows, hidden, chunk_rows, eps, dx.data(), acc);
  expect_close(dx, want_dx, kTol, "dx");
  expect_close(acc, want_acc, kTol, "acc + dw");

  // With its bf16 copy (graph::fold_narrow_copies): each f32 dx plus residual, rounded once.
  std::vector<float> summed(x.size(), -7.f);
  std::vector<__nv_bfloat16> copy(x.size(), __float2bfloat16_rn(-7.f));
  acc = start;
  rms_norm_grads<kLaneColumns>(x, w, dy, residual.data(), rows, hidden, chunk_rows, eps,
                               summed.data(), acc, RopeRows{}, copy.data());
  for (size_t i = 0; i < summed.size(); ++i) {
    ASSERT_NEAR(summed[i], want_dx[i] + residual[i], kTol) << "dx + residual at " << i;
  }
  EXPECT_EQ(testing::widened(copy), testing::widened(testing::to_bf16(summed))) << "bf16 copy";

  std::vector<__nv_bfloat16> narrow(x.size(), __float2bfloat16_rn(-7.f));
  acc = start;
  rms_norm_grads<kLaneColumns>(x, w, dy, residual.data(), rows, hidden, chunk_rows, eps,
                               narrow.data(), acc);
  const std::vector<float> got = testing::widened(narrow);
  for (size_t i = 0; i < got.size(); ++i) {
    const float want = want_dx[i] + residual[i];
    ASSERT_NEAR(got[i], want, std::fabs(want) / 256 + kTol) << "bf16 dx + residual at " << i;
  }
  expect_close(acc, want_acc, kTol, "acc + dw, bf16 dx");
}

// With dy rotated back by RoPE as it is loaded (graph::fuse_rope_grads_into_norm_grads), against
// the cpu's rope_grad and then its two norm kernels: heads of 128 (a lane holds columns c and
// c + 2 of each pair), 3 heads a token; x in f32, and in bf16 as q's or k's product writes it
// under autocast (widened as it is loaded), dy in f32 and in bf16.
TEST(BackwardKernels, RmsNormGradsOfRopesGradient) {
  constexpr int64_t tokens = 7, heads = 3, hidden = 128, rows = tokens * heads;
  constexpr float eps = 1e-6f, scaling = 1.1f;
  const std::vector<int32_t> positions = {0, 1, 2, 40, 41, 900, 3};
  std::vector<float> inv_freq(hidden / 2);
  for (int64_t f = 0; f < hidden / 2; ++f) {
    inv_freq[f] = static_cast<float>(std::pow(10000.0, -2.0 * static_cast<double>(f) / hidden));
  }
  const std::vector<float> random_x =
      random_values(static_cast<size_t>(rows * hidden), 56, -2.f, 2.f);
  const std::vector<float> w = random_values(static_cast<size_t>(hidden), 57, 0.5f, 1.5f);
  const std::vector<float> dy = random_values(random_x.size(), 58);
  const std::vector<float> start = random_values(static_cast<size_t>(hidden), 59);
  const auto check = [&](const auto& x, const auto& dy_stored, const std::string& what) {
    const std::vector<float> x_read = testing::widened(x);
    std::vector<float> rotated(dy.size());
    cpu::rope_grad(testing::widened(dy_stored).data(), positions.data(), inv_freq.data(), 1, tokens,
                   heads, hidden, scaling, rotated.data());
    std::vector<float> want_dx(dy.size()), want_acc = start;
    cpu::rms_norm_grad_input(x_read.data(), w.data(), rotated.data(), rows, hidden, eps,
                             want_dx.data());
    cpu::rms_norm_grad_weight(x_read.data(), rotated.data(), rows, hidden, eps, want_acc.data(),
                              true);
    std::vector<float> dx(dy.size(), -7.f), acc = start;
    rms_norm_grads<4>(x, w, dy_stored, nullptr, rows, hidden, 16, eps, dx.data(), acc,
                      RopeRows{positions.data(), inv_freq.data(), 1, tokens, heads, scaling});
    expect_close(dx, want_dx, kTol, what + " dx");
    expect_close(acc, want_acc, kTol, what + " acc + dw");
  };
  check(random_x, dy, "f32 x");
  check(testing::to_bf16(random_x), dy, "bf16 x");
  // And dy in bf16, as attention's gradients are under autocast.
  check(testing::to_bf16(random_x), testing::to_bf16(dy), "bf16 x and dy");
}

TEST(BackwardKernels, RmsNormGrads) {
  check_rms_norm_grads<4>(37, 70, 8);
  check_rms_norm_grads<4>(100, 128, 24);
  check_rms_norm_grads<16>(19, 300, 16);
  check_rms_norm_grads<32>(11, 1024, 8);
}

// dy's rows added into the table by id in token order; ids repeat, and ids outside the vocabulary
// (checked on the host) are skipped. The launcher zeroes the table first.
TEST(BackwardKernels, EmbeddingGrad) {
  constexpr int64_t vocab = 11, hidden = 300;
  const std::vector<int32_t> ids = {3, 7, 3, 0, 10, -1, 7, 7, 2, 11, 3, 5, 0};
  const auto count = static_cast<int64_t>(ids.size());
  const std::vector<float> dy = random_values(static_cast<size_t>(count * hidden), 47);
  std::vector<float> d_table(static_cast<size_t>(vocab * hidden), 0.f), want(d_table.size());
  std::vector<double> sums(want.size(), 0.0);
  for (int64_t i = 0; i < count; ++i) {
    if (ids[i] < 0 || ids[i] >= vocab) continue;
    for (int64_t h = 0; h < hidden; ++h) sums[ids[i] * hidden + h] += dy[i * hidden + h];
  }
  for (size_t i = 0; i < want.size(); ++i) want[i] = static_cast<float>(sums[i]);
  cuda_emulation::launch(blocks(hidden, kThreads), kThreads, 0, [&] {
    embedding_grad_kernel(dy.data(), ids.data(), count, vocab, hidden, d_table.data());
  });
  expect_close(d_table, want, kTol);
}

// rope_grad rotates dy by the forward RoPE with negated frequencies (pointwise.cu's kernel): the
// negation here, and that rotation (by the reference) matching the cpu's rope_grad.
TEST(BackwardKernels, NegatedFrequenciesForRopeGrad) {
  constexpr int64_t batch = 2, seq = 3, heads = 2, head_dim = 520, half = head_dim / 2;
  constexpr float scaling = 1.25f;
  std::vector<float> inv_freq(half);
  for (int64_t i = 0; i < half; ++i) inv_freq[i] = std::pow(10000.f, -2.f * i / head_dim);
  std::vector<float> negated(half, 7.f), want_negated(half);
  for (int64_t i = 0; i < half; ++i) want_negated[i] = -inv_freq[i];
  cuda_emulation::launch(blocks(half, kThreads), kThreads, 0,
                         [&] { negate_kernel(inv_freq.data(), half, negated.data()); });
  expect_close(negated, want_negated, 0.f, "negated");

  const std::vector<float> dy =
      random_values(static_cast<size_t>(batch * seq * heads * head_dim), 48);
  const std::vector<int32_t> positions = {0, 5, 9, 2, 3, 4};
  std::vector<float> dx(dy.size()), want(dy.size());
  ops::reference::rope(dy.data(), positions.data(), negated.data(), batch, seq, heads, head_dim,
                       scaling, dx.data());
  cpu::rope_grad(dy.data(), positions.data(), inv_freq.data(), batch, seq, heads, head_dim, scaling,
                 want.data());
  expect_close(dx, want, kTol, "rope_grad");
}

}  // namespace
}  // namespace tfm::cuda
