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

// Values [begin, begin + len) of `from` into the f32 block `to`, or back.
void load_block(Floats from, int64_t begin, int64_t len, float* to) {
  const size_t elem = dtype_size(from.dtype);
  convert_elements(static_cast<const char*>(from.data) + static_cast<size_t>(begin) * elem,
                   from.dtype, to, DType::f32, static_cast<size_t>(len));
}

void store_block(const float* from, int64_t begin, int64_t len, void* to, DType dtype) {
  const size_t elem = dtype_size(dtype);
  convert_elements(from, DType::f32, static_cast<char*>(to) + static_cast<size_t>(begin) * elem,
                   dtype, static_cast<size_t>(len));
}

void run_block(const graph::ElementwiseProgram& program, const Floats* inputs, int64_t begin,
               int64_t len, void* out, DType out_dtype, void* second) {
  float stack[kMaxStack][kBlock];
  int top = -1;
  for (const graph::EwInstr& instr : program.instrs) {
    switch (instr.code) {
      case graph::EwCode::kLoad:
        load_block(inputs[instr.operand], begin, len, stack[++top]);
        break;
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
  store_block(stack[0], begin, len, out, out_dtype);
  if (program.results == 2) store_block(stack[1], begin, len, second, out_dtype);
}

}  // namespace

void elementwise(const graph::ElementwiseProgram& program, const Floats* inputs, int64_t count,
                 void* out, DType out_dtype, void* second) {
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
    run_block(program, inputs, begin, std::min(kBlock, count - begin), out, out_dtype, second);
  }
}

}  // namespace tfm::cpu
