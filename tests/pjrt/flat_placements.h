// The Trainer's layout of a training step's graph, as the PJRT tests build it: every matrix weight
// a part of one flat buffer (0) and every gradient (the state inputs) a part of another (1).
#pragma once

#include "backends/pjrt/stablehlo.h"
#include "graph/graph.h"

namespace tfm::testing {

inline pjrt::Placements flat_placements(const graph::Graph& step, bool matrices_only = false) {
  pjrt::Placements flat;
  int64_t weights = 0, grads = 0;
  for (size_t i = 0; i < step.nodes.size(); ++i) {
    const graph::Node& n = step.nodes[i];
    if (n.op == graph::Op::kWeight && (!matrices_only || n.shape.size() > 1)) {
      flat[static_cast<graph::ValueId>(i)] = {0, weights, 0};
      weights += shape_numel(n.shape);
    } else if (n.is_state) {
      flat[static_cast<graph::ValueId>(i)] = {1, grads, 0};
      grads += shape_numel(n.shape);
    }
  }
  for (auto& [id, p] : flat) p.size = p.buffer == 0 ? weights : grads;
  return flat;
}

}  // namespace tfm::testing
