// A graph of basic ops (static shapes) as a StableHLO module, in the subset AWS Neuron's compiler
// takes: no variadic reduce, no while/cond, no sort, no dynamic shapes; i32 indices; bf16/f32
// arithmetic (products and norms computed in f32, as the kernel backends do).
#pragma once

#include <set>
#include <string>
#include <vector>

#include "graph/graph.h"

namespace tfm::pjrt {

struct Module {
  std::string text;
  // The function's arguments, in order: the graph's inputs (Graph::inputs() order), then its
  // weights (kWeight nodes in node order).
  std::vector<graph::ValueId> arguments;
  // Its results: the graph's outputs, then each Graph::updates value, whose result aliases the
  // state's argument (donated: the update is written where the state was).
  size_t outputs = 0;
};

Module emit_stablehlo(const graph::Graph& graph);

// The ops a module's text uses ("stablehlo.add", "func.return", ...).
std::set<std::string> op_names(const std::string& module_text);
// What every module tfm emits may use: the StableHLO forms of the operators AWS Neuron lists as
// supported (`neuron-cc list-operators --framework XLA`, in Neuron's documentation: reduce only
// over add, mul, min or max from a constant; gather and scatter with disjoint index maps), and
// the structural ops (func.return, a region's stablehlo.return).
const std::set<std::string>& neuron_ops();

}  // namespace tfm::pjrt
