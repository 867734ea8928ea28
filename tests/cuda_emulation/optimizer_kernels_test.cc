// The CUDA optimizer kernels, their own source run on the CPU through the emulation in shim/ (no
// GPU needed), launched as optimizer.cu launches them: AdamW's update against ops::adamw_update
// applied element by element (with and without weight decay, over several steps, at every
// alignment of the buffers' start, which decides which elements go four at a time), and the
// gradient norm's sum of squares (chunk partials, then their sum) against a plain double sum. The
// launchers cap the grid at kMaxBlocks, so their grid-stride loops are also run with fewer blocks
// than elements need, as a tensor of over 16M elements would.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <string>
#include <vector>

#include "backends/cuda/optimizer_device_kernels.cuh"
#include "cuda_emulation/emulated_values.h"

namespace tfm::cuda {
namespace {

using testing::expect_close;
using testing::random_values;

// Device allocations start on a 16-byte boundary at least.
using AlignedFloats = std::vector<float, testing::Aligned32<float>>;

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

// n elements from `offset` on in p, m and v, and from g_offset on in g (16-byte aligned buffers):
// every element updated once, as ops::adamw_update does, whatever the alignment.
void check_adamw(int64_t n, dim3 grid, bool decays, int offset = 0, int g_offset = -1) {
  if (g_offset < 0) g_offset = offset;
  const size_t size = static_cast<size_t>(n) + 4;
  AlignedFloats p(size), m(size, 0.f), v(size, 0.f), g(size);
  const std::vector<float> init = random_values(size, 41);
  std::copy(init.begin(), init.end(), p.begin());
  std::vector<float> want_p(p.begin() + offset, p.begin() + offset + n), want_m(n, 0.f),
      want_v(n, 0.f);
  for (int step = 1; step <= 3; ++step) {
    const std::vector<float> fresh = random_values(size, 41 + static_cast<uint64_t>(step));
    std::copy(fresh.begin(), fresh.end(), g.begin());
    const ops::AdamWScalars s = scalars_for(step, 1e-2);
    const float decay = decays ? s.decay : 1.f;
    float packed[ops::kAdamWScalarCount];
    ops::pack(s, packed);
    cuda_emulation::launch(grid, kThreads, 0, [&] {
      adamw_kernel(packed, decays, p.data() + offset, g.data() + g_offset, m.data() + offset,
                   v.data() + offset, n);
    });
    for (size_t i = 0; i < want_p.size(); ++i) {
      ops::adamw_update(s, decay, want_p[i], g[g_offset + i], want_m[i], want_v[i]);
    }
    const auto part = [&](const AlignedFloats& all) {
      return std::vector<float>(all.begin() + offset, all.begin() + offset + n);
    };
    const std::string at = "step " + std::to_string(step) + " of " + std::to_string(n) + " from " +
                           std::to_string(offset) + ", g from " + std::to_string(g_offset);
    // Within rounding: the compiler may contract the two inlined copies of the update
    // differently; an element updated twice, or not at all, is off by far more.
    expect_close(part(p), want_p, 1e-5f, "p, " + at);
    expect_close(part(m), want_m, 1e-5f, "m, " + at);
    expect_close(part(v), want_v, 1e-5f, "v, " + at);
  }
  // Nothing outside the n elements is written.
  EXPECT_TRUE(std::all_of(m.begin(), m.begin() + offset, [](float x) { return x == 0.f; }));
  EXPECT_TRUE(std::all_of(m.begin() + offset + n, m.end(), [](float x) { return x == 0.f; }));
}

TEST(OptimizerKernels, AdamW) {
  check_adamw(1000, grid_for(1000), true);  // 4 blocks, the last partly idle
  check_adamw(1000, grid_for(1000), false);
  check_adamw(1917, {3, 1, 1}, true);  // each thread strides over several fours
  // Starting 1, 2 or 3 elements past a 16-byte boundary: singles before it and after the fours.
  for (const int offset : {1, 2, 3}) check_adamw(1917, {2, 1, 1}, true, offset);
  check_adamw(3, {1, 1, 1}, true, 2);             // fewer elements than reach the boundary
  check_adamw(1000, grid_for(1000), true, 1, 2);  // g at another alignment: one at a time
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
