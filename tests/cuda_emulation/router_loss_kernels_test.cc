// The CUDA load-balancing loss kernels, their own source run on the CPU through the emulation in
// shim/, against ops::router_loss and ops::router_loss_grad (checked against transformers'
// load_balancing_loss_func in the fixtures' training steps), scaled by coef / loss_scale: several
// layers, rows the mask drops, and a mask that drops every row.
#include "backends/cuda/router_loss_kernels.cuh"

#include <gtest/gtest.h>

#include "cuda_emulation/emulated_values.h"
#include "ops/moe.h"

namespace tfm::cuda {
namespace {

using testing::expect_close;
using testing::random_values;

constexpr int kThreads = 64;

void check_router_loss(int64_t layers, int64_t rows, int64_t experts, int64_t top_k,
                       const std::vector<int32_t>& mask) {
  std::vector<std::vector<float>> logits;
  RouterLogits in{};
  in.layers = layers, in.rows = rows, in.experts = experts, in.top_k = top_k;
  std::vector<const float*> layer_ptrs;
  for (int64_t l = 0; l < layers; ++l) {
    logits.push_back(random_values(static_cast<size_t>(rows * experts), 20 + l, -2, 2));
    in.layer[l] = logits.back().data();
    layer_ptrs.push_back(logits.back().data());
  }
  std::vector<RowSoftmax> softmax(static_cast<size_t>(layers * rows));
  std::vector<int32_t> chosen(static_cast<size_t>(layers * rows * top_k));
  std::vector<double> shares(static_cast<size_t>(2 * experts + 1), NAN);
  const RouterStats stats{softmax.data(), chosen.data(), shares.data()};
  const float coef = 0.02f, loss_scale = 7.f, d_loss = 3.f;
  float loss = NAN;
  std::vector<float> d_logits(static_cast<size_t>(layers * rows * experts), NAN);
  const dim3 row_grid{static_cast<unsigned>((layers * rows + kThreads - 1) / kThreads), 1, 1};
  cuda_emulation::launch(row_grid, kThreads, 0,
                         [&] { router_rows_kernel(in, mask.data(), stats); });
  cuda_emulation::launch(dim3{1, 1, 1}, kThreads, 0, [&] {
    router_shares_kernel(in, mask.data(), stats, &loss_scale, coef, &loss);
  });
  cuda_emulation::launch(row_grid, kThreads, 0, [&] {
    router_loss_grad_kernel(in, mask.data(), stats, &loss_scale, coef, &d_loss, d_logits.data());
  });

  const double factor = coef / static_cast<double>(loss_scale);
  const auto want_loss =
      static_cast<float>(factor * ops::router_loss(layer_ptrs, mask.data(), rows, experts, top_k));
  EXPECT_NEAR(loss, want_loss, 1e-7f + 1e-6f * std::fabs(want_loss));
  std::vector<float> want(d_logits.size());
  std::vector<float*> want_layers;
  for (int64_t l = 0; l < layers; ++l) want_layers.push_back(&want[l * rows * experts]);
  ops::router_loss_grad(layer_ptrs, mask.data(), rows, experts, top_k, factor * d_loss,
                        want_layers);
  expect_close(d_logits, want, 1e-7f, "d logits");
}

TEST(RouterLossKernels, LossAndGradientAsTheCpu) {
  check_router_loss(3, 10, 8, 2, {1, 1, 0, 1, 1, 1, 0, 0, 1, 1});
  check_router_loss(1, 70, 16, 4, std::vector<int32_t>(70, 1));
  check_router_loss(2, 5, 8, 2, std::vector<int32_t>(5, 0));  // no row kept: loss 0, no gradient
}

}  // namespace
}  // namespace tfm::cuda
