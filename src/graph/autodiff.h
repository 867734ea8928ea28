// Reverse-mode differentiation over the IR: the backward pass is more nodes in the same graph, so
// a training step (forward, loss, backward) compiles into one plan per shape like any graph.
#pragma once

#include <vector>

#include "graph/graph.h"

namespace tfm::graph {

// Appends to `graph` the gradient of `y` with respect to each of `wrt`, given `dy`, the gradient
// flowing into y (a value of y's shape, usually an input: the loss scale). Returns one gradient
// value per entry of `wrt`. Runs on unfused graphs: planning fuses the result afterwards.
// Throws when a value in `wrt` does not influence `y`, or an op on the way has no backward rule.
std::vector<ValueId> append_backward(Graph& graph, ValueId y, ValueId dy,
                                     const std::vector<ValueId>& wrt);

// The same from several values at once, each given the gradient flowing into it (a loss whose
// gradient is already partly known: the output layer's, computed with the loss in chunks).
struct Seed {
  ValueId value, grad;
};
std::vector<ValueId> append_backward(Graph& graph, const std::vector<Seed>& seeds,
                                     const std::vector<ValueId>& wrt);

}  // namespace tfm::graph
