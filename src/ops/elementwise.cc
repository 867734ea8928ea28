#include <cmath>
#include <vector>

#include "ops/backward.h"
#include "ops/reference.h"
#include "tfm/error.h"

namespace tfm::ops::reference {

void elementwise(const graph::ElementwiseProgram& program, const float* const* inputs,
                 int64_t count, float* out) {
  std::vector<double> stack;
  for (int64_t i = 0; i < count; ++i) {
    stack.clear();
    for (const graph::EwInstr& instr : program.instrs) {
      switch (instr.code) {
        case graph::EwCode::kLoad:
          stack.push_back(inputs[instr.operand][i]);
          break;
        case graph::EwCode::kAdd: {
          double b = stack.back();
          stack.pop_back();
          stack.back() += b;
          break;
        }
        case graph::EwCode::kMul: {
          double b = stack.back();
          stack.pop_back();
          stack.back() *= b;
          break;
        }
        case graph::EwCode::kSilu:
          stack.back() = stack.back() / (1.0 + std::exp(-stack.back()));
          break;
        case graph::EwCode::kScale:
          stack.back() *= instr.scalar;
          break;
        case graph::EwCode::kSiluGrad: {
          const double dy = stack.back();
          stack.pop_back();
          const double x = stack.back(), sigmoid = 1.0 / (1.0 + std::exp(-x));
          stack.back() = dy * sigmoid * (1.0 + x * (1.0 - sigmoid));
          break;
        }
      }
    }
    TFM_CHECK(stack.size() == 1, "[elementwise] malformed program");
    out[i] = static_cast<float>(stack.back());
  }
}

}  // namespace tfm::ops::reference

namespace tfm::ops {

// Autodiff runs before fusion, so every program here is one operation over its loads.
InputGrads elementwise_backward(graph::Builder& b, const graph::Node& n, graph::ValueId dy) {
  const auto& code = n.program.instrs.back().code;
  if (n.program.instrs.size() != n.inputs.size() + 1)
    throw Error("[autodiff] elementwise '" + n.name + "' is already fused");
  switch (code) {
    case graph::EwCode::kAdd:
      return {dy, dy};
    case graph::EwCode::kMul:
      return {b.mul(dy, n.inputs[1]), b.mul(dy, n.inputs[0])};
    case graph::EwCode::kSilu:
      return {b.silu_grad(n.inputs[0], dy)};
    case graph::EwCode::kScale:
      return {b.scale(dy, n.program.instrs.back().scalar)};
    default:
      break;
  }
  throw Error("[autodiff] no backward rule for elementwise '" + n.name + "'");
}

}  // namespace tfm::ops
