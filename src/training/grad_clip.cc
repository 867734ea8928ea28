#include "training/grad_clip.h"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <vector>

namespace tfm::training {
namespace {

constexpr int64_t kChunkElements = int64_t{1} << 15;

}  // namespace

double grad_norm(std::span<const float> grads) {
  const int64_t n = static_cast<int64_t>(grads.size());
  const int64_t num_chunks = (n + kChunkElements - 1) / kChunkElements;
  std::vector<double> partial(static_cast<size_t>(num_chunks), 0.0);
  const float* g = grads.data();
#pragma omp parallel for schedule(static)
  for (int64_t c = 0; c < num_chunks; ++c) {
    const int64_t end = std::min(n, (c + 1) * kChunkElements);
    double sum = 0.0;
    for (int64_t i = c * kChunkElements; i < end; ++i) sum += double{g[i]} * double{g[i]};
    partial[static_cast<size_t>(c)] = sum;
  }
  double total = 0.0;
  for (double sum : partial) total += sum;
  return std::sqrt(total);
}

double clip_grad_norm(std::span<float> grads, double max_norm) {
  const double norm = grad_norm(grads);
  clip_to_norm(grads, norm, max_norm);
  return norm;
}

void clip_to_norm(std::span<float> grads, double norm, double max_norm) {
  // torch forms the coefficient from its f32 norm tensor in f32.
  const float coef = static_cast<float>(max_norm) / (static_cast<float>(norm) + 1e-6f);
  // Written as "not >= 1" so a NaN coefficient propagates as torch's clamp-and-multiply does.
  if (!(coef >= 1.0f)) {
    const int64_t n = static_cast<int64_t>(grads.size());
    float* g = grads.data();
#pragma omp parallel for schedule(static)
    for (int64_t i = 0; i < n; ++i) g[i] *= coef;
  }
}

}  // namespace tfm::training
