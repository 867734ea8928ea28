#include "backends/cuda/cuda_status.h"
#include "backends/cuda/float_types.cuh"
#include "backends/cuda/moe.h"
#include "backends/cuda/moe_grad_kernels.cuh"
#include "backends/cuda/moe_kernels.cuh"

namespace tfm::cuda {
namespace {

// Where moe_experts (and its gradient, which keeps the gate and up products too) keeps its pairs
// and its products' results in the scratch.
struct ExpertsScratch {
  ExpertPairs pairs;
  float* act;             // [pairs, inter]
  float* down;            // [pairs, hidden]; the gradient's d x of each pair once it has d routing
  float* gate = nullptr;  // [pairs, inter], then d gate
  float* up = nullptr;    // [pairs, inter], then d up
  size_t bytes;

  ExpertsScratch(const MoeExpertsShape& s, void* base, bool gradient) {
    auto* at = static_cast<char*>(base);
    size_t used = 0;
    const auto take = [&](size_t bytes) {
      char* p = at == nullptr ? nullptr : at + used;
      used += scratch_aligned(bytes);
      return p;
    };
    const auto pairs_count = static_cast<size_t>(s.pairs);
    pairs.offset = reinterpret_cast<int32_t*>(take(sizeof(int32_t) * (s.held + 1)));
    pairs.row = reinterpret_cast<int32_t*>(take(sizeof(int32_t) * pairs_count));
    pairs.pair_of = reinterpret_cast<int32_t*>(take(sizeof(int32_t) * s.rows * s.held));
    act = reinterpret_cast<float*>(take(sizeof(float) * pairs_count * s.inter));
    down = reinterpret_cast<float*>(take(sizeof(float) * pairs_count * s.hidden));
    if (gradient) {
      gate = reinterpret_cast<float*>(take(sizeof(float) * pairs_count * s.inter));
      up = reinterpret_cast<float*>(take(sizeof(float) * pairs_count * s.inter));
    }
    bytes = used;
  }
};

// The held experts' weights of each kind, at most kExpertsPerLaunch from `begin`, as a kernel
// takes them.
template <typename W>
struct LaunchWeights {
  ExpertWeightTable<W> gate{}, up{}, down{};
  unsigned experts;

  LaunchWeights(const MoeExpertWeights& w, int64_t begin, int64_t held)
      : experts(static_cast<unsigned>(std::min<int64_t>(kExpertsPerLaunch, held - begin))) {
    for (unsigned e = 0; e < experts; ++e) {
      const auto i = static_cast<size_t>(begin + e);
      gate.w[e] = static_cast<const W*>(w.gate[i]);
      up.w[e] = static_cast<const W*>(w.up[i]);
      down.w[e] = static_cast<const W*>(w.down[i]);
    }
  }
};

// Calls launch(LaunchWeights<W>, begin) for each launch's experts, W the weights' element type.
template <typename Launch>
void for_each_launch(const MoeExpertWeights& w, int64_t held, Launch&& launch) {
  with_float_type(w.dtype, "moe_experts", [&](auto weight_type) {
    using W = typename decltype(weight_type)::type;
    for (int64_t begin = 0; begin < held; begin += kExpertsPerLaunch) {
      launch(LaunchWeights<W>(w, begin, held), begin);
    }
  });
}

// The pairs, then each pair's gate and up products (kept when the scratch has room) and down
// product.
void forward_products(const float* x, const float* routing, const MoeExpertWeights& w,
                      const MoeExpertsShape& s, const ExpertsScratch& at, cudaStream_t stream) {
  moe_expert_pairs_kernel<<<1, kMoeThreads, 0, stream>>>(routing, s.rows, s.experts, s.first,
                                                         s.held, at.pairs);
  check_launch("moe_expert_pairs");
  for_each_launch(w, s.held, [&](const auto& lw, int64_t begin) {
    moe_gate_up_kernel<<<dim3{static_cast<unsigned>(blocks_for(s.inter, kMoeWarps)), lw.experts, 1},
                         kMoeThreads, 0, stream>>>(x, s.hidden, s.inter, lw.gate, lw.up, begin,
                                                   at.pairs.offset, at.pairs.row, at.act, at.gate,
                                                   at.up);
    check_launch("moe_gate_up");
    moe_down_kernel<<<dim3{static_cast<unsigned>(blocks_for(s.hidden, kMoeWarps)), lw.experts, 1},
                      kMoeThreads, 0, stream>>>(at.act, s.inter, s.hidden, lw.down, begin,
                                                at.pairs.offset, at.down);
    check_launch("moe_down");
  });
}

// out [rows, hidden] = the sum over each row's pairs of per_pair (times routing, when given).
void combine(const float* per_pair, const float* routing, const MoeExpertsShape& s,
             const ExpertsScratch& at, float* out, cudaStream_t stream) {
  moe_combine_pairs_kernel<<<blocks_for(s.rows * s.hidden, kMoeThreads), kMoeThreads, 0, stream>>>(
      per_pair, routing, s.rows, s.hidden, s.experts, s.first, s.held, at.pairs.pair_of, out);
  check_launch("moe_combine_pairs");
}

}  // namespace

void moe_route(const float* logits, int64_t rows, int64_t experts, int64_t top_k, bool normed,
               float* routing, cudaStream_t stream) {
  if (rows == 0) return;  // a grid of no blocks fails to launch
  moe_route_kernel<<<blocks_for(rows, kMoeThreads), kMoeThreads, 0, stream>>>(
      logits, rows, experts, top_k, normed, routing);
  check_launch("moe_route");
}

void moe_route_grad(const float* logits, const float* d_routing, int64_t rows, int64_t experts,
                    int64_t top_k, bool normed, float* d_logits, cudaStream_t stream) {
  if (rows == 0) return;
  moe_route_grad_kernel<<<blocks_for(rows, kMoeThreads), kMoeThreads, 0, stream>>>(
      logits, d_routing, rows, experts, top_k, normed, d_logits);
  check_launch("moe_route_grad");
}

size_t moe_experts_scratch_bytes(const MoeExpertsShape& s, bool gradient) {
  return ExpertsScratch(s, nullptr, gradient).bytes;
}

void moe_experts(const float* x, const float* routing, const MoeExpertWeights& w,
                 const MoeExpertsShape& s, void* scratch, float* out, cudaStream_t stream) {
  if (s.rows == 0) return;
  const ExpertsScratch at(s, scratch, false);
  forward_products(x, routing, w, s, at, stream);
  combine(at.down, routing, s, at, out, stream);
}

void moe_experts_grad(const float* x, const float* routing, const MoeExpertWeights& w,
                      const float* dy, const MoeExpertsShape& s, void* scratch, float* out,
                      cudaStream_t stream) {
  float* dx = out;
  float* d_routing = dx + s.rows * s.hidden;
  float* d_weights = d_routing + s.rows * s.experts;
  if (s.rows == 0) {
    const size_t projections = static_cast<size_t>(3 * s.held * s.inter * s.hidden);
    if (projections > 0) {
      TFM_CUDA(cudaMemsetAsync(d_weights, 0, projections * sizeof(float), stream));
    }
    return;
  }
  const ExpertsScratch at(s, scratch, true);
  forward_products(x, routing, w, s, at, stream);
  TFM_CUDA(cudaMemsetAsync(d_routing, 0, sizeof(float) * s.rows * s.experts, stream));
  moe_routing_grad_kernel<<<blocks_for(s.rows * s.held, kMoeWarps), kMoeThreads, 0, stream>>>(
      dy, at.down, s.rows, s.hidden, s.experts, s.first, s.held, at.pairs.pair_of, d_routing);
  check_launch("moe_routing_grad");
  for_each_launch(w, s.held, [&](const auto& lw, int64_t begin) {
    moe_act_grad_kernel<<<dim3{static_cast<unsigned>(blocks_for(s.inter, kMoeThreads)), lw.experts,
                               1},
                          kMoeThreads, 0, stream>>>(dy, routing, s.experts, s.first, s.hidden,
                                                    s.inter, lw.down, begin, at.pairs.offset,
                                                    at.pairs.row, at.gate, at.up);
    check_launch("moe_act_grad");
    // Each pair's d x over its down product, which d routing has read.
    moe_input_grad_kernel<<<dim3{static_cast<unsigned>(blocks_for(s.hidden, kMoeThreads)),
                                 lw.experts, 1},
                            kMoeThreads, 0, stream>>>(at.gate, at.up, s.hidden, s.inter, lw.gate,
                                                      lw.up, begin, at.pairs.offset, at.down);
    check_launch("moe_input_grad");
  });
  combine(at.down, nullptr, s, at, dx, stream);
  const ExpertGradSources sources{at.gate,  at.up,   at.act,          x,
                                  dy,       routing, at.pairs.offset, at.pairs.row,
                                  s.hidden, s.inter, s.experts,       s.first};
  moe_weight_grad_kernel<<<dim3{static_cast<unsigned>(blocks_for(s.inter * s.hidden, kMoeThreads)),
                                static_cast<unsigned>(s.held), 3},
                           kMoeThreads, 0, stream>>>(sources, d_weights);
  check_launch("moe_weight_grad");
}

}  // namespace tfm::cuda
