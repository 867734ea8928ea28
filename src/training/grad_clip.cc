#include "training/grad_clip.h"

#include <cmath>

#include "graph/backend.h"

namespace tfm::training {

double grad_norm(std::span<const float> grads, Device device) {
  return std::sqrt(
      graph::backend_for(device).sum_squares(grads.data(), static_cast<int64_t>(grads.size())));
}

double clip_grad_norm(std::span<float> grads, double max_norm, Device device) {
  const double norm = grad_norm(grads, device);
  clip_to_norm(grads, norm, max_norm, device);
  return norm;
}

void clip_to_norm(std::span<float> grads, double norm, double max_norm, Device device) {
  // torch forms the coefficient from its f32 norm tensor in f32.
  const float coef = static_cast<float>(max_norm) / (static_cast<float>(norm) + 1e-6f);
  // Written as "not >= 1" so a NaN coefficient propagates as torch's clamp-and-multiply does.
  if (!(coef >= 1.0f)) {
    graph::backend_for(device).scale(grads.data(), coef, static_cast<int64_t>(grads.size()));
  }
}

}  // namespace tfm::training
