#include <cmath>

#include "graph/op_args.h"
#include "ops/backward.h"
#include "ops/reference.h"

namespace tfm::ops::reference {

void rms_norm(const float* x, const float* w, int64_t rows, int64_t hidden, float eps, float* out) {
  for (int64_t r = 0; r < rows; ++r) {
    const float* row = x + r * hidden;
    double sum_sq = 0;
    for (int64_t i = 0; i < hidden; ++i) sum_sq += static_cast<double>(row[i]) * row[i];
    const double inv_rms = 1.0 / std::sqrt(sum_sq / static_cast<double>(hidden) + eps);
    for (int64_t i = 0; i < hidden; ++i)
      out[r * hidden + i] = static_cast<float>(row[i] * inv_rms * w[i]);
  }
}

}  // namespace tfm::ops::reference

namespace tfm::ops {

InputGrads rms_norm_backward(graph::Builder& b, const graph::Node& n, graph::ValueId dy) {
  const graph::RmsNormArgs a = graph::rms_norm_args(n);
  return {b.rms_norm_grad_input(a.x, a.w, dy, n.eps), b.rms_norm_grad_weight(a.x, dy, n.eps)};
}

}  // namespace tfm::ops
