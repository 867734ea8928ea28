// Turns one graph node into a call of its CPU kernel over pointers looked up at run time, so
// the compiled executable and eager mode run exactly the same kernels.
#pragma once

#include <functional>
#include <vector>

#include "graph/graph.h"

namespace tfm::cpu {

// `ptrs` holds each value's buffer by node index; the step reads it when it runs.
std::function<void()> make_step(const graph::Graph& graph, graph::ValueId id,
                                std::vector<void*>& ptrs);

}  // namespace tfm::cpu
