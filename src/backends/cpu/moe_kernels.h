// Mixture-of-experts kernels (graph::Op::kMoeExperts and its gradient): each expert's products
// over only the rows routed to it, gathered, so an expert no row chose costs nothing and decode
// reads only the routed experts' weights.
#pragma once

#include <cstdint>
#include <vector>

#include "tfm/dtype.h"

namespace tfm::cpu {

// One expert's weights: gate and up [inter, hidden], down [hidden, inter], f32 or bf16.
struct ExpertWeights {
  const void* gate;
  const void* up;
  const void* down;
  DType dtype;
};

// The shape of a mixture-of-experts layer: rows of x, hidden size, routing columns (every
// expert's), expert intermediate size, and the experts held: routing columns [first, first +
// held) (all, or one rank's under expert parallelism).
struct MoeShape {
  int64_t rows, hidden, experts, inter, first, held;
};

// out [rows, hidden] = the sum over the held experts e with routing[r, e] != 0 of
// routing[r, e] * down_e(silu(gate_e(x_r)) * up_e(x_r)).
void moe_experts(const float* x, const float* routing, const std::vector<ExpertWeights>& w,
                 const MoeShape& s, float* out);
// out = [dx | d routing (the held experts' columns; zeros elsewhere) | each held expert's d gate,
// d up, d down], f32.
void moe_experts_grad(const float* x, const float* routing, const std::vector<ExpertWeights>& w,
                      const float* dy, const MoeShape& s, float* out);

}  // namespace tfm::cpu
