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

// Experts split over ranks that exchange rows (graph::Op::kMoeDispatch, kMoeSlots, kMoeCombine
// and their gradients), each pair at its slot (ops::exchange_slots: `slots`, rows x experts).
struct Exchange {
  const std::vector<int64_t>& slots;
  int64_t rows, experts, held;  // held: experts a rank holds
};
// out [slots, hidden]: each taken slot's row of x, zeros elsewhere.
void moe_dispatch(const float* x, const Exchange& e, int64_t hidden, int64_t slot_count,
                  float* out);
// out [slots, held]: each taken slot's expert one-hot over its rank's experts.
void moe_slots(const Exchange& e, int64_t slot_count, float* out);
// out [rows, hidden] = the sum over a row's slots of routing x y's slot row.
void moe_combine(const float* y, const float* routing, const Exchange& e, int64_t hidden,
                 float* out);
// dx [rows, hidden]: each row the sum of its slots' dy rows.
void moe_dispatch_grad(const float* dy, const Exchange& e, int64_t hidden, float* dx);
// out = [d y (slots x hidden) | d routing (rows x experts)].
void moe_combine_grad(const float* y, const float* routing, const float* dy, const Exchange& e,
                      int64_t hidden, int64_t slot_count, float* out);

}  // namespace tfm::cpu
