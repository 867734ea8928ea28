// What the CPU's steps (steps.h) share: each value's buffer looked up when the step runs, and
// operands widened to f32 for the kernels that read f32.
#pragma once

#include <cstdint>
#include <vector>

#include "backends/cpu/scratch.h"
#include "graph/graph.h"

namespace tfm::cpu {

// A step's buffers by value id, read when the step runs: the executable binds them after its
// steps are made, and moves some (in-place steps) while it runs.
class StepBuffers {
 public:
  StepBuffers(std::vector<void*>& ptrs, graph::ValueId out)
      : ptrs_(&ptrs), out_(static_cast<size_t>(out)) {}
  void* ptr(graph::ValueId v) const { return (*ptrs_)[static_cast<size_t>(v)]; }
  float* f(graph::ValueId v) const { return static_cast<float*>(ptr(v)); }
  const int32_t* i32(graph::ValueId v) const { return static_cast<const int32_t*>(ptr(v)); }
  // The step's own result; an in-place step points it at the buffer it writes.
  void*& out() const { return (*ptrs_)[out_]; }
  float* out_f32() const { return static_cast<float*>(out()); }

 private:
  std::vector<void*>* ptrs_;
  size_t out_;
};

inline const graph::Node& node_of(const graph::Graph& graph, graph::ValueId v) {
  return graph.nodes[static_cast<size_t>(v)];
}

// Rows of a tensor of `shape`: all but its last dimension.
inline int64_t rows_of(const Shape& shape) { return shape_numel(shape) / shape.back(); }

// An operand of a matrix product as f32: itself, or (bf16 under autocast) widened into `widened`.
// The products of bf16 values are exact in f32, so this matches a bf16 product accumulated in f32.
const float* f32_operand(const void* data, DType dtype, int64_t count, Scratch& widened);

// Elements first .. first + count - 1 of `data` as f32, as f32_operand gives them.
const float* f32_range(const void* data, DType dtype, int64_t first, int64_t count,
                       Scratch& widened);

}  // namespace tfm::cpu
