// The instruction set of fused elementwise chains (see ElementwiseProgram in graph.h), in a header
// of its own so device code can include it.
#pragma once

#include <cstdint>

namespace tfm::graph {

// kSiluGrad pops dy and x and pushes dy * silu'(x).
enum class EwCode : uint8_t { kLoad, kAdd, kMul, kSilu, kScale, kSiluGrad };

// Temporaries a backend keeps per element block, instructions and distinct inputs of a chain;
// fusion stops before a chain needs more.
inline constexpr int kMaxElementwiseDepth = 8;
inline constexpr int kMaxElementwiseInstrs = 32;
inline constexpr int kMaxElementwiseInputs = 12;

}  // namespace tfm::graph
