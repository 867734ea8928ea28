// The CUDA tensor-core products of 9 to 16 rows, their own source run on the CPU through the
// emulation in shim/ (mma.sync included), against the scalar reference in src/ops: the plain
// product with bias and residual, q, k and v's products in one launch, and the gated (SiLU)
// product, each tile read by 1 to 8 warps, with and without the input RMSNorm. The kernels read x's
// m f32 rows (AddressSanitizer sees a read past them) and round them, normed or not, to bf16.
// They read their first weights before or after the wait on the kernel before (both, across the
// tests: the same here, with no kernel before).
#include "backends/cuda/skinny_product_kernels.cuh"

#include <gtest/gtest.h>

#include <cmath>

#include "cuda_emulation/emulated_values.h"
#include "ops/reference.h"

namespace tfm::cuda {
namespace {

using testing::aligned_bf16;
using testing::expect_close;
using testing::random_values;
using testing::to_bf16;
using testing::widened;
using Bf16s = std::vector<__nv_bfloat16, testing::Aligned32<__nv_bfloat16>>;

constexpr int kSlices[] = {1, 2, 4, 8};

constexpr float kEps = 1e-6f;

// x's rows as the tiles read them: RMS-normed by g when asked, rounded to bf16.
std::vector<float> rows_read(const std::vector<float>& x, const std::vector<float>& g, int m, int k,
                             bool norm) {
  std::vector<float> h = x;
  if (norm) ops::reference::rms_norm(x.data(), g.data(), m, k, kEps, h.data());
  return widened(to_bf16(h));
}

std::vector<float> reference_product(const std::vector<float>& x, const Bf16s& w, const float* bias,
                                     int m, int n, int k) {
  std::vector<float> y(static_cast<size_t>(m * n));
  ops::reference::linear(x.data(), widened(std::vector<__nv_bfloat16>(w.begin(), w.end())).data(),
                         bias, m, n, k, y.data());
  return y;
}

dim3 grid_for(int64_t columns, int slices) {
  return {static_cast<unsigned>(skinny_blocks(columns / kTile, slices)), 1, 1};
}

// Values after `offset` floats of padding: at 1, not 16-byte aligned where the vector's data is.
std::vector<float> after_padding(const std::vector<float>& values, int offset) {
  std::vector<float> padded(static_cast<size_t>(offset), 0.f);
  padded.insert(padded.end(), values.begin(), values.end());
  return padded;
}

// x and g start `offset` floats into their buffers.
template <bool kNorm>
void check_product(int m, int offset = 0) {
  constexpr int n = 48, k = 256;
  const std::vector<float> x = random_values(static_cast<size_t>(m * k), 1, -2.f, 2.f);
  const std::vector<float> g = random_values(k, 2, 0.5f, 1.5f);
  const std::vector<float> x_at = after_padding(x, offset), g_at = after_padding(g, offset);
  const Bf16s w = aligned_bf16(random_values(static_cast<size_t>(n * k), 3));
  const std::vector<float> bias = random_values(n, 4), residual = random_values(m * n, 5);
  std::vector<float> want =
      reference_product(rows_read(x, g, m, k, kNorm), w, bias.data(), m, n, k);
  for (size_t i = 0; i < want.size(); ++i) want[i] += residual[i];
  const SkinnyRows<kNorm> rows{x_at.data() + offset, m, k, kNorm ? g_at.data() + offset : nullptr,
                               kEps};
  for (const int slices : kSlices) {
    std::vector<float> y(want.size(), -7.f);
    cuda_emulation::launch(grid_for(n, slices), kSkinnyWarps * 32, skinny_shared_bytes(1, k), [&] {
      skinny_linear_kernel<kNorm>(rows, w.data(), bias.data(), residual.data(), n, slices, y.data(),
                                  true);
    });
    expect_close(y, want, 1e-5f,
                 "m " + std::to_string(m) + ", offset " + std::to_string(offset) + ", slices " +
                     std::to_string(slices));
  }
}

TEST(SkinnyProductKernels, ProductWithBiasAndResidual) {
  check_product<false>(9);
  check_product<true>(16);
}

TEST(SkinnyProductKernels, RowsNotSixteenByteAligned) {
  check_product<false>(10, 1);
  check_product<true>(13, 3);
}

TEST(SkinnyProductKernels, QkvProductsOfNormedRows) {
  constexpr int m = 11, k = 128;
  const int64_t n[3] = {64, 32, 32};
  const std::vector<float> x = random_values(static_cast<size_t>(m * k), 6, -2.f, 2.f);
  const std::vector<float> g = random_values(k, 7, 0.5f, 1.5f);
  const std::vector<float> h = rows_read(x, g, m, k, true);
  std::vector<Bf16s> w;
  std::vector<std::vector<float>> bias, want;
  for (size_t i = 0; i < 3; ++i) {
    w.push_back(aligned_bf16(random_values(static_cast<size_t>(n[i] * k), 8 + i)));
    bias.push_back(random_values(static_cast<size_t>(n[i]), 11 + i));
    want.push_back(reference_product(h, w[i], bias[i].data(), m, static_cast<int>(n[i]), k));
  }
  const SkinnyRows<true> rows{x.data(), m, k, g.data(), kEps};
  for (const int slices : kSlices) {
    std::vector<std::vector<float>> y;
    for (size_t i = 0; i < 3; ++i) y.emplace_back(want[i].size(), -7.f);
    const QkvProducts p{{w[0].data(), w[1].data(), w[2].data()},
                        {bias[0].data(), bias[1].data(), bias[2].data()},
                        {n[0], n[1], n[2]},
                        {y[0].data(), y[1].data(), y[2].data()}};
    cuda_emulation::launch(grid_for(n[0] + n[1] + n[2], slices), kSkinnyWarps * 32,
                           skinny_shared_bytes(1, k),
                           [&] { skinny_qkv_kernel(rows, p, slices, false); });
    for (size_t i = 0; i < 3; ++i) {
      expect_close(y[i], want[i], 1e-5f,
                   "product " + std::to_string(i) + ", slices " + std::to_string(slices));
    }
  }
}

TEST(SkinnyProductKernels, GatedProduct) {
  // k = 1088: 34 chunks of 32, so the last group of each slice is partly empty. The f32 sums of
  // 1088 products of up to 1 in another order than the reference's differ by up to ~1e-4.
  constexpr int m = 14, n = 32, k = 1088;
  const std::vector<float> x = random_values(static_cast<size_t>(m * k), 14);
  const std::vector<float> h = rows_read(x, {}, m, k, false);
  const Bf16s wg = aligned_bf16(random_values(static_cast<size_t>(n * k), 15));
  const Bf16s wu = aligned_bf16(random_values(static_cast<size_t>(n * k), 16));
  const std::vector<float> bg = random_values(n, 17), bu = random_values(n, 18);
  const std::vector<float> gate = reference_product(h, wg, bg.data(), m, n, k);
  const std::vector<float> up = reference_product(h, wu, bu.data(), m, n, k);
  std::vector<float> want(gate.size());
  for (size_t i = 0; i < want.size(); ++i) want[i] = gate[i] / (1.f + std::exp(-gate[i])) * up[i];
  const SkinnyRows<false> rows{x.data(), m, k, nullptr, 0.f};
  for (const int slices : kSlices) {
    std::vector<float> y(want.size(), -7.f);
    cuda_emulation::launch(grid_for(n, slices), kSkinnyWarps * 32, skinny_shared_bytes(2, k), [&] {
      skinny_gated_kernel(rows, wg.data(), wu.data(), bg.data(), bu.data(), n, slices, y.data(),
                          true);
    });
    expect_close(y, want, 1e-4f, "slices " + std::to_string(slices));
  }
}

}  // namespace
}  // namespace tfm::cuda
