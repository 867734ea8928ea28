// The CPU steps of the matrix products (graph::Op::kLinear, kGatedLinear, kQkvLinear) and of their
// gradients (kLinearGradInput, kLinearGradWeight).
#pragma once

#include <functional>
#include <vector>

#include "graph/graph.h"

namespace tfm::cpu {

// As make_step (steps.h), for a product or a product's gradient.
std::function<void()> make_product_step(const graph::Graph& graph, graph::ValueId id,
                                        std::vector<void*>& ptrs);

}  // namespace tfm::cpu
