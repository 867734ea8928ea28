// Graph nodes that are matrix products on CUDA (graph::Op::kLinear, kQkvLinear, kGatedLinear),
// with the activations brought to what the kernel reads: the decode GEMVs for few rows, the
// tensor-core tiles for a few more, cuBLASLt otherwise.
#pragma once

#include "backends/cuda/steps.h"

namespace tfm::cuda {

// Scratch a product node needs on the path its kernel takes.
size_t product_scratch_bytes(const graph::Graph& graph, const graph::Node& n);

// The steps of the three products, writing value `out`.
Step linear_step(const graph::Graph& graph, const graph::Node& n, size_t out);
Step qkv_linear_step(const graph::Graph& graph, const graph::Node& n, size_t out);
Step gated_linear_step(const graph::Graph& graph, const graph::Node& n, size_t out);

}  // namespace tfm::cuda
