// The CPU backend: its fusion pipeline and memory plan (src/fusion), and an executor that runs a
// plan as a flat list of kernel calls over one arena.
#pragma once

#include <memory>

#include "fusion/pipeline.h"
#include "graph/backend.h"

namespace tfm::cpu {

graph::Backend& cpu_backend();

// What the CPU's kernels tell the fusion passes and the planner.
const fusion::Target& cpu_target();
// The passes the CPU backend runs, in order.
fusion::Pipeline cpu_pipeline();
// The plan the CPU backend runs for `graph` (its pipeline when `fuse`, else the basic ops), and an
// executable of a plan: what compile() does, in two halves, for tests and benchmarks.
fusion::Plan cpu_plan(graph::Graph graph, bool fuse = true);
std::unique_ptr<graph::Executable> cpu_executable(fusion::Plan plan);

}  // namespace tfm::cpu
