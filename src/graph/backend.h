// What a backend provides: compiling a graph of basic ops into an Executable for one device (a
// kernel backend by its own fusion passes and memory plan, src/fusion), and running a graph
// eagerly (node by node, no fusion, no plan) as the reference the compiled path must match.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "graph/graph.h"
#include "tfm/kernel_options.h"
#include "tfm/tensor.h"

namespace tfm::graph {

struct CompileOptions {
  // Kernel backends: run their fusion passes. Off, the compiled graph runs the basic ops the
  // model built (with a memory plan): the reference every fusion is tested against.
  bool fuse = true;
  // The device each rank of a job computes on, for graphs with collectives (empty: one device).
  Mesh mesh = {};
  KernelOptions kernels = {};
  // A compiler backend: the one process's graph partitioned over this many devices (none: one).
  Partitioning partitioning = {};
};

struct RunResult {
  std::vector<Tensor> outputs;  // the graph's outputs, on the host
  // Each state input's buffer after the run, in Graph::inputs() order of the state inputs: the
  // buffer given (a kernel backend writes the updates in place) or another holding the state's
  // update (a compiler backend's donated buffer). The caller keeps these in place of what it gave.
  std::vector<Tensor> state;
};

class Executable {
 public:
  virtual ~Executable() = default;
  // One tensor per graph input, in Graph::inputs() order: on the host, but for the state inputs,
  // which are on the executable's device and handed over to the run (see RunResult::state).
  virtual RunResult run(const std::vector<Tensor>& inputs) = 0;
  virtual size_t arena_bytes() const = 0;
  // Loaded from a compiler's cache on disk rather than compiled (a compiler backend's).
  virtual bool from_compile_cache() const { return false; }
};

class Backend {
 public:
  virtual ~Backend() = default;
  virtual std::unique_ptr<Executable> compile(Graph graph, const CompileOptions& options = {}) = 0;
  virtual std::vector<Tensor> run_eager(const Graph& graph, const std::vector<Tensor>& inputs) = 0;
  // Weights in the layout and place this backend computes with (e.g. uploaded to the GPU once).
  virtual Tensor prepare_weight(const Tensor& weight, DType dtype) = 0;
};

// The state inputs among a run's `inputs` (given for `ids`, Graph::inputs()): what a backend that
// writes state in place returns as RunResult::state.
std::vector<Tensor> state_inputs(const Graph& graph, const std::vector<ValueId>& ids,
                                 const std::vector<Tensor>& inputs);

// Backends by the kind of device they run (tfm/device.h), each registering itself when linked in
// (backends are object libraries: their registrations always run).
void register_backend(const std::string& kind, Backend* backend);
Backend& backend_for(const Device& device);

}  // namespace tfm::graph
