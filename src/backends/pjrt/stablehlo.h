// A graph of basic ops (static shapes) as a StableHLO module, in the subset AWS Neuron's compiler
// takes: no variadic reduce, no while/cond, no sort, no dynamic shapes; i32 indices; bf16/f32
// arithmetic (products and norms computed in f32, as the kernel backends do).
#pragma once

#include <map>
#include <set>
#include <string>
#include <vector>

#include "graph/graph.h"

namespace tfm::pjrt {

// Where a graph input or weight lies when it is part of a larger device buffer (the Trainer's
// flat parameters and gradients, each weight a view into them): `start` elements into buffer
// number `buffer`, which holds `size` elements of the node's dtype. The nodes of one buffer share
// one module argument, the flat buffer, and are slices of it.
struct Placement {
  int buffer = 0;
  int64_t start = 0;
  int64_t size = 0;
  bool operator==(const Placement&) const = default;
};
using Placements = std::map<graph::ValueId, Placement>;

struct Module {
  std::string text;
  // The function's arguments, in order, each as the nodes it holds: a graph input or weight of
  // its own (the graph's inputs in Graph::inputs() order, then its kWeight nodes in node order),
  // or the nodes placed in one buffer, where the first of them comes.
  std::vector<std::vector<graph::ValueId>> arguments;
  // Its results: the graph's outputs, then the new value of each argument a state update writes
  // (in argument order), which aliases that argument: donated, the update is written where the
  // state was.
  size_t outputs = 0;
  std::vector<size_t> updated_arguments;
};

// A program partitioned over `devices` devices (XLA's SPMD): each argument's mhlo.sharding, by
// its first node (absent: whole on every device). The outputs come whole on every device; an
// updated argument's new value is split as the argument is.
struct Partitions {
  int devices = 1;
  std::map<graph::ValueId, std::string> arguments;
};

Module emit_stablehlo(const graph::Graph& graph, const Placements& placements = {},
                      const Partitions& partitions = {});

// The ops a module's text uses ("stablehlo.add", "func.return", ...).
std::set<std::string> op_names(const std::string& module_text);
// What every module tfm emits may use: the StableHLO forms of the operators AWS Neuron lists as
// supported (`neuron-cc list-operators --framework XLA`, in Neuron's documentation: reduce only
// over add, mul, min or max from a constant; gather and scatter with disjoint index maps), and
// the structural ops (func.return, a region's stablehlo.return). dynamic_update_slice is written
// with constant indices only, as Neuron's list requires.
const std::set<std::string>& neuron_ops();

}  // namespace tfm::pjrt
