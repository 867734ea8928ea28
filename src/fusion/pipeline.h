// A kernel backend's compiler: the passes it chooses, in the order it lists them, then the
// schedule and the memory plan. The list is data: a backend's pipeline() says which passes run
// and when (backends/cpu/cpu_pipeline.cc, backends/cuda/cuda_pipeline.cc).
#pragma once

#include <vector>

#include "fusion/plan.h"
#include "fusion/target.h"
#include "graph/graph.h"

namespace tfm::fusion {

struct Pass {
  const char* name;
  void (*run)(graph::Graph& graph, const Target& target);
};
using Pipeline = std::vector<Pass>;

// Runs `passes` over the graph in order, then schedules it and places its buffers. With no
// passes the plan runs the graph's basic ops as they are.
Plan compile(graph::Graph graph, const Pipeline& passes, const Target& target);

// Every pass, in an order that works for both kernel backends: the product and attention fusions
// first (they look for the basic ops models build), then the elementwise fusion, then the folds,
// each after the passes whose forms it looks for (see passes.h).
Pipeline standard_pipeline();

}  // namespace tfm::fusion
