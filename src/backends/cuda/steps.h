// Turns one graph node into kernel launches on a stream, over pointers looked up when the step
// runs, so the compiled executable (captured into a CUDA Graph) and eager mode launch the same
// kernels.
#pragma once

#include <cuda_runtime.h>

#include <functional>
#include <vector>

#include "backends/cuda/kernels.h"
#include "backends/cuda/matmul.h"
#include "fusion/plan.h"
#include "graph/graph.h"
#include "graph/op_args.h"
#include "tfm/kernel_options.h"

namespace tfm::cuda {

// Where the planner starts each buffer: what cuBLASLt assumes of an operand by default.
inline constexpr size_t kArenaAlignment = 256;

struct StepContext {
  std::vector<void*>& ptrs;  // each value's device buffer by node index
  void* scratch;             // scratch_bytes() of the largest step, reused by every step
  void* workspace;           // kMatmulWorkspaceBytes for cuBLASLt
  cudaStream_t stream;
};

using Step = std::function<void(StepContext&)>;

// A value's device buffer as the step reads it, looked up when the step runs.
inline float* f32_at(StepContext& c, size_t i) { return static_cast<float*>(c.ptrs[i]); }
inline const int32_t* i32_at(StepContext& c, size_t i) {
  return static_cast<const int32_t*>(c.ptrs[i]);
}

// What the step builders read off the graph: the product of every axis but the last; a value's
// node and its place in StepContext::ptrs (a node's inputs come from graph/op_args.h); an
// attention (or attention gradient) node's sizes from its q and k inputs.
int64_t rows_of(const Shape& shape);
const graph::Node& node_of(const graph::Graph& graph, graph::ValueId id);
inline size_t slot(graph::ValueId id) { return static_cast<size_t>(id); }
AttentionShape attention_shape(const graph::Graph& graph, const graph::Node& n);
// What cuBLASLt may assume of a matrix operand (matmul.h): the value's start alignment on every
// run and its rows' (or one starting `start_alignment`-aligned with rows of `row_bytes`).
MatmulOperand matmul_operand(const graph::Graph& graph, graph::ValueId id, bool transposed);
MatmulOperand matmul_operand(uint32_t start_alignment, uint64_t row_bytes, bool transposed);

// A fused elementwise chain over `inputs` inputs as the kernel runs it; throws when the chain is
// longer, reads more inputs or writes more results than the kernel holds.
EwKernelProgram to_kernel_program(const graph::ElementwiseProgram& program, size_t inputs);

// Chooses kernels and cuBLASLt algorithms now (compile time), as `kernels` says where it has a
// say; throws for ops without a kernel. `plan`: the compiled plan the graph belongs to (its arena
// placement decides what steps may fuse), or null in eager mode.
size_t scratch_bytes(const graph::Graph& graph, graph::ValueId id, const fusion::Plan* plan,
                     const KernelOptions& kernels);
Step make_step(const graph::Graph& graph, graph::ValueId id, const fusion::Plan* plan,
               const KernelOptions& kernels);

}  // namespace tfm::cuda
