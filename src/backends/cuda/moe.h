// The mixture-of-experts launchers (graph::Op::kMoeRoute and kMoeExperts; kernels in
// moe_kernels.cuh). Router logits, routing weights, activations and results are f32; the experts'
// weights f32 or bf16.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>
#include <vector>

#include "tfm/dtype.h"

namespace tfm::cuda {

// routing [rows, experts] = ops::route_row of each row of logits.
void moe_route(const float* logits, int64_t rows, int64_t experts, int64_t top_k, bool normed,
               float* routing, cudaStream_t stream);

// A kMoeExperts node's sizes: x [rows, hidden], routing [rows, experts] whose columns first ..
// first + held - 1 are the experts held (each gate and up [inter, hidden], down [hidden, inter]).
// `pairs` bounds the (row, expert) pairs routing holds: rows x the most experts a row chooses.
struct MoeExpertsShape {
  int64_t rows, hidden, inter, experts, first, held, pairs;
};
// Each held expert's weights, in order.
struct MoeExpertWeights {
  std::vector<const void*> gate, up, down;
  DType dtype;
};

size_t moe_experts_scratch_bytes(const MoeExpertsShape& s);
// out [rows, hidden] = kMoeExperts of x and routing: each held expert's products over only the
// rows routed to it, added row by row in expert order.
void moe_experts(const float* x, const float* routing, const MoeExpertWeights& w,
                 const MoeExpertsShape& s, void* scratch, float* out, cudaStream_t stream);

}  // namespace tfm::cuda
