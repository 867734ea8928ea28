// The CUDA mixture-of-experts kernels and their gradients, their own source run on the CPU through
// the emulation in shim/. Routing and its gradient against ops::route_row and route_row_grad
// (checked against transformers' fixtures); the experts against each routed row's SwiGLU
// products (ops::reference::linear) weighted and summed in expert order; the experts' gradients
// (in moe_experts_grad's order) against central finite differences of the experts' sum in double,
// d routing only where a row is routed. The experts run with f32 and bf16 weights, all held or a
// rank's share (expert parallelism), several launches of products, an expert no row chose, and
// more pairs an expert than a warp takes at once.
#include <gtest/gtest.h>

#include <cmath>

#include "backends/cuda/moe_grad_kernels.cuh"
#include "cuda_emulation/emulated_experts.h"
#include "ops/reference.h"

namespace tfm::cuda {
namespace {

using testing::EmulatedExperts;
using testing::expect_close;
using testing::ExpertsCase;
using testing::random_values;
using testing::routed;

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

// The kernels in moe_experts' order, the held experts' products `per_launch` experts a launch.
template <typename W>
void check_experts(const ExpertsCase& c) {
  EmulatedExperts<W> run(c);
  std::vector<float> out(static_cast<size_t>(c.rows * c.hidden), NAN);
  run.forward_products(false);
  run.combine(run.down, run.routing.data(), out.data());
  EXPECT_EQ(run.offset[1], 0) << "the first held expert has no rows";
  expect_close(out,
               experts_reference(run.x, run.routing, run.wide, c.rows, c.hidden, c.inter, c.experts,
                                 c.first),
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

void check_route_grad(int64_t rows, int64_t experts, int64_t top_k, bool normed) {
  const std::vector<float> logits = random_values(static_cast<size_t>(rows * experts), 5, -3, 3);
  const std::vector<float> d_routing = random_values(logits.size(), 6);
  std::vector<float> got(logits.size(), NAN), want(logits.size());
  for (int64_t r = 0; r < rows; ++r) {
    ops::route_row_grad(&logits[r * experts], &d_routing[r * experts], experts, top_k, normed,
                        &want[r * experts]);
  }
  cuda_emulation::launch(dim3{static_cast<unsigned>((rows + 63) / 64), 1, 1}, 64, 0, [&] {
    moe_route_grad_kernel(logits.data(), d_routing.data(), rows, experts, top_k, normed,
                          got.data());
  });
  expect_close(got, want, 1e-7f, normed ? "normed" : "not normed");
}

TEST(MoeGradKernels, RouteGradAsTheCpu) {
  check_route_grad(37, 8, 2, true);
  check_route_grad(37, 8, 2, false);
  check_route_grad(70, 16, 4, false);
}

// The sum over rows of dy . kMoeExperts(x, routing, w)[row], in double.
double experts_loss(const std::vector<double>& x, const std::vector<double>& routing,
                    const std::vector<std::vector<double>>& w, const std::vector<double>& dy,
                    const ExpertsCase& c) {
  double loss = 0;
  std::vector<double> act(static_cast<size_t>(c.inter));
  for (int64_t r = 0; r < c.rows; ++r) {
    for (int64_t e = 0; e < c.held; ++e) {
      const double weight = routing[static_cast<size_t>(r * c.experts + c.first + e)];
      if (weight == 0) continue;
      const auto& gate = w[static_cast<size_t>(3 * e)];
      const auto& up = w[static_cast<size_t>(3 * e + 1)];
      const auto& down = w[static_cast<size_t>(3 * e + 2)];
      for (int64_t i = 0; i < c.inter; ++i) {
        double g = 0, u = 0;
        for (int64_t h = 0; h < c.hidden; ++h) {
          g += gate[i * c.hidden + h] * x[r * c.hidden + h];
          u += up[i * c.hidden + h] * x[r * c.hidden + h];
        }
        act[static_cast<size_t>(i)] = g / (1 + std::exp(-g)) * u;
      }
      for (int64_t h = 0; h < c.hidden; ++h) {
        double d = 0;
        for (int64_t i = 0; i < c.inter; ++i) d += down[h * c.inter + i] * act[i];
        loss += dy[r * c.hidden + h] * weight * d;
      }
    }
  }
  return loss;
}

std::vector<double> in_double(const std::vector<float>& v) { return {v.begin(), v.end()}; }

// d loss / d v[i] for each i where `differentiable(i)`, else 0: central differences.
template <typename Loss, typename Differentiable>
std::vector<float> differences(std::vector<double>& v, Loss loss, Differentiable differentiable) {
  constexpr double kStep = 1e-5;
  std::vector<float> d(v.size(), 0.f);
  for (size_t i = 0; i < v.size(); ++i) {
    if (!differentiable(i)) continue;
    const double keep = v[i];
    v[i] = keep + kStep;
    const double above = loss();
    v[i] = keep - kStep;
    const double below = loss();
    v[i] = keep;
    d[i] = static_cast<float>((above - below) / (2 * kStep));
  }
  return d;
}

template <typename W>
void check_experts_grad(const ExpertsCase& c) {
  EmulatedExperts<W> run(c);
  const std::vector<float> dy = random_values(static_cast<size_t>(c.rows * c.hidden), 7);
  std::vector<float> dx(static_cast<size_t>(c.rows * c.hidden), NAN),
      d_routing(static_cast<size_t>(c.rows * c.experts), 0.f),
      d_weights(static_cast<size_t>(3 * c.held * c.inter * c.hidden), NAN);
  run.forward_products(true);
  cuda_emulation::launch(run.grid(c.rows * c.held, kMoeWarps), kMoeThreads, 0, [&] {
    moe_routing_grad_kernel(dy.data(), run.down.data(), c.rows, c.hidden, c.experts, c.first,
                            c.held, run.pair_of.data(), d_routing.data());
  });
  run.for_each_launch(
      [&](const auto& g, const auto& u, const auto& d, int64_t begin, unsigned experts) {
        cuda_emulation::launch(run.grid(c.inter, kMoeThreads, experts), kMoeThreads, 0, [&] {
          moe_act_grad_kernel<W>(dy.data(), run.routing.data(), c.experts, c.first, c.hidden,
                                 c.inter, d, begin, run.offset.data(), run.row.data(),
                                 run.gate.data(), run.up.data());
        });
        cuda_emulation::launch(run.grid(c.hidden, kMoeThreads, experts), kMoeThreads, 0, [&] {
          moe_input_grad_kernel<W>(run.gate.data(), run.up.data(), c.hidden, c.inter, g, u, begin,
                                   run.offset.data(), run.down.data());
        });
      });
  run.combine(run.down, nullptr, dx.data());
  const ExpertGradSources sources{run.gate.data(),   run.up.data(),  run.act.data(),
                                  run.x.data(),      dy.data(),      run.routing.data(),
                                  run.offset.data(), run.row.data(), c.hidden,
                                  c.inter,           c.experts,      c.first};
  cuda_emulation::launch(
      dim3{run.grid(c.inter * c.hidden, kMoeThreads).x, static_cast<unsigned>(c.held), 3},
      kMoeThreads, 0, [&] { moe_weight_grad_kernel(sources, d_weights.data()); });

  std::vector<double> x = in_double(run.x), routing = in_double(run.routing), dy64 = in_double(dy);
  std::vector<std::vector<double>> w;
  for (const auto& v : run.wide) w.push_back(in_double(v));
  const auto loss = [&] { return experts_loss(x, routing, w, dy64, c); };
  const auto every = [](size_t) { return true; };
  expect_close(dx, differences(x, loss, every), 1e-4f, "dx");
  // Only a routed (row, held expert) has a gradient: any other entry would route the row.
  const auto routed = [&](size_t i) {
    const auto e = static_cast<int64_t>(i) % c.experts;
    return run.routing[i] != 0.f && e >= c.first && e < c.first + c.held;
  };
  expect_close(d_routing, differences(routing, loss, routed), 1e-4f, "d routing");
  for (size_t i = 0; i < w.size(); ++i) {
    const std::vector<float> got(d_weights.begin() + static_cast<int64_t>(i * w[i].size()),
                                 d_weights.begin() + static_cast<int64_t>((i + 1) * w[i].size()));
    expect_close(got, differences(w[i], loss, every), 1e-4f,
                 "expert " + std::to_string(i / 3) + " weight " + std::to_string(i % 3));
  }
}

TEST(MoeGradKernels, ExpertsGradMatchFiniteDifferences) {
  // rows, hidden, inter, experts, top_k, first, held, experts a launch
  check_experts_grad<float>({7, 12, 8, 4, 2, 0, 4, 64});
  check_experts_grad<__nv_bfloat16>({9, 16, 10, 4, 3, 0, 4, 3});
  check_experts_grad<float>({1, 12, 8, 4, 2, 0, 4, 64});  // one row
}

TEST(MoeGradKernels, ExpertsGradOfOneRankTakeTheirRoutingColumns) {
  check_experts_grad<float>({11, 12, 8, 6, 2, 3, 3, 2});
}

}  // namespace
}  // namespace tfm::cuda
