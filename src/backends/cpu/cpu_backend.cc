// The CPU executor: a compiled graph is a flat list of kernel calls over one arena; eager mode
// runs the same kernels node by node with a buffer per node.
#include "backends/cpu/cpu_backend.h"

#include <cstring>

#include "backends/cpu/cpu_isa.h"
#include "backends/cpu/kernels.h"
#include "backends/cpu/steps.h"
#include "core/device_registry.h"
#include "graph/effects.h"
#include "tfm/error.h"

namespace tfm::cpu {
namespace {

using graph::Graph;
using graph::Node;
using graph::Op;

void check_input(const Node& node, const Tensor& tensor) {
  if (tensor.shape() != node.shape || tensor.dtype() != node.dtype) {
    throw Error("graph input '" + node.name + "' expects " + shape_str(node.shape) + " " +
                std::string(dtype_name(node.dtype)) + ", got " + shape_str(tensor.shape()) + " " +
                std::string(dtype_name(tensor.dtype())));
  }
  if (tensor.device() != kCpu || !tensor.is_contiguous()) {
    throw Error("graph input '" + node.name + "' must be a contiguous host tensor");
  }
}

// Points the graph's inputs at the caller's tensors, which outlive the run. State inputs (the KV
// cache) are written through these pointers: the caller's tensors share that storage.
void bind_inputs(const Graph& graph, const std::vector<graph::ValueId>& ids,
                 const std::vector<Tensor>& inputs, std::vector<void*>& ptrs) {
  if (ids.size() != inputs.size()) {
    throw Error("graph expects " + std::to_string(ids.size()) + " inputs, got " +
                std::to_string(inputs.size()));
  }
  for (size_t i = 0; i < ids.size(); ++i) {
    check_input(graph.nodes[static_cast<size_t>(ids[i])], inputs[i]);
    ptrs[static_cast<size_t>(ids[i])] = const_cast<void*>(inputs[i].data());
  }
}

void bind_weights(const Graph& graph, std::vector<void*>& ptrs) {
  for (size_t i = 0; i < graph.nodes.size(); ++i) {
    if (graph.nodes[i].op == Op::kWeight) {
      ptrs[i] = const_cast<void*>(graph.nodes[i].constant.data());
    }
  }
}

std::vector<Tensor> copy_outputs(const Graph& graph, const std::vector<void*>& ptrs) {
  std::vector<Tensor> outputs;
  for (graph::ValueId id : graph.outputs) {
    const Node& node = graph.nodes[static_cast<size_t>(id)];
    Tensor t = Tensor::empty(node.shape, node.dtype);
    std::memcpy(t.data(), ptrs[static_cast<size_t>(id)], t.nbytes());
    outputs.push_back(std::move(t));
  }
  return outputs;
}

class CpuExecutable : public graph::Executable {
 public:
  explicit CpuExecutable(fusion::Plan plan)
      : plan_(std::move(plan)),
        arena_(Tensor::empty({static_cast<int64_t>((plan_.arena_bytes + 3) / 4)}, DType::f32)),
        ptrs_(plan_.graph.nodes.size(), nullptr) {
    for (size_t i = 0; i < ptrs_.size(); ++i) {
      if (plan_.offset[i] >= 0) ptrs_[i] = static_cast<char*>(arena_.data()) + plan_.offset[i];
    }
    bind_weights(plan_.graph, ptrs_);
    for (graph::ValueId id : plan_.schedule) steps_.push_back(make_step(plan_.graph, id, ptrs_));
  }

  graph::RunResult run(const std::vector<Tensor>& inputs) override {
    bind_inputs(plan_.graph, input_ids_, inputs, ptrs_);
    for (const auto& step : steps_) step();
    return {copy_outputs(plan_.graph, ptrs_), graph::state_inputs(plan_.graph, input_ids_, inputs)};
  }

  size_t arena_bytes() const override { return plan_.arena_bytes; }

 private:
  fusion::Plan plan_;
  Tensor arena_;  // f32 elements only for the allocator's alignment; holds any dtype
  std::vector<graph::ValueId> input_ids_ = plan_.graph.inputs();
  std::vector<void*> ptrs_;
  std::vector<std::function<void()>> steps_;
};

class CpuBackend : public graph::Backend {
 public:
  std::unique_ptr<graph::Executable> compile(Graph graph,
                                             const graph::CompileOptions& options) override {
    return cpu_executable(cpu_plan(std::move(graph), options.fuse));
  }

  std::vector<Tensor> run_eager(const Graph& graph, const std::vector<Tensor>& inputs) override {
    std::vector<void*> ptrs(graph.nodes.size(), nullptr);
    bind_inputs(graph, graph.inputs(), inputs, ptrs);
    bind_weights(graph, ptrs);
    std::vector<Tensor> keep;  // each node's output, alive until the outputs are copied
    for (size_t i = 0; i < graph.nodes.size(); ++i) {
      const Node& node = graph.nodes[i];
      if (node.op == Op::kInput || node.op == Op::kWeight) continue;
      if (!graph::aliases_input(node)) {
        keep.push_back(Tensor::empty(node.shape, node.dtype));
        ptrs[i] = keep.back().data();
      }
      make_step(graph, static_cast<graph::ValueId>(i), ptrs)();
    }
    return copy_outputs(graph, ptrs);
  }

  Tensor prepare_weight(const Tensor& weight, DType dtype) override {
    // Vectors (norms, biases) are tiny and read as f32 by every kernel.
    const DType target = weight.ndim() == 1 ? DType::f32 : dtype;
    // A copy of its own even when the dtype matches: decode streams weights ~20% faster from
    // anonymous memory than from the checkpoint's page-cache pages (measured on Qwen3-0.6B bf16:
    // 15-16 -> 18-20 tokens/s), and the loader can then release the mapping.
    return weight.dtype() == target ? weight.clone() : weight.to(target);
  }
};

}  // namespace

graph::Backend& cpu_backend() {
  static CpuBackend backend;
  return backend;
}

namespace {

// Linked in whole (an object library), so the cpu has its backend before main runs.
[[maybe_unused]] const bool registered = [] {
  graph::register_backend("cpu", &cpu_backend());
  register_cpu_attributes([] { return product_paths(cpu_isa()); });
  return true;
}();

}  // namespace

const fusion::Target& cpu_target() {
  static const fusion::Target target{.name = "cpu",
                                     .writes_bf16 = fusion::default_writes_bf16,
                                     .elementwise = kElementwiseLimits,
                                     .alignment = kArenaAlignment};
  return target;
}

fusion::Pipeline cpu_pipeline() { return fusion::standard_pipeline(); }

fusion::Plan cpu_plan(Graph graph, bool fuse) {
  return fusion::compile(std::move(graph), fuse ? cpu_pipeline() : fusion::Pipeline{},
                         cpu_target());
}

std::unique_ptr<graph::Executable> cpu_executable(fusion::Plan plan) {
  return std::make_unique<CpuExecutable>(std::move(plan));
}

}  // namespace tfm::cpu
