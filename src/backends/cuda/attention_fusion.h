// Folding a decode step's prepare_attention into the attention that reads its q, for a backend
// whose attention kernel can norm, rotate and store the step's one new token itself (the CUDA
// backend's decode kernel): one launch a layer fewer.
#pragma once

#include "fusion/plan.h"
#include "graph/graph.h"

namespace tfm::cuda {

// Whether the prepare_attention node `prepare` (one new token a row, f32) may be folded into
// its reader: q is read by one attention node alone, not a graph output, over the caches and
// slots prepare writes. In a compiled plan the fold also needs the token's q, k and v rows, which
// the planner takes to die with the prepare step, to survive until attention runs: nothing but
// views in between, and attention's output overlapping none of them, or lying exactly on q (the
// planner's usual choice: q's block starts the freed products' buffer and is as large; row r of
// the output is written only after every reader of q's row r). Eager mode (plan null) gives
// every value its own buffer.
bool prepare_folds_into_attention(const graph::Graph& graph, graph::ValueId prepare,
                                  const fusion::Plan* plan);

}  // namespace tfm::cuda
