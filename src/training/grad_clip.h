// Gradient clipping by global norm, as torch.nn.utils.clip_grad_norm_ does it over all parameters:
// the L2 norm of every gradient taken as one vector, scaled down to `max_norm` when above it. The
// norm's sum of squares is a graph compiled for the gradients' device; AdamW::step applies the
// scaling as it reads them (clip_coefficient), with the bits scaling them first gives.
#pragma once

#include <memory>
#include <span>
#include <vector>

#include "graph/backend.h"
#include "tfm/device.h"
#include "training/adamw.h"

namespace tfm::training {

// The sum of the squares of `counted` ranges of flat gradients (f32 [total] on `device`): each
// range summed in double over fixed chunks added in order (graph::Op::kSumSquares), so the result
// has the same bits for any thread count and a re-run or resumed step clips identically.
// Its graph: the sum of the squares of the `counted` ranges of the state input "grads" [total].
graph::Graph squares_graph(const std::vector<ParamSegment>& counted, int64_t total);

class GradSquares {
 public:
  GradSquares(std::vector<ParamSegment> counted, int64_t total, Device device,
              const graph::Partitioning& partitioning = {});
  float operator()(const Tensor& grads) const;

 private:
  std::unique_ptr<graph::Executable> sum_;  // null when nothing is counted
};

// The L2 norm of gradients in host memory.
double grad_norm(std::span<const float> grads);

// What clipping scales gradients of norm `norm` by: max_norm / (norm + 1e-6) in f32 as torch forms
// it (1 / (norm + 1e-6), then times max_norm), when that is below 1; else 1. A non-finite norm
// gives what torch scales by (NaN, or 0 for an infinite norm), so the step's parameters show it.
float clip_coefficient(double norm, double max_norm);

}  // namespace tfm::training
