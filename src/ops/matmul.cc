#include "graph/op_args.h"
#include "ops/backward.h"
#include "ops/reference.h"
#include "tfm/error.h"

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

// y = x w^T + bias: dx = dy w, dw = dy^T x, dbias = the sum of dy over rows. Products of bf16
// operands (autocast) take dy in bf16 too, as torch's autocast backward does. Their dx is bf16 too
// where x is an elementwise chain's result cast to bf16 (in these models the MLP's gating, whose
// gradient torch keeps in bf16): the chain's backward widens it as it loads it
// (graph::fold_widening_casts); and where x is attention's output cast to bf16 (the output
// product's rows), whose backward reads it as it is (is_attention_output). Elsewhere dx stays f32,
// for the norms' backward and for the sums of several products' gradients.
InputGrads linear_backward(graph::Builder& b, const graph::Node& n, graph::ValueId dy) {
  // n and x may be nodes of b's graph, which moves as nodes are added: read them first.
  const graph::LinearArgs a = graph::linear_args(n);
  if (a.residual >= 0)
    throw Error("[autodiff] a linear with its residual folded in has no backward");
  const graph::ValueId x_id = a.x, w = a.w;
  const graph::Node& x = b.node(x_id);
  const DType operands = x.dtype;
  const bool narrow_dx =
      operands == DType::bf16 && x.op == graph::Op::kCast &&
      (b.node(x.inputs[0]).op == graph::Op::kElementwise || is_attention_output(b, x.inputs[0]));
  const graph::ValueId dy_operand = b.node(dy).dtype == operands ? dy : b.cast(dy, operands);
  InputGrads grads{b.linear_grad_input(dy_operand, w, narrow_dx ? operands : DType::f32),
                   b.linear_grad_weight(dy_operand, x_id)};
  if (a.bias >= 0) grads.push_back(b.reduce_rows(dy));
  return grads;
}

}  // namespace tfm::ops
