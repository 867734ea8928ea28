// The CUDA decode GEMV kernels, their own source run on the CPU through the emulation in shim/
// (no GPU needed), against the scalar references in src/ops: q, k and v's products in one launch,
// the gated (SiLU) product, and the plain product with bias and residual; with and without the
// layer's input RMSNorm applied inside the product; the vectorized kernels (k % 8 == 0), each
// column read by 1 to 8 warps, and the any-k ones. Kernels read their first weights before or
// after the wait on the kernel before (both, across the tests: the same here, with no kernel
// before).
#include "backends/cuda/gemv_kernels.cuh"

#include <gtest/gtest.h>

#include <cmath>

#include "cuda_emulation/emulated_values.h"
#include "ops/reference.h"

namespace tfm::cuda {
namespace {

using testing::expect_close;
using testing::random_values;
using testing::to_bf16;
using testing::widened;

constexpr float kEps = 1e-6f;

dim3 grid_for(int64_t columns, int slices = 1) {
  return {static_cast<unsigned>(gemv_blocks(columns, slices)), 1, 1};
}

// Each column read by 1, 2, 4 and 8 warps (slices of k).
constexpr int kSlices[] = {1, 2, 4, 8};

// x's rows, RMS-normed by g when asked: what the products read.
std::vector<float> product_input(const std::vector<float>& x, const std::vector<float>& g, int m,
                                 int k, bool norm) {
  std::vector<float> h = x;
  if (norm) ops::reference::rms_norm(x.data(), g.data(), m, k, kEps, h.data());
  return h;
}

template <int M, bool kNorm>
void check_qkv(int k, int nq, int nkv, bool biases, std::initializer_list<int> slice_counts) {
  const std::vector<float> x = random_values(static_cast<size_t>(M * k), 1);
  const std::vector<float> g = random_values(static_cast<size_t>(k), 2, 0.5f, 1.5f);
  const int64_t n[3] = {nq, nkv, nkv};
  std::vector<std::vector<__nv_bfloat16>> w;
  std::vector<std::vector<float>> bias, y(3), want(3);
  const std::vector<float> h = product_input(x, g, M, k, kNorm);
  for (size_t i = 0; i < 3; ++i) {
    w.push_back(to_bf16(random_values(static_cast<size_t>(n[i] * k), 3 + i)));
    bias.push_back(random_values(static_cast<size_t>(n[i]), 6 + i));
    y[i].assign(static_cast<size_t>(M * n[i]), -7.f);
    want[i].resize(y[i].size());
    ops::reference::linear(h.data(), widened(w[i]).data(), biases ? bias[i].data() : nullptr, M,
                           n[i], k, want[i].data());
  }
  const auto b = [&](size_t i) { return biases ? bias[i].data() : nullptr; };
  const QkvProducts p{{w[0].data(), w[1].data(), w[2].data()},
                      {b(0), b(1), b(2)},
                      {n[0], n[1], n[2]},
                      {y[0].data(), y[1].data(), y[2].data()}};
  const NormedRows<kNorm> norm{kNorm ? g.data() : nullptr, kEps};
  for (const int slices : slice_counts) {
    for (auto& out : y) std::fill(out.begin(), out.end(), -7.f);
    cuda_emulation::launch(grid_for(nq + 2 * nkv, slices), kWarps * 32, 0, [&] {
      qkv_gemv_kernel<__nv_bfloat16, M, kNorm>(x.data(), norm, p, k, slices, true);
    });
    for (size_t i = 0; i < 3; ++i) {
      expect_close(y[i], want[i], 1e-5f,
                   "product " + std::to_string(i) + ", slices " + std::to_string(slices));
    }
  }
}

TEST(GemvKernels, QkvProducts) {
  check_qkv<1, true>(64, 64, 32, true, {1, 2, 4, 8});
  check_qkv<3, false>(512, 128, 64, false, {1, 2});
  check_qkv<8, true>(1024, 64, 32, true, {4});
}

// silu(h wg^T + bg) * (h wu^T + bu), by the vectorized kernel (M rows) and the any-k one.
template <int M, bool kNorm>
void check_gated(int k, int n, bool biases) {
  const std::vector<float> x = random_values(static_cast<size_t>(M * k), 11);
  const std::vector<float> g = random_values(static_cast<size_t>(k), 12, 0.5f, 1.5f);
  const std::vector<__nv_bfloat16> wg = to_bf16(random_values(static_cast<size_t>(n * k), 13));
  const std::vector<__nv_bfloat16> wu = to_bf16(random_values(static_cast<size_t>(n * k), 14));
  const std::vector<float> bg = random_values(static_cast<size_t>(n), 15);
  const std::vector<float> bu = random_values(static_cast<size_t>(n), 16);
  const std::vector<float> h = product_input(x, g, M, k, kNorm);
  std::vector<float> gate(static_cast<size_t>(M * n)), up(gate.size()), want(gate.size());
  ops::reference::linear(h.data(), widened(wg).data(), biases ? bg.data() : nullptr, M, n, k,
                         gate.data());
  ops::reference::linear(h.data(), widened(wu).data(), biases ? bu.data() : nullptr, M, n, k,
                         up.data());
  for (size_t i = 0; i < want.size(); ++i) want[i] = gate[i] / (1.f + std::exp(-gate[i])) * up[i];
  const float* bias_g = biases ? bg.data() : nullptr;
  const float* bias_u = biases ? bu.data() : nullptr;

  std::vector<float> y(want.size());
  const NormedRows<kNorm> norm{kNorm ? g.data() : nullptr, kEps};
  for (const int slices : kSlices) {
    std::fill(y.begin(), y.end(), -7.f);
    cuda_emulation::launch(grid_for(n, slices), kWarps * 32, 0, [&] {
      gated_gemv_kernel<__nv_bfloat16, M, kNorm>(x.data(), wg.data(), wu.data(), norm, bias_g,
                                                 bias_u, n, k, slices, y.data(), true);
    });
    expect_close(y, want, 1e-5f, "vectorized, slices " + std::to_string(slices));
  }

  std::fill(y.begin(), y.end(), -7.f);
  const InputNorm any_norm{kNorm ? g.data() : nullptr, kEps};
  cuda_emulation::launch(grid_for(n), kWarps * 32, 0, [&] {
    gated_gemv_any_kernel<__nv_bfloat16>(x.data(), wg.data(), wu.data(), any_norm, bias_g, bias_u,
                                         M, n, k, y.data());
  });
  expect_close(y, want, 1e-5f, "any k");
}

TEST(GemvKernels, GatedProduct) {
  check_gated<1, true>(64, 40, true);
  check_gated<4, false>(512, 24, false);
  check_gated<2, true>(256, 9, false);
  check_gated<2, true>(2048, 16, true);  // 8 steps a lane at one warp a column: 4 past the early
}

// (x w^T + bias) + residual, f32 weights, by the vectorized kernel (k = 2048: every one of 8 slices
// reads some) and the any-k one (k = 250).
TEST(GemvKernels, ProductWithBiasAndResidual) {
  constexpr int m = 2, n = 33;
  for (const int k : {2048, 250}) {
    const std::vector<float> x = random_values(static_cast<size_t>(m * k), 21);
    const std::vector<float> w = random_values(static_cast<size_t>(n * k), 22);
    const std::vector<float> bias = random_values(n, 23), residual = random_values(m * n, 24);
    std::vector<float> want(static_cast<size_t>(m * n)), y(want.size());
    ops::reference::linear(x.data(), w.data(), bias.data(), m, n, k, want.data());
    for (size_t i = 0; i < want.size(); ++i) want[i] += residual[i];
    for (const int slices : kSlices) {
      if (k % 8 != 0 && slices > 1) break;  // the any-k kernel reads a column with one warp
      std::fill(y.begin(), y.end(), -7.f);
      cuda_emulation::launch(grid_for(n, slices), kWarps * 32, 0, [&] {
        if (k % 8 == 0) {
          gemv_kernel<float, m, false>(x.data(), w.data(), NormedRows<false>{nullptr, 0.f},
                                       bias.data(), residual.data(), n, k, slices, y.data(), false);
        } else {
          gemv_any_kernel<float>(x.data(), w.data(), InputNorm{}, bias.data(), residual.data(), m,
                                 n, k, y.data());
        }
      });
      expect_close(y, want, 1e-5f, "k " + std::to_string(k) + ", slices " + std::to_string(slices));
    }
  }
}

}  // namespace
}  // namespace tfm::cuda
