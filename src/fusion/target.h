// What a kernel backend tells the fusion passes and the memory planner about its kernels: the
// passes fold and fuse only into steps the backend can run, and the planner aligns buffers as its
// kernels (and the libraries they call) assume.
#pragma once

#include <cstddef>

#include "graph/graph.h"

namespace tfm::fusion {

// The largest fused elementwise chain the backend's kernel runs: temporaries it keeps per
// element, instructions, distinct inputs. fuse_elementwise stops before a chain needs more.
struct ElementwiseLimits {
  int depth = 8;
  int instrs = 32;
  int inputs = 12;
};

struct Target {
  const char* name = "";
  // Whether a step's kernel writes bf16 as readily as f32 (fold_casts makes it do so).
  bool (*writes_bf16)(const graph::Graph& graph, const graph::Node& node) = nullptr;
  ElementwiseLimits elementwise;
  // Where each buffer starts in the arena: a multiple of this many bytes.
  size_t alignment = 256;
};

// The steps the CPU and the CUDA kernels both write in bf16: norms, RoPE and its gradient,
// elementwise chains, the norm's and the loss's gradients, and attention under autocast (bf16 q).
bool default_writes_bf16(const graph::Graph& graph, const graph::Node& node);

}  // namespace tfm::fusion
