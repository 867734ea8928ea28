// Gradient clipping by global norm, as torch.nn.utils.clip_grad_norm_ does it over all parameters:
// the L2 norm of every gradient taken as one vector, scaled down to `max_norm` when above it. The
// gradients live on `device`, whose backend does the arithmetic.
#pragma once

#include <span>

#include "tfm/device.h"

namespace tfm::training {

// The L2 norm of `grads`, summed in double over fixed chunks added in order, so the result has the
// same bits for any thread count and a re-run or resumed step clips identically.
double grad_norm(std::span<const float> grads, Device device = kCpu);

// Scales `grads` by max_norm / (norm + 1e-6) when that is below 1 and returns the norm before
// clipping. A non-finite norm scales them as torch does (to NaN, or to 0 for an infinite norm):
// the caller sees the returned norm and can skip the step.
double clip_grad_norm(std::span<float> grads, double max_norm, Device device = kCpu);
// The scaling of clip_grad_norm for a norm already known (one taken over several processes).
void clip_to_norm(std::span<float> grads, double norm, double max_norm, Device device = kCpu);

}  // namespace tfm::training
