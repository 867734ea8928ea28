// The CUDA optimizer kernels, their own source run on the CPU through the emulation in shim/ (no
// GPU needed), launched as optimizer.cu launches them: AdamW's update against ops::adamw_update
// applied element by element (with and without weight decay, over several steps), the gradient
// scaling, and the gradient norm's sum of squares (chunk partials, then their sum) against a
// plain double sum. The launchers cap the grid at kMaxBlocks, so their grid-stride loops are also
// run with fewer blocks than elements need, as a tensor of over 16M elements would.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>

#include "backends/cuda/optimizer_device_kernels.cuh"
#include "cuda_emulation/emulated_values.h"

namespace tfm::cuda {
namespace {

using testing::expect_close;
using testing::random_values;

// optimizer.cu's grid for n elements.
dim3 grid_for(int64_t n) {
  return {static_cast<unsigned>(std::min<int64_t>(blocks_for(n, kThreads), kMaxBlocks)), 1, 1};
}

// torch.optim.AdamW's scalars for a step, as training::AdamW forms them.
ops::AdamWScalars scalars_for(int step, double lr) {
  const double beta1 = 0.9, beta2 = 0.999, eps = 1e-8, weight_decay = 0.1;
  const double bias_correction1 = 1 - std::pow(beta1, step);
  const double bias_correction2 = 1 - std::pow(beta2, step);
  const float avg_weight = static_cast<float>(1 - beta1);
  const bool small_weight = std::abs(avg_weight) < 0.5f;
  return {.decay = static_cast<float>(1 - lr * weight_decay),
          .lerp_coeff = small_weight ? avg_weight : avg_weight - 1.0f,
          .small_weight = small_weight,
          .beta2 = static_cast<float>(beta2),
          .sq_weight = static_cast<float>(1 - beta2),
          .bias_correction2_sqrt = static_cast<float>(std::sqrt(bias_correction2)),
          .eps = static_cast<float>(eps),
          .neg_step_size = static_cast<float>(-(lr / bias_correction1))};
}

void check_adamw(int64_t n, dim3 grid, bool decays) {
  std::vector<float> p = random_values(static_cast<size_t>(n), 41);
  std::vector<float> m(p.size(), 0.f), v(p.size(), 0.f);
  std::vector<float> want_p = p, want_m = m, want_v = v;
  for (int step = 1; step <= 3; ++step) {
    const std::vector<float> g = random_values(p.size(), 41 + static_cast<uint64_t>(step));
    const ops::AdamWScalars s = scalars_for(step, 1e-2);
    const float decay = decays ? s.decay : 1.f;
    cuda_emulation::launch(grid, kThreads, 0, [&] {
      adamw_kernel(s, decay, p.data(), g.data(), m.data(), v.data(), n);
    });
    for (size_t i = 0; i < p.size(); ++i) {
      ops::adamw_update(s, decay, want_p[i], g[i], want_m[i], want_v[i]);
    }
    const std::string at = "step " + std::to_string(step) + " of " + std::to_string(n);
    expect_close(p, want_p, 1e-5f, "p, " + at);
    expect_close(m, want_m, 1e-5f, "m, " + at);
    expect_close(v, want_v, 1e-5f, "v, " + at);
  }
}

TEST(OptimizerKernels, AdamW) {
  check_adamw(1000, grid_for(1000), true);  // 4 blocks, the last partly idle
  check_adamw(1000, grid_for(1000), false);
  check_adamw(1917, {3, 1, 1}, true);  // each thread strides over 2 or 3 elements
}

void check_scale(int64_t n, dim3 grid) {
  const std::vector<float> x0 = random_values(static_cast<size_t>(n), 51);
  const float factor = 0.37f;
  std::vector<float> x = x0;
  cuda_emulation::launch(grid, kThreads, 0, [&] { scale_kernel(x.data(), factor, n); });
  std::vector<float> want(x0.size());
  for (size_t i = 0; i < want.size(); ++i) want[i] = x0[i] * factor;
  expect_close(x, want, 0.f, "scale of " + std::to_string(n));
}

TEST(OptimizerKernels, Scale) {
  check_scale(1000, grid_for(1000));
  check_scale(1917, {3, 1, 1});
}

TEST(OptimizerKernels, SumSquares) {
  for (const int64_t n : {2 * kChunkElements + 1234, int64_t{300}, kChunkElements}) {
    const std::vector<float> x = random_values(static_cast<size_t>(n), 61, -3.f, 3.f);
    const int64_t chunks = (n + kChunkElements - 1) / kChunkElements;
    std::vector<double> partial(static_cast<size_t>(chunks + 1), -7.0);
    cuda_emulation::launch({static_cast<unsigned>(chunks), 1, 1}, kThreads, 0,
                           [&] { chunk_squares_kernel(x.data(), n, partial.data()); });
    cuda_emulation::launch({1, 1, 1}, kThreads, 0, [&] {
      sum_partials_kernel(partial.data(), chunks, partial.data() + chunks);
    });
    double total = 0;
    for (int64_t c = 0; c < chunks; ++c) {
      double chunk = 0;
      for (int64_t i = c * kChunkElements; i < std::min(n, (c + 1) * kChunkElements); ++i) {
        chunk += double{x[i]} * x[i];
      }
      EXPECT_NEAR(partial[c], chunk, 1e-12 * chunk) << "chunk " << c << " of " << n;
      total += chunk;
    }
    EXPECT_NEAR(partial[chunks], total, 1e-12 * total) << n;
  }
}

TEST(OptimizerKernels, SumOfManyPartials) {
  const std::vector<float> values = random_values(600, 62, 0.f, 100.f);
  const std::vector<double> partial(values.begin(), values.end());
  double want = 0;
  for (const double v : partial) want += v;
  double total = -7.0;
  cuda_emulation::launch({1, 1, 1}, kThreads, 0, [&] {
    sum_partials_kernel(partial.data(), static_cast<int64_t>(partial.size()), &total);
  });
  EXPECT_NEAR(total, want, 1e-12 * want);
}

}  // namespace
}  // namespace tfm::cuda
