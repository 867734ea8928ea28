// The kernels of expert parallelism by exchange (graph::Op::kMoeDispatch, kMoeSlots, kMoeCombine
// and their gradients; see exchange.cu), in a header of their own so tests/cuda_emulation can run
// them on the CPU. The routing decides every slot on the device, as ops::exchange_slots on the cpu:
// each (row, chosen expert) pair takes the next slot of the block of the rank holding the expert,
// rows in order, a row's experts in order. kMoeCombine and kMoeDispatchGrad sum a row's slots with
// moe_combine_pairs_kernel, the slots as its pairs.
#pragma once

#include <cstdint>

#include "backends/cuda/device_math.cuh"
#include "backends/cuda/moe_combine_kernel.cuh"

namespace tfm::cuda {
namespace {

constexpr int kExchangeThreads = 256;

// Where each pair went and what each slot holds.
struct ExchangeSlots {
  int32_t* slot_of;      // [rows x experts]: the pair's slot, -1 where the row did not choose
  int32_t* slot_row;     // [slot_count]: the slot's row, -1 for an empty slot
  int32_t* slot_expert;  // [slot_count]: the slot's expert
};

// The slots, one block: a thread a rank takes its experts' pairs in order.
__global__ void moe_exchange_slots_kernel(const float* __restrict__ routing, int64_t rows,
                                          int64_t experts, int64_t ranks, int64_t per_rank,
                                          ExchangeSlots s) {
  await_previous_kernels();
  for (int64_t i = threadIdx.x; i < ranks * per_rank; i += blockDim.x) s.slot_row[i] = -1;
  __syncthreads();
  const int64_t held = experts / ranks;
  for (int64_t rank = threadIdx.x; rank < ranks; rank += blockDim.x) {
    int64_t taken = 0;
    for (int64_t r = 0; r < rows; ++r) {
      for (int64_t e = rank * held; e < (rank + 1) * held; ++e) {
        int32_t slot = -1;
        // A block has room for every pair routing from a router can make; more are dropped.
        if (routing[r * experts + e] != 0.f && taken < per_rank) {
          slot = static_cast<int32_t>(rank * per_rank + taken++);
          s.slot_row[slot] = static_cast<int32_t>(r);
          s.slot_expert[slot] = static_cast<int32_t>(e);
        }
        s.slot_of[r * experts + e] = slot;
      }
    }
  }
}

// kMoeDispatch: each slot's row of x, zeros in an empty slot; with `held` > 0, kMoeSlots instead:
// each slot's expert one-hot over its rank's `held` experts (x unread). A thread an element.
__global__ void moe_dispatch_kernel(const float* __restrict__ x, int64_t slot_count, int64_t width,
                                    int64_t held, ExchangeSlots s, float* __restrict__ out) {
  await_previous_kernels();
  const int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i >= slot_count * width) return;
  const int64_t slot = i / width, c = i % width;
  const int32_t r = s.slot_row[slot];
  if (r < 0) {
    out[i] = 0.f;
  } else {
    out[i] = held > 0 ? (s.slot_expert[slot] % held == c ? 1.f : 0.f) : x[r * width + c];
  }
}

// kMoeCombineGrad's d y: each slot's routing weight x its row's dy, zeros in an empty slot. A
// thread an element.
__global__ void moe_combine_grad_slots_kernel(const float* __restrict__ routing,
                                              const float* __restrict__ dy, int64_t slot_count,
                                              int64_t experts, int64_t hidden, ExchangeSlots s,
                                              float* __restrict__ d_y) {
  await_previous_kernels();
  const int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i >= slot_count * hidden) return;
  const int64_t slot = i / hidden, c = i % hidden;
  const int32_t r = s.slot_row[slot];
  d_y[i] = r < 0 ? 0.f : routing[r * experts + s.slot_expert[slot]] * dy[r * hidden + c];
}

// kMoeCombineGrad's d routing at each taken slot's (row, expert): dy[row] . y[slot], a warp a
// slot. The other entries are left as they are (zeros: the launcher clears them).
__global__ void __launch_bounds__(kExchangeThreads)
    moe_combine_grad_routing_kernel(const float* __restrict__ y, const float* __restrict__ dy,
                                    int64_t slot_count, int64_t experts, int64_t hidden,
                                    ExchangeSlots s, float* __restrict__ d_routing) {
  await_previous_kernels();
  const int64_t slot =
      static_cast<int64_t>(blockIdx.x) * (kExchangeThreads / 32) + threadIdx.x / 32;
  if (slot >= slot_count) return;
  const int32_t r = s.slot_row[slot];
  if (r < 0) return;
  double dot = 0;
  for (int64_t c = threadIdx.x % 32; c < hidden; c += 32) {
    dot += static_cast<double>(dy[r * hidden + c]) * y[slot * hidden + c];
  }
  dot = warp_sum(dot);
  if (threadIdx.x % 32 == 0) {
    d_routing[r * experts + s.slot_expert[slot]] = static_cast<float>(dot);
  }
}

}  // namespace
}  // namespace tfm::cuda
