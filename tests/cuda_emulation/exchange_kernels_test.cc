// The CUDA kernels of expert parallelism by exchange, their own source run on the CPU through the
// emulation in shim/: the slots against ops::exchange_slots (what the cpu backend and the
// multi-process tests run), and each op against its definition in graph.h over those slots:
// dispatch copies a pair's row into its slot, slots one-hot its expert, combine sums a row's slots
// weighted by routing; dispatch's gradient sums a row's slots' dy, combine's weights dy into each
// slot and dots it with the slot's y for d routing. Two and four ranks, a rank's block left partly
// empty, and one row.
#include "backends/cuda/exchange_kernels.cuh"

#include <gtest/gtest.h>

#include "cuda_emulation/emulated_values.h"

namespace tfm::cuda {
namespace {

using testing::expect_close;
using testing::random_values;
using testing::routed;

struct Exchange {
  int64_t rows, experts, top_k, ranks;
  int64_t held() const { return experts / ranks; }
  int64_t per_rank() const { return rows * std::min(top_k, held()); }
  int64_t slot_count() const { return ranks * per_rank(); }
};

dim3 grid(int64_t count) {
  return {static_cast<unsigned>((count + kExchangeThreads - 1) / kExchangeThreads), 1, 1};
}

void check_exchange(const Exchange& c, int64_t hidden) {
  const std::vector<float> logits =
      random_values(static_cast<size_t>(c.rows * c.experts), 30, -2, 2);
  const std::vector<float> routing = routed(logits, c.rows, c.experts, c.top_k, false);
  const std::vector<float> x = random_values(static_cast<size_t>(c.rows * hidden), 31),
                           y = random_values(static_cast<size_t>(c.slot_count() * hidden), 32),
                           dy_rows = random_values(static_cast<size_t>(c.rows * hidden), 33),
                           dy_slots = random_values(y.size(), 34);
  std::vector<int32_t> slot_of(static_cast<size_t>(c.rows * c.experts), -9),
      slot_row(static_cast<size_t>(c.slot_count()), -9),
      slot_expert(static_cast<size_t>(c.slot_count()), -9);
  const ExchangeSlots s{slot_of.data(), slot_row.data(), slot_expert.data()};
  cuda_emulation::launch(dim3{1, 1, 1}, kExchangeThreads, 0, [&] {
    moe_exchange_slots_kernel(routing.data(), c.rows, c.experts, c.ranks, c.per_rank(), s);
  });
  const std::vector<int64_t> want_slots =
      ops::exchange_slots(routing.data(), c.rows, c.experts, c.ranks, c.per_rank());
  ASSERT_EQ(std::vector<int64_t>(slot_of.begin(), slot_of.end()), want_slots);

  std::vector<float> dispatched(y.size(), NAN), slots(c.slot_count() * c.held(), NAN),
      combined(x.size(), NAN), dx(x.size(), NAN), d_y(y.size(), NAN),
      d_routing(routing.size(), 0.f);
  std::vector<float> want_dispatched(y.size(), 0.f), want_slots_onehot(slots.size(), 0.f),
      want_combined(x.size(), 0.f), want_dx(x.size(), 0.f), want_d_y(y.size(), 0.f),
      want_d_routing(routing.size(), 0.f);
  for (int64_t r = 0; r < c.rows; ++r) {
    for (int64_t e = 0; e < c.experts; ++e) {
      const int64_t slot = want_slots[static_cast<size_t>(r * c.experts + e)];
      if (slot < 0) continue;
      const float w = routing[r * c.experts + e];
      want_slots_onehot[slot * c.held() + e % c.held()] = 1.f;
      double dot = 0;
      for (int64_t h = 0; h < hidden; ++h) {
        want_dispatched[slot * hidden + h] = x[r * hidden + h];
        want_combined[r * hidden + h] += w * y[slot * hidden + h];
        want_dx[r * hidden + h] += dy_slots[slot * hidden + h];
        want_d_y[slot * hidden + h] = w * dy_rows[r * hidden + h];
        dot += static_cast<double>(dy_rows[r * hidden + h]) * y[slot * hidden + h];
      }
      want_d_routing[r * c.experts + e] = static_cast<float>(dot);
    }
  }
  cuda_emulation::launch(grid(c.slot_count() * hidden), kExchangeThreads, 0, [&] {
    moe_dispatch_kernel(x.data(), c.slot_count(), hidden, 0, s, dispatched.data());
  });
  cuda_emulation::launch(grid(c.slot_count() * c.held()), kExchangeThreads, 0, [&] {
    moe_dispatch_kernel(nullptr, c.slot_count(), c.held(), c.held(), s, slots.data());
  });
  cuda_emulation::launch(grid(c.rows * hidden), kExchangeThreads, 0, [&] {
    moe_combine_pairs_kernel(y.data(), routing.data(), c.rows, hidden, c.experts, 0, c.experts,
                             slot_of.data(), combined.data());
  });
  cuda_emulation::launch(grid(c.rows * hidden), kExchangeThreads, 0, [&] {
    moe_combine_pairs_kernel(dy_slots.data(), nullptr, c.rows, hidden, c.experts, 0, c.experts,
                             slot_of.data(), dx.data());
  });
  cuda_emulation::launch(grid(c.slot_count() * hidden), kExchangeThreads, 0, [&] {
    moe_combine_grad_slots_kernel(routing.data(), dy_rows.data(), c.slot_count(), c.experts, hidden,
                                  s, d_y.data());
  });
  cuda_emulation::launch(grid(c.slot_count() * 32), kExchangeThreads, 0, [&] {
    moe_combine_grad_routing_kernel(y.data(), dy_rows.data(), c.slot_count(), c.experts, hidden, s,
                                    d_routing.data());
  });
  expect_close(dispatched, want_dispatched, 0.f, "dispatch");
  expect_close(slots, want_slots_onehot, 0.f, "slots");
  expect_close(combined, want_combined, 1e-6f, "combine");
  expect_close(dx, want_dx, 1e-6f, "dispatch's gradient");
  expect_close(d_y, want_d_y, 0.f, "combine's gradient of y");
  expect_close(d_routing, want_d_routing, 1e-6f, "combine's gradient of routing");
}

TEST(ExchangeKernels, SlotsAndTheirOpsAsDefined) {
  check_exchange({9, 8, 2, 2}, 40);
  check_exchange({7, 8, 3, 4}, 33);  // two experts a rank: blocks of rows x 2 slots, partly empty
  check_exchange({1, 4, 2, 2}, 16);
}

}  // namespace
}  // namespace tfm::cuda
