#include "ops/backward.h"
#include "ops/reference.h"

namespace tfm::ops::reference {

void linear(const float* x, const float* w, const float* bias, int64_t m, int64_t n, int64_t k,
            float* out) {
  for (int64_t i = 0; i < m; ++i) {
    for (int64_t j = 0; j < n; ++j) {
      double acc = bias != nullptr ? bias[j] : 0.0;
      for (int64_t p = 0; p < k; ++p) acc += static_cast<double>(x[i * k + p]) * w[j * k + p];
      out[i * n + j] = static_cast<float>(acc);
    }
  }
}

}  // namespace tfm::ops::reference

namespace tfm::ops {

// y = x w^T + bias + residual: dx = dy w, dw = dy^T x, dbias = the sum of dy over rows,
// dresidual = dy. Products of bf16
// operands (autocast) take dy in bf16 too, as torch's autocast backward does.
InputGrads linear_backward(graph::Builder& b, const graph::Node& n, graph::ValueId dy) {
  const DType operands = b.node(n.inputs[0]).dtype;
  const graph::ValueId dy_operand = b.node(dy).dtype == operands ? dy : b.cast(dy, operands);
  InputGrads grads{b.linear_grad_input(dy_operand, n.inputs[1]),
                   b.linear_grad_weight(dy_operand, n.inputs[0])};
  if (n.inputs.size() > (n.residual ? 3u : 2u)) grads.push_back(b.reduce_rows(dy));
  if (n.residual) grads.push_back(dy);
  return grads;
}

}  // namespace tfm::ops
