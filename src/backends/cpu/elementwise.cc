// Fused elementwise chains: the program runs over blocks small enough to stay in L1, so a chain
// of N ops reads its inputs and writes its output once instead of N times.
#include <cmath>

#include "backends/cpu/kernels.h"
#include "backends/cpu/vector_kernels.h"
#include "tfm/error.h"

namespace tfm::cpu {
namespace {

constexpr int64_t kBlock = 256;
constexpr int kMaxStack = kElementwiseLimits.depth;

void run_block(const graph::ElementwiseProgram& program, const float* const* inputs, int64_t begin,
               int64_t len, float* out, float* second) {
  float stack[kMaxStack][kBlock];
  int top = -1;
  for (const graph::EwInstr& instr : program.instrs) {
    switch (instr.code) {
      case graph::EwCode::kLoad: {
        const float* src = inputs[instr.operand] + begin;
        ++top;
        for (int64_t i = 0; i < len; ++i) stack[top][i] = src[i];
        break;
      }
      case graph::EwCode::kAdd:
        --top;
        for (int64_t i = 0; i < len; ++i) stack[top][i] += stack[top + 1][i];
        break;
      case graph::EwCode::kMul:
        --top;
        for (int64_t i = 0; i < len; ++i) stack[top][i] *= stack[top + 1][i];
        break;
      case graph::EwCode::kSilu:
        vector_kernels().silu(stack[top], len);
        break;
      case graph::EwCode::kScale:
        for (int64_t i = 0; i < len; ++i) stack[top][i] *= instr.scalar;
        break;
      case graph::EwCode::kSiluGrad:
        --top;
        vector_kernels().silu_grad(stack[top], stack[top + 1], len);
        break;
    }
  }
  for (int64_t i = 0; i < len; ++i) out[begin + i] = stack[0][i];
  if (program.results == 2) {
    for (int64_t i = 0; i < len; ++i) second[begin + i] = stack[1][i];
  }
}

}  // namespace

void elementwise(const graph::ElementwiseProgram& program, const float* const* inputs,
                 int64_t count, float* out, float* second) {
  if (graph::program_depth(program) > kMaxStack) {
    throw Error("[elementwise] fused chain needs more than " + std::to_string(kMaxStack) +
                " temporaries");
  }
  if ((program.results == 2) != (second != nullptr) || program.results > 2) {
    throw Error("[elementwise] a program of " + std::to_string(program.results) +
                " results needs as many outputs");
  }
  const int64_t blocks = (count + kBlock - 1) / kBlock;
#pragma omp parallel for schedule(static) if (count > kParallelMinElements)
  for (int64_t b = 0; b < blocks; ++b) {
    const int64_t begin = b * kBlock;
    run_block(program, inputs, begin, std::min(kBlock, count - begin), out, second);
  }
}

}  // namespace tfm::cpu
