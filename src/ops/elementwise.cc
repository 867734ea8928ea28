#include <cmath>
#include <vector>

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
      }
    }
    TFM_CHECK(stack.size() == 1, "[elementwise] malformed program");
    out[i] = static_cast<float>(stack.back());
  }
}

}  // namespace tfm::ops::reference
