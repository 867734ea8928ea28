// A kMoeExperts case run through the emulated kernels in moe.cu's order (the launchers themselves
// call the CUDA runtime): its inputs, seeded, and the kernels' buffers, with helpers for the
// references (the experts' weights widened to f32, and each (row, held expert) routed).
#pragma once

#include <algorithm>
#include <type_traits>
#include <vector>

#include "backends/cuda/moe_kernels.cuh"
#include "cuda_emulation/emulated_values.h"

namespace tfm::testing {

struct ExpertsCase {
  int64_t rows, hidden, inter, experts, top_k, first, held, per_launch;
};

template <typename W>
struct EmulatedExperts {
  ExpertsCase c;
  std::vector<float> x, routing;
  std::vector<std::vector<W>> w;         // gate, up, down of each held expert
  std::vector<std::vector<float>> wide;  // the same, widened
  int64_t pairs;
  std::vector<int32_t> offset, row, pair_of;
  std::vector<float> act, down, gate, up;

  // The first held expert is never chosen: its launches read no pair.
  explicit EmulatedExperts(const ExpertsCase& c_)
      : c(c_), x(random_values(static_cast<size_t>(c.rows * c.hidden), 3)) {
    std::vector<float> logits = random_values(static_cast<size_t>(c.rows * c.experts), 4, -2, 2);
    for (int64_t r = 0; r < c.rows; ++r) logits[r * c.experts + c.first] = -50.f;
    routing = routed(logits, c.rows, c.experts, c.top_k, true);
    for (int64_t e = 0; e < c.held; ++e) {
      for (int i = 0; i < 3; ++i) {
        const auto v = random_values(static_cast<size_t>(c.inter * c.hidden),
                                     static_cast<uint64_t>(10 + 3 * e + i), -0.3f, 0.3f);
        if constexpr (std::is_same_v<W, float>) {
          w.push_back(v);
        } else {
          w.push_back(to_bf16(v));
        }
        wide.push_back(widened(w.back()));
      }
    }
    pairs = c.rows * std::min(c.top_k, c.held);
    offset.assign(static_cast<size_t>(c.held + 1), -1);
    row.assign(static_cast<size_t>(pairs), -1);
    pair_of.assign(static_cast<size_t>(c.rows * c.held), -9);
    act.assign(static_cast<size_t>(pairs * c.inter), NAN);
    gate = up = act;
    down.assign(static_cast<size_t>(pairs * c.hidden), NAN);
  }

  static dim3 grid(int64_t count, int64_t per_block, unsigned experts = 1) {
    return {static_cast<unsigned>((count + per_block - 1) / per_block), experts, 1};
  }

  // Calls launch(gate, up, down tables, begin, experts) for each launch's experts.
  template <typename Launch>
  void for_each_launch(Launch&& launch) {
    for (int64_t begin = 0; begin < c.held; begin += c.per_launch) {
      const int64_t end = std::min(c.held, begin + c.per_launch);
      cuda::ExpertWeightTable<W> g{}, u{}, d{};
      for (int64_t e = begin; e < end; ++e) {
        g.w[e - begin] = w[static_cast<size_t>(3 * e)].data();
        u.w[e - begin] = w[static_cast<size_t>(3 * e + 1)].data();
        d.w[e - begin] = w[static_cast<size_t>(3 * e + 2)].data();
      }
      launch(g, u, d, begin, static_cast<unsigned>(end - begin));
    }
  }

  // The pairs, and each pair's products (the gate and up products kept when `keep`).
  void forward_products(bool keep) {
    const cuda::ExpertPairs p{offset.data(), row.data(), pair_of.data()};
    cuda_emulation::launch(dim3{1, 1, 1}, cuda::kMoeThreads, 0, [&] {
      cuda::moe_expert_pairs_kernel(routing.data(), c.rows, c.experts, c.first, c.held, p);
    });
    for_each_launch([&](const auto& g, const auto& u, const auto& d, int64_t begin,
                        unsigned experts) {
      cuda_emulation::launch(grid(c.inter, cuda::kMoeWarps, experts), cuda::kMoeThreads, 0, [&] {
        cuda::moe_gate_up_kernel<W>(x.data(), c.hidden, c.inter, g, u, begin, offset.data(),
                                    row.data(), act.data(), keep ? gate.data() : nullptr,
                                    keep ? up.data() : nullptr);
      });
      cuda_emulation::launch(grid(c.hidden, cuda::kMoeWarps, experts), cuda::kMoeThreads, 0, [&] {
        cuda::moe_down_kernel<W>(act.data(), c.inter, c.hidden, d, begin, offset.data(),
                                 down.data());
      });
    });
  }

  // out [rows, hidden] = each row's pairs of per_pair summed (times routing, when given).
  void combine(const std::vector<float>& per_pair, const float* weights, float* out) {
    cuda_emulation::launch(grid(c.rows * c.hidden, cuda::kMoeThreads), cuda::kMoeThreads, 0, [&] {
      cuda::moe_combine_pairs_kernel(per_pair.data(), weights, c.rows, c.hidden, c.experts, c.first,
                                     c.held, pair_of.data(), out);
    });
  }
};

}  // namespace tfm::testing
