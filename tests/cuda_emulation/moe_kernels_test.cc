// The CUDA mixture-of-experts kernels, their own source run on the CPU through the emulation in
// shim/, against the arithmetic in src/ops: routing as ops::route_row (itself checked against
// transformers' fixtures), and the experts as each routed row's SwiGLU products
// (ops::reference::linear) weighted and summed in expert order. The experts run with f32 and bf16
// weights, all held or a rank's share (expert parallelism), several launches of products, an
// expert no row chose, and more pairs an expert than a warp takes at once.
#include "backends/cuda/moe_kernels.cuh"

#include <gtest/gtest.h>

#include <cmath>

#include "cuda_emulation/emulated_values.h"
#include "ops/moe.h"
#include "ops/reference.h"

namespace tfm::cuda {
namespace {

using testing::expect_close;
using testing::random_values;
using testing::to_bf16;
using testing::widened;

std::vector<float> routed(const std::vector<float>& logits, int64_t rows, int64_t experts,
                          int64_t top_k, bool normed) {
  std::vector<float> routing(logits.size());
  for (int64_t r = 0; r < rows; ++r) {
    ops::route_row(&logits[r * experts], experts, top_k, normed, &routing[r * experts]);
  }
  return routing;
}

void check_route(int64_t rows, int64_t experts, int64_t top_k, bool normed,
                 std::vector<float> logits) {
  std::vector<float> got(logits.size(), -7.f);
  cuda_emulation::launch(dim3{static_cast<unsigned>((rows + 63) / 64), 1, 1}, 64, 0, [&] {
    moe_route_kernel(logits.data(), rows, experts, top_k, normed, got.data());
  });
  expect_close(got, routed(logits, rows, experts, top_k, normed), 1e-7f,
               std::to_string(experts) + " experts, top " + std::to_string(top_k));
}

TEST(MoeKernels, RouteAsTransformersTopKRouter) {
  check_route(37, 8, 2, true, random_values(37 * 8, 1, -3.f, 3.f));
  check_route(70, 128, 8, false, random_values(70 * 128, 2, -3.f, 3.f));
  // Equal logits: the first of equals is chosen first.
  std::vector<float> ties = {0.5f, 1.f, 1.f, 0.5f, 1.f, 0.f, 0.f, 0.f, 0.f, 0.f, 2.f, 2.f};
  check_route(2, 6, 3, true, ties);
  check_route(2, 6, 3, false, ties);
}

// kMoeExperts of x and routing by each routed row's products, experts added in order.
std::vector<float> experts_reference(const std::vector<float>& x, const std::vector<float>& routing,
                                     const std::vector<std::vector<float>>& w, int64_t rows,
                                     int64_t hidden, int64_t inter, int64_t experts,
                                     int64_t first) {
  std::vector<float> out(static_cast<size_t>(rows * hidden), 0.f);
  std::vector<float> gate(static_cast<size_t>(inter)), up(gate.size()), down(hidden);
  for (int64_t r = 0; r < rows; ++r) {
    for (size_t e = 0; e < w.size() / 3; ++e) {
      const float weight = routing[r * experts + first + static_cast<int64_t>(e)];
      if (weight == 0.f) continue;
      ops::reference::linear(&x[r * hidden], w[3 * e].data(), nullptr, 1, inter, hidden,
                             gate.data());
      ops::reference::linear(&x[r * hidden], w[3 * e + 1].data(), nullptr, 1, inter, hidden,
                             up.data());
      for (int64_t i = 0; i < inter; ++i) gate[i] = gate[i] / (1.f + std::exp(-gate[i])) * up[i];
      ops::reference::linear(gate.data(), w[3 * e + 2].data(), nullptr, 1, hidden, inter,
                             down.data());
      for (int64_t h = 0; h < hidden; ++h) out[r * hidden + h] += weight * down[h];
    }
  }
  return out;
}

struct ExpertsCase {
  int64_t rows, hidden, inter, experts, top_k, first, held, per_launch;
};

// The kernels in moe_experts' order, the held experts' products `per_launch` experts a launch.
template <typename W>
void check_experts(const ExpertsCase& c) {
  const std::vector<float> x = random_values(static_cast<size_t>(c.rows * c.hidden), 3);
  std::vector<float> logits = random_values(static_cast<size_t>(c.rows * c.experts), 4, -2.f, 2.f);
  // The first held expert is never chosen: its launch reads no pair.
  for (int64_t r = 0; r < c.rows; ++r) logits[r * c.experts + c.first] = -50.f;
  const std::vector<float> routing = routed(logits, c.rows, c.experts, c.top_k, true);
  std::vector<std::vector<W>> w;
  std::vector<std::vector<float>> wide;
  for (int64_t e = 0; e < c.held; ++e) {
    const int64_t sizes[3] = {c.inter * c.hidden, c.inter * c.hidden, c.hidden * c.inter};
    for (int i = 0; i < 3; ++i) {
      const auto v = random_values(static_cast<size_t>(sizes[i]), 10 + 3 * e + i, -0.3f, 0.3f);
      if constexpr (std::is_same_v<W, float>) {
        w.push_back(v);
      } else {
        w.push_back(to_bf16(v));
      }
      wide.push_back(widened(w.back()));
    }
  }
  const int64_t pairs = c.rows * std::min(c.top_k, c.held);
  std::vector<int32_t> offset(c.held + 1, -1), row(pairs, -1), pair_of(c.rows * c.held, -9);
  std::vector<float> act(pairs * c.inter, NAN), down(pairs * c.hidden, NAN),
      out(c.rows * c.hidden, NAN);
  const ExpertPairs p{offset.data(), row.data(), pair_of.data()};
  cuda_emulation::launch(dim3{1, 1, 1}, kMoeThreads, 0, [&] {
    moe_expert_pairs_kernel(routing.data(), c.rows, c.experts, c.first, c.held, p);
  });
  for (int64_t begin = 0; begin < c.held; begin += c.per_launch) {
    const int64_t end = std::min(c.held, begin + c.per_launch);
    ExpertWeightTable<W> gate{}, up{}, down_w{};
    for (int64_t e = begin; e < end; ++e) {
      gate.w[e - begin] = w[3 * e].data();
      up.w[e - begin] = w[3 * e + 1].data();
      down_w.w[e - begin] = w[3 * e + 2].data();
    }
    const auto experts = static_cast<unsigned>(end - begin);
    cuda_emulation::launch(
        dim3{static_cast<unsigned>((c.inter + kMoeWarps - 1) / kMoeWarps), experts, 1},
        kMoeThreads, 0, [&] {
          moe_gate_up_kernel<W>(x.data(), c.hidden, c.inter, gate, up, begin, offset.data(),
                                row.data(), act.data());
        });
    cuda_emulation::launch(
        dim3{static_cast<unsigned>((c.hidden + kMoeWarps - 1) / kMoeWarps), experts, 1},
        kMoeThreads, 0, [&] {
          moe_down_kernel<W>(act.data(), c.inter, c.hidden, down_w, begin, offset.data(),
                             down.data());
        });
  }
  cuda_emulation::launch(
      dim3{static_cast<unsigned>((c.rows * c.hidden + kMoeThreads - 1) / kMoeThreads), 1, 1},
      kMoeThreads, 0, [&] {
        moe_combine_pairs_kernel(down.data(), routing.data(), c.rows, c.hidden, c.experts,
                                 c.first, c.held, pair_of.data(), out.data());
      });
  EXPECT_EQ(offset[1], 0) << "the first held expert has no rows";
  expect_close(out,
               experts_reference(x, routing, wide, c.rows, c.hidden, c.inter, c.experts, c.first),
               1e-5f, "rows " + std::to_string(c.rows));
}

TEST(MoeKernels, ExpertsRunEachExpertOverItsRows) {
  // rows, hidden, inter, experts, top_k, first, held, experts a launch
  check_experts<float>({11, 40, 24, 6, 2, 0, 6, 64});
  check_experts<__nv_bfloat16>({11, 40, 24, 6, 2, 0, 6, 64});
  check_experts<float>({1, 64, 33, 8, 3, 0, 8, 3});  // decode: one row, three launches
  check_experts<__nv_bfloat16>({9, 48, 20, 8, 4, 0, 8, 5});
}

TEST(MoeKernels, ExpertsOfOneRankTakeTheirRoutingColumns) {
  // Experts 4 .. 7 of 8 held, as rank 1 of 2 has them.
  check_experts<float>({13, 40, 16, 8, 2, 4, 4, 64});
  check_experts<__nv_bfloat16>({13, 40, 16, 8, 2, 4, 4, 2});
}

}  // namespace
}  // namespace tfm::cuda
