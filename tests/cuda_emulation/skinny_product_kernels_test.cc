// The CUDA tensor-core products of 9 to 16 rows, their own source run on the CPU through the
// emulation in shim/ (WMMA included), against the scalar reference in src/ops: the plain product
// with bias and residual, q, k and v's products in one launch, and the gated (SiLU) product, each
// tile read by 1 to 8 warps. x's buffer holds 16 rows; those past m hold NaN, which must not reach
// any output.
#include "backends/cuda/skinny_product_kernels.cuh"

#include <gtest/gtest.h>

#include <cmath>
#include <limits>

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

// m rows of bf16 values in a buffer of 16 rows, the rest NaN; `rows` gets the m rows as read.
Bf16s padded_rows(int m, int k, uint64_t seed, std::vector<float>& rows) {
  rows = widened(to_bf16(random_values(static_cast<size_t>(m * k), seed)));
  std::vector<float> all(static_cast<size_t>(kSkinnyMaxRows * k),
                         std::numeric_limits<float>::quiet_NaN());
  std::copy(rows.begin(), rows.end(), all.begin());
  return aligned_bf16(all);
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

TEST(SkinnyProductKernels, ProductWithBiasAndResidual) {
  for (const int m : {9, 16}) {
    constexpr int n = 48, k = 256;
    std::vector<float> x;
    const Bf16s x_rows = padded_rows(m, k, 1, x);
    const Bf16s w = aligned_bf16(random_values(static_cast<size_t>(n * k), 2));
    const std::vector<float> bias = random_values(n, 3), residual = random_values(m * n, 4);
    std::vector<float> want = reference_product(x, w, bias.data(), m, n, k);
    for (size_t i = 0; i < want.size(); ++i) want[i] += residual[i];
    for (const int slices : kSlices) {
      std::vector<float> y(want.size(), -7.f);
      cuda_emulation::launch(grid_for(n, slices), kSkinnyWarps * 32, skinny_shared_bytes(1), [&] {
        skinny_linear_kernel(x_rows.data(), w.data(), bias.data(), residual.data(), m, n, k, slices,
                             y.data());
      });
      expect_close(y, want, 1e-5f, "m " + std::to_string(m) + ", slices " + std::to_string(slices));
    }
  }
}

TEST(SkinnyProductKernels, QkvProducts) {
  constexpr int m = 11, k = 128;
  const int64_t n[3] = {64, 32, 32};
  std::vector<float> x;
  const Bf16s x_rows = padded_rows(m, k, 5, x);
  std::vector<Bf16s> w;
  std::vector<std::vector<float>> bias, want;
  for (size_t i = 0; i < 3; ++i) {
    w.push_back(aligned_bf16(random_values(static_cast<size_t>(n[i] * k), 6 + i)));
    bias.push_back(random_values(static_cast<size_t>(n[i]), 9 + i));
    want.push_back(reference_product(x, w[i], bias[i].data(), m, static_cast<int>(n[i]), k));
  }
  for (const int slices : kSlices) {
    std::vector<std::vector<float>> y;
    for (size_t i = 0; i < 3; ++i) y.emplace_back(want[i].size(), -7.f);
    const QkvProducts p{{w[0].data(), w[1].data(), w[2].data()},
                        {bias[0].data(), bias[1].data(), bias[2].data()},
                        {n[0], n[1], n[2]},
                        {y[0].data(), y[1].data(), y[2].data()}};
    cuda_emulation::launch(grid_for(n[0] + n[1] + n[2], slices), kSkinnyWarps * 32,
                           skinny_shared_bytes(1),
                           [&] { skinny_qkv_kernel(x_rows.data(), p, m, k, slices); });
    for (size_t i = 0; i < 3; ++i) {
      expect_close(y[i], want[i], 1e-5f,
                   "product " + std::to_string(i) + ", slices " + std::to_string(slices));
    }
  }
}

TEST(SkinnyProductKernels, GatedProduct) {
  constexpr int m = 14, n = 32, k = 512;
  std::vector<float> x;
  const Bf16s x_rows = padded_rows(m, k, 12, x);
  const Bf16s wg = aligned_bf16(random_values(static_cast<size_t>(n * k), 13));
  const Bf16s wu = aligned_bf16(random_values(static_cast<size_t>(n * k), 14));
  const std::vector<float> bg = random_values(n, 15), bu = random_values(n, 16);
  const std::vector<float> gate = reference_product(x, wg, bg.data(), m, n, k);
  const std::vector<float> up = reference_product(x, wu, bu.data(), m, n, k);
  std::vector<float> want(gate.size());
  for (size_t i = 0; i < want.size(); ++i) want[i] = gate[i] / (1.f + std::exp(-gate[i])) * up[i];
  for (const int slices : kSlices) {
    std::vector<float> y(want.size(), -7.f);
    cuda_emulation::launch(grid_for(n, slices), kSkinnyWarps * 32, skinny_shared_bytes(2), [&] {
      skinny_gated_kernel(x_rows.data(), wg.data(), wu.data(), bg.data(), bu.data(), m, n, k,
                          slices, y.data());
    });
    expect_close(y, want, 1e-5f, "slices " + std::to_string(slices));
  }
}

}  // namespace
}  // namespace tfm::cuda
