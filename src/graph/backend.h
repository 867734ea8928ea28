// What a backend provides: compiling a graph of basic ops into an Executable for one device (a
// kernel backend by its own fusion passes and memory plan, src/fusion), and running a graph
// eagerly (node by node, no fusion, no plan) as the reference the compiled path must match.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "graph/graph.h"
#include "ops/adamw.h"
#include "tfm/tensor.h"

namespace tfm::graph {

struct CompileOptions {
  // Kernel backends: run their fusion passes. Off, the compiled graph runs the basic ops the
  // model built (with a memory plan): the reference every fusion is tested against.
  bool fuse = true;
};

class Executable {
 public:
  virtual ~Executable() = default;
  // One tensor per graph input, in Graph::inputs() order, on the host (state inputs on the
  // executable's device; they are written in place). Returns the graph outputs on the host.
  virtual std::vector<Tensor> run(const std::vector<Tensor>& inputs) = 0;
  virtual size_t arena_bytes() const = 0;
};

class Backend {
 public:
  virtual ~Backend() = default;
  virtual std::unique_ptr<Executable> compile(Graph graph, const CompileOptions& options = {}) = 0;
  virtual std::vector<Tensor> run_eager(const Graph& graph, const std::vector<Tensor>& inputs) = 0;
  // Weights in the layout and place this backend computes with (e.g. uploaded to the GPU once).
  virtual Tensor prepare_weight(const Tensor& weight, DType dtype) = 0;

  // The optimizer's arithmetic, run eagerly after a compiled training step on flat f32 buffers
  // that live on this backend's device (training state stays where the model computes).
  // One AdamW update of n elements (ops::adamw_update each).
  virtual void adamw_update(const ops::AdamWScalars& s, float decay, float* params,
                            const float* grads, float* exp_avg, float* exp_avg_sq, int64_t n) = 0;
  // The sum of squares of n elements, in double over fixed chunks added in order: the same bits
  // for any thread count, so a re-run or resumed step clips identically.
  virtual double sum_squares(const float* x, int64_t n) = 0;
};

// Backends by the kind of device they run (tfm/device.h), each registering itself when linked in
// (backends are object libraries: their registrations always run).
void register_backend(const std::string& kind, Backend* backend);
Backend& backend_for(const Device& device);

}  // namespace tfm::graph
