// The mixture-of-experts gradient kernels (see moe_grad.cu), in a header of their own so
// tests/cuda_emulation can run them on the CPU: routing's (graph::Op::kMoeRouteGrad) a thread a
// row, and the experts' (kMoeExpertsGrad) over the pairs moe_kernels.cuh lists, each expert's
// products over only its rows, every sum in a fixed order.
#pragma once

#include "backends/cuda/moe_kernels.cuh"

namespace tfm::cuda {
namespace {

// d logits of each row: ops::route_row_grad. The row's routing weights are made in d_logits'
// row first, each then read and overwritten by the same thread.
__global__ void moe_route_grad_kernel(const float* __restrict__ logits,
                                      const float* __restrict__ d_routing, int64_t rows,
                                      int64_t experts, int64_t top_k, bool normed,
                                      float* __restrict__ d_logits) {
  await_previous_kernels();
  const int64_t r = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (r >= rows) return;
  const float* l = logits + r * experts;
  const float* dr = d_routing + r * experts;
  float* d = d_logits + r * experts;
  const RowSoftmax s = route_row(l, experts, top_k, normed, d);
  double dot = 0;
  for (int64_t e = 0; e < experts; ++e) {
    if (d[e] != 0.f) dot += static_cast<double>(d[e]) * dr[e];
  }
  // With normed, the weights are a softmax over the chosen logits alone; without, the chosen
  // entries of the full softmax, which every logit moves.
  for (int64_t e = 0; e < experts; ++e) {
    const float w = d[e], moved = normed ? w : s.at(l[e]);
    const double g = w != 0.f ? dr[e] : 0.0;
    d[e] = static_cast<float>(moved * (g - dot));
  }
}

// d routing[r, first + e] = dy[r] . down[pair], where row r is routed to held expert e: a warp a
// (row, expert). The other entries are left as they are (zeros: moe_experts_grad clears them).
__global__ void __launch_bounds__(kMoeThreads)
    moe_routing_grad_kernel(const float* __restrict__ dy, const float* __restrict__ down,
                            int64_t rows, int64_t hidden, int64_t experts, int64_t first,
                            int64_t held, const int32_t* __restrict__ pair_of,
                            float* __restrict__ d_routing) {
  await_previous_kernels();
  const int64_t i = static_cast<int64_t>(blockIdx.x) * kMoeWarps + threadIdx.x / 32;
  if (i >= rows * held) return;
  const int32_t p = pair_of[i];
  if (p < 0) return;
  const int64_t r = i / held, e = i % held;
  double dot = 0;
  for (int64_t h = threadIdx.x % 32; h < hidden; h += 32) {
    dot += static_cast<double>(dy[r * hidden + h]) * down[p * hidden + h];
  }
  dot = warp_sum(dot);
  if (threadIdx.x % 32 == 0) d_routing[r * experts + first + e] = static_cast<float>(dot);
}

// Each pair's products with the transposes of one or two experts' weights ([k, columns] each), a
// thread a column: write(p, a^T va(p) + b^T vb(p)) at `column`, kPairsAtOnce pairs at a time
// (b null: none).
template <typename W, typename InputA, typename InputB, typename Write>
__device__ __forceinline__ void pair_transposed_products(const W* a, const W* b, int64_t column,
                                                         int64_t k, int64_t columns, int32_t begin,
                                                         int32_t end, InputA va, InputB vb,
                                                         Write write) {
  for (int32_t p0 = begin; p0 < end; p0 += kPairsAtOnce) {
    float sums[kPairsAtOnce] = {};
    const float *ra[kPairsAtOnce], *rb[kPairsAtOnce];
    for (int i = 0; i < kPairsAtOnce; ++i) {
      const int32_t p = p0 + i < end ? p0 + i : p0;
      ra[i] = va(p);
      rb[i] = b == nullptr ? nullptr : vb(p);
    }
    for (int64_t j = 0; j < k; ++j) {
      const float wa = widen(a[j * columns + column]);
      const float wb = b == nullptr ? 0.f : widen(b[j * columns + column]);
#pragma unroll
      for (int i = 0; i < kPairsAtOnce; ++i) {
        sums[i] += wa * ra[i][j];
        if (b != nullptr) sums[i] += wb * rb[i][j];
      }
    }
    for (int i = 0; i < kPairsAtOnce && p0 + i < end; ++i) write(p0 + i, sums[i]);
  }
}

// The gradients of each pair's gate and up products, written over what moe_gate_up_kernel kept
// of them: with d act = routing x down_e^T dy[row], d up = d act x silu(gate) and d gate = d act x
// up x silu'(gate). A thread a column c of `inter`; blockIdx.y the expert in the table.
template <typename W>
__global__ void __launch_bounds__(kMoeThreads)
    moe_act_grad_kernel(const float* __restrict__ dy, const float* __restrict__ routing,
                        int64_t experts, int64_t first, int64_t hidden, int64_t inter,
                        ExpertWeightTable<W> down_w, int64_t first_held,
                        const int32_t* __restrict__ offset, const int32_t* __restrict__ row,
                        float* __restrict__ gate, float* __restrict__ up) {
  await_previous_kernels();
  const int64_t e = first_held + blockIdx.y;
  const int64_t column = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (column >= inter) return;
  pair_transposed_products(
      down_w.w[blockIdx.y], static_cast<const W*>(nullptr), column, hidden, inter, offset[e],
      offset[e + 1], [&](int32_t p) { return dy + static_cast<int64_t>(row[p]) * hidden; },
      [&](int32_t) { return static_cast<const float*>(nullptr); },
      [&](int32_t p, float sum) {
        const float d_act = routing[static_cast<int64_t>(row[p]) * experts + first + e] * sum;
        const int64_t i = p * inter + column;
        const float g = gate[i], sg = 1.f / (1.f + expf(-g));
        gate[i] = d_act * up[i] * sg * (1.f + g * (1.f - sg));
        up[i] = d_act * g * sg;
      });
}

// d x of each pair: gate_e^T d gate + up_e^T d up, a thread a column c of `hidden`.
template <typename W>
__global__ void __launch_bounds__(kMoeThreads)
    moe_input_grad_kernel(const float* __restrict__ d_gate, const float* __restrict__ d_up,
                          int64_t hidden, int64_t inter, ExpertWeightTable<W> gate,
                          ExpertWeightTable<W> up, int64_t first_held,
                          const int32_t* __restrict__ offset, float* __restrict__ dx) {
  await_previous_kernels();
  const int64_t e = first_held + blockIdx.y;
  const int64_t column = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (column >= hidden) return;
  pair_transposed_products(
      gate.w[blockIdx.y], up.w[blockIdx.y], column, inter, hidden, offset[e], offset[e + 1],
      [&](int32_t p) { return d_gate + static_cast<int64_t>(p) * inter; },
      [&](int32_t p) { return d_up + static_cast<int64_t>(p) * inter; },
      [&](int32_t p, float sum) { dx[p * hidden + column] = sum; });
}

// What moe_weight_grad_kernel reads for each held expert's weights: the pairs' gradients and
// inputs of its three products.
struct ExpertGradSources {
  const float* d_gate;   // [pairs, inter]
  const float* d_up;     // [pairs, inter]
  const float* act;      // [pairs, inter]
  const float* x;        // [rows, hidden], by row[pair]
  const float* dy;       // [rows, hidden], by row[pair], times the pair's routing weight
  const float* routing;  // [rows, experts]
  const int32_t* offset;
  const int32_t* row;
  int64_t hidden, inter, experts, first;
};

// Each held expert's d w_gate, d w_up ([inter, hidden]) and d w_down ([hidden, inter]), blockIdx.z
// which, blockIdx.y the expert: the sum over its pairs, in order, of the output's gradient times
// the input, a thread an element; zeros for an expert no row chose.
__global__ void moe_weight_grad_kernel(ExpertGradSources s, float* __restrict__ d_weights) {
  await_previous_kernels();
  const int64_t e = blockIdx.y, projection = s.inter * s.hidden;
  const int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i >= projection) return;
  const bool down = blockIdx.z == 2;
  const int64_t columns = down ? s.inter : s.hidden;
  const int64_t o = i / columns, c = i % columns;
  const float* d_out = blockIdx.z == 0 ? s.d_gate : s.d_up;
  float sum = 0.f;
  for (int32_t p = s.offset[e]; p < s.offset[e + 1]; ++p) {
    const int64_t r = s.row[p];
    if (down) {
      const float weight = s.routing[r * s.experts + s.first + e];
      sum += weight * s.dy[r * s.hidden + o] * s.act[p * s.inter + c];
    } else {
      sum += d_out[p * s.inter + o] * s.x[r * s.hidden + c];
    }
  }
  d_weights[(3 * e + blockIdx.z) * projection + i] = sum;
}

}  // namespace
}  // namespace tfm::cuda
