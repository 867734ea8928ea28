// The instruction set of fused elementwise chains (see ElementwiseProgram in graph.h), in a header
// of its own so device code can include it.
#pragma once

#include <cstdint>

namespace tfm::graph {

// kSiluGrad pops dy and x and pushes dy * silu'(x); kRoundBf16 rounds to the nearest bf16 value
// (kept as f32), what a bf16 autocast does to a matrix product's input.
enum class EwCode : uint8_t { kLoad, kAdd, kMul, kSilu, kScale, kSiluGrad, kRoundBf16 };

// Temporaries a backend keeps per element block; fusion stops before a chain needs more.
inline constexpr int kMaxElementwiseDepth = 8;

}  // namespace tfm::graph
