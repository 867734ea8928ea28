// Reverse-mode differentiation over the IR, applying each op's backward rule (backward.h) in
// reverse: the backward pass is more nodes in the same graph, so a training step (forward, loss,
// backward) compiles into one plan per shape like any graph.
#pragma once

#include <vector>

#include "graph/graph.h"

namespace tfm::ops {

// Appends to `graph` the gradient of `y` with respect to each of `wrt`, given `dy`, the gradient
// flowing into y (a value of y's shape, usually an input: the loss scale). Returns one gradient
// value per entry of `wrt`. Runs on unfused graphs: planning fuses the result afterwards.
// Throws when a value in `wrt` does not influence `y`, or an op on the way has no backward rule.
std::vector<graph::ValueId> append_backward(graph::Graph& graph, graph::ValueId y,
                                            graph::ValueId dy,
                                            const std::vector<graph::ValueId>& wrt);

// The same from several values at once, each given the gradient flowing into it (a loss whose
// gradient is already partly known: the output layer's, computed with the loss in chunks).
struct Seed {
  graph::ValueId value, grad;
};
std::vector<graph::ValueId> append_backward(graph::Graph& graph, const std::vector<Seed>& seeds,
                                            const std::vector<graph::ValueId>& wrt);

}  // namespace tfm::ops
