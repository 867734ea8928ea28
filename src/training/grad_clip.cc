#include "training/grad_clip.h"

#include <cmath>

#include "graph/backend.h"

namespace tfm::training {

double grad_norm(std::span<const float> grads, Device device) {
  return std::sqrt(
      graph::backend_for(device).sum_squares(grads.data(), static_cast<int64_t>(grads.size())));
}

float clip_coefficient(double norm, double max_norm) {
  // torch forms the coefficient from its f32 norm tensor in f32: max_norm / tensor is
  // Tensor.__rdiv__, the reciprocal times max_norm.
  const float coef = 1.0f / (static_cast<float>(norm) + 1e-6f) * static_cast<float>(max_norm);
  // A NaN coefficient fails the comparison and propagates, as torch's clamp-and-multiply does.
  return coef >= 1.0f ? 1.0f : coef;
}

}  // namespace tfm::training
