// The mixture-of-experts kernels (see moe.cu), in a header of their own so tests/cuda_emulation
// can run them on the CPU. Routing (graph::Op::kMoeRoute) is a thread a row; the experts
// (kMoeExperts) list each expert's rows, run its three products over those rows alone (an expert no
// row chose reads none of its weights, as decode needs), and add the results a row at a time in
// expert order, as the CPU does.
#pragma once

#include <cmath>
#include <cstdint>

#include "backends/cuda/device_math.cuh"
#include "backends/cuda/moe_combine_kernel.cuh"
#include "backends/cuda/moe_rows.cuh"

namespace tfm::cuda {
namespace {

constexpr int kMoeThreads = 256;
constexpr int kMoeWarps = kMoeThreads / 32;
// The experts one launch of the products takes, their weights' addresses passed by value (a
// kernel's parameters hold 4 KiB).
constexpr int kExpertsPerLaunch = 64;
// Rows a warp takes at once: each weight element read feeds that many dot products.
constexpr int kPairsAtOnce = 4;

// graph::Op::kMoeRoute, a thread a row.
__global__ void moe_route_kernel(const float* __restrict__ logits, int64_t rows, int64_t experts,
                                 int64_t top_k, bool normed, float* __restrict__ routing) {
  await_previous_kernels();
  const int64_t r = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (r >= rows) return;
  route_row(logits + r * experts, experts, top_k, normed, routing + r * experts);
}

// Where a launch of kMoeExperts keeps its lists: the pairs (row, expert) grouped by expert, rows
// in order. Expert e's pairs are offset[e] .. offset[e + 1] - 1, pair p is row row[p], and
// pair_of[r x held + e] is row r's pair with expert e (-1: not routed).
struct ExpertPairs {
  int32_t* offset;   // [held + 1]
  int32_t* row;      // [capacity]
  int32_t* pair_of;  // [rows x held]
};

// The pairs of routing's columns first .. first + held - 1 that are not 0. One block: a thread
// counts an expert's rows, one thread adds the counts up, then each lists its expert's rows.
__global__ void moe_expert_pairs_kernel(const float* __restrict__ routing, int64_t rows,
                                        int64_t experts, int64_t first, int64_t held,
                                        ExpertPairs pairs) {
  await_previous_kernels();
  for (int64_t e = threadIdx.x; e < held; e += blockDim.x) {
    int32_t count = 0;
    for (int64_t r = 0; r < rows; ++r) count += routing[r * experts + first + e] != 0.f;
    pairs.offset[e + 1] = count;
  }
  __syncthreads();
  if (threadIdx.x == 0) {
    pairs.offset[0] = 0;
    for (int64_t e = 0; e < held; ++e) pairs.offset[e + 1] += pairs.offset[e];
  }
  __syncthreads();
  for (int64_t e = threadIdx.x; e < held; e += blockDim.x) {
    int32_t p = pairs.offset[e];
    for (int64_t r = 0; r < rows; ++r) {
      const bool routed = routing[r * experts + first + e] != 0.f;
      pairs.pair_of[r * held + e] = routed ? p : -1;
      if (routed) pairs.row[p++] = static_cast<int32_t>(r);
    }
  }
}

// Up to kExpertsPerLaunch experts' weights of one kind, [out, in] each.
template <typename W>
struct ExpertWeightTable {
  const W* w[kExpertsPerLaunch];
};

// Each pair's dot products with column `column` of one or two experts' weights (gate and up), a
// warp a column, kPairsAtOnce pairs at a time; `write(pair, a, b)` gets the sums (b: 0 without a
// second weight). Pair p's input row is in(p).
template <typename W, typename Input, typename Write>
__device__ __forceinline__ void pair_products(const W* a, const W* b, int64_t column, int64_t k,
                                              int32_t begin, int32_t end, Input in, Write write) {
  const unsigned lane = threadIdx.x % 32;
  const W* wa = a + column * k;
  const W* wb = b == nullptr ? nullptr : b + column * k;
  for (int32_t p0 = begin; p0 < end; p0 += kPairsAtOnce) {
    float sa[kPairsAtOnce] = {}, sb[kPairsAtOnce] = {};
    const float* rows[kPairsAtOnce];
    for (int i = 0; i < kPairsAtOnce; ++i) rows[i] = in(p0 + i < end ? p0 + i : p0);
    for (int64_t j = lane; j < k; j += 32) {
      const float va = widen(wa[j]), vb = wb == nullptr ? 0.f : widen(wb[j]);
#pragma unroll
      for (int i = 0; i < kPairsAtOnce; ++i) {
        sa[i] += va * rows[i][j];
        sb[i] += vb * rows[i][j];
      }
    }
#pragma unroll
    for (int i = 0; i < kPairsAtOnce; ++i) {
      const float ta = warp_sum(sa[i]), tb = warp_sum(sb[i]);
      if (lane == 0 && p0 + i < end) write(p0 + i, ta, tb);
    }
  }
}

// act[p, c] = silu(gate_e(x[row p])[c]) x up_e(x[row p])[c] for experts first_held ..
// first_held + gridDim.y - 1 (blockIdx.y the expert in the tables), a warp a column c of `inter`.
// The gradient keeps gate_e(x) and up_e(x) too, in `kept_gate` and `kept_up` (null: not kept).
template <typename W>
__global__ void __launch_bounds__(kMoeThreads)
    moe_gate_up_kernel(const float* __restrict__ x, int64_t hidden, int64_t inter,
                       ExpertWeightTable<W> gate, ExpertWeightTable<W> up, int64_t first_held,
                       const int32_t* __restrict__ offset, const int32_t* __restrict__ row,
                       float* __restrict__ act, float* __restrict__ kept_gate = nullptr,
                       float* __restrict__ kept_up = nullptr) {
  await_previous_kernels();
  const int64_t e = first_held + blockIdx.y;
  const int64_t column = static_cast<int64_t>(blockIdx.x) * kMoeWarps + threadIdx.x / 32;
  if (column >= inter) return;
  pair_products(
      gate.w[blockIdx.y], up.w[blockIdx.y], column, hidden, offset[e], offset[e + 1],
      [&](int32_t p) { return x + static_cast<int64_t>(row[p]) * hidden; },
      [&](int32_t p, float g, float u) {
        act[p * inter + column] = silu(g) * u;
        if (kept_gate != nullptr) {
          kept_gate[p * inter + column] = g;
          kept_up[p * inter + column] = u;
        }
      });
}

// down[p, c] = down_e(act[p])[c], as moe_gate_up_kernel's, a warp a column c of `hidden`.
template <typename W>
__global__ void __launch_bounds__(kMoeThreads)
    moe_down_kernel(const float* __restrict__ act, int64_t inter, int64_t hidden,
                    ExpertWeightTable<W> down_w, int64_t first_held,
                    const int32_t* __restrict__ offset, float* __restrict__ down) {
  await_previous_kernels();
  const int64_t e = first_held + blockIdx.y;
  const int64_t column = static_cast<int64_t>(blockIdx.x) * kMoeWarps + threadIdx.x / 32;
  if (column >= hidden) return;
  pair_products(
      down_w.w[blockIdx.y], static_cast<const W*>(nullptr), column, inter, offset[e], offset[e + 1],
      [&](int32_t p) { return act + static_cast<int64_t>(p) * inter; },
      [&](int32_t p, float d, float) { down[p * hidden + column] = d; });
}

}  // namespace
}  // namespace tfm::cuda
