// The CUDA executor. A compiled graph owns one device arena (the plan's), its step scratch, a
// cuBLASLt workspace and pinned staging for inputs and outputs; its launches are captured once
// into a CUDA Graph and replayed. Inputs stay on the host and only the step's own (ids,
// positions, mask, slots) are copied; state (the KV cache) lives on the device and is written in
// place; outputs come back to the host.
#include <cuda_runtime.h>

#include <algorithm>
#include <cstring>

#include "backends/cuda/cuda_pipeline.h"
#include "backends/cuda/cuda_status.h"
#include "backends/cuda/device_memory.h"
#include "backends/cuda/matmul.h"
#include "backends/cuda/nccl_group.h"
#include "backends/cuda/step_profile.h"
#include "backends/cuda/steps.h"
#include "core/device_registry.h"
#include "fusion/pipeline.h"
#include "graph/backend.h"
#include "graph/effects.h"
#include "graph/op_args.h"
#include "tfm/error.h"

namespace tfm::cuda {
namespace {

using graph::Graph;
using graph::Node;
using graph::Op;
using graph::ValueId;

// The one device this process computes on (tfm::resolve_device chose it).
Device device() { return Device{"cuda", process_accelerator_index()}; }

size_t aligned(size_t bytes) {
  return (bytes + kArenaAlignment - 1) / kArenaAlignment * kArenaAlignment;
}
size_t node_bytes(const Node& n) {
  return static_cast<size_t>(shape_numel(n.shape)) * dtype_size(n.dtype);
}

cudaStream_t stream() {
  static cudaStream_t s = [] {
    cudaStream_t created = nullptr;
    TFM_CUDA(cudaSetDevice(device().index));
    TFM_CUDA(cudaStreamCreateWithFlags(&created, cudaStreamNonBlocking));
    return created;
  }();
  return s;
}

void check_input(const Node& node, const Tensor& tensor) {
  if (tensor.shape() != node.shape || tensor.dtype() != node.dtype) {
    throw Error("graph input '" + node.name + "' expects " + shape_str(node.shape) + " " +
                std::string(dtype_name(node.dtype)) + ", got " + shape_str(tensor.shape()) + " " +
                std::string(dtype_name(tensor.dtype())));
  }
  const Device want = node.is_state ? device() : kCpu;
  if (tensor.device() != want || !tensor.is_contiguous()) {
    throw Error("graph input '" + node.name + "' must be a contiguous tensor on " + want.str() +
                ", got one on " + tensor.device().str());
  }
}

// Token ids and loss targets are checked on the host, where they are, so a bad one is an error
// and not a read outside the embedding table (or a NaN loss).
struct IdCheck {
  size_t input;
  int64_t vocab;
  bool is_target;  // the ignore index is allowed too
};

// The table (or the logits) and the ids (or the targets) a lookup (or a loss) reads.
std::pair<ValueId, ValueId> ids_read(const Node& n) {
  if (n.op == Op::kEmbedding) {
    const graph::EmbeddingArgs a = graph::embedding_args(n);
    return {a.table, a.ids};
  }
  if (n.op == Op::kCrossEntropy) {
    const graph::CrossEntropyArgs a = graph::cross_entropy_args(n);
    return {a.logits, a.targets};
  }
  const graph::CrossEntropyGradArgs a = graph::cross_entropy_grad_args(n);
  return {a.logits, a.targets};
}

std::vector<IdCheck> id_checks(const Graph& graph, const std::vector<ValueId>& input_ids) {
  std::vector<IdCheck> checks;
  for (const Node& n : graph.nodes) {
    // A vocabulary shard reads other ranks' ids as zero rows; the model checks them.
    const bool is_target = n.op == Op::kCrossEntropy || n.op == Op::kCrossEntropyGrad;
    if ((n.op != Op::kEmbedding && !is_target) || n.shard) continue;
    // Through reshapes and views (a chunk of the targets) to the input that holds them all.
    const auto [table_id, ids] = ids_read(n);
    const auto at = std::find(input_ids.begin(), input_ids.end(), graph::storage_of(graph, ids));
    if (at == input_ids.end()) continue;
    const Shape& table = graph.nodes[static_cast<size_t>(table_id)].shape;
    const IdCheck check{static_cast<size_t>(at - input_ids.begin()),
                        is_target ? table.back() : table[0], is_target};
    // Each chunk of the loss (and its gradient) reads the same targets: check them once.
    const bool known = std::any_of(checks.begin(), checks.end(), [&](const IdCheck& c) {
      return c.input == check.input && c.vocab == check.vocab && c.is_target == check.is_target;
    });
    if (!known) checks.push_back(check);
  }
  return checks;
}

void check_ids(const std::vector<IdCheck>& checks, const std::vector<Tensor>& inputs) {
  for (const IdCheck& c : checks) {
    const Tensor& ids = inputs[c.input];
    const int32_t* v = ids.data_as<int32_t>();
    for (int64_t i = 0; i < ids.numel(); ++i) {
      if (c.is_target && v[i] == graph::kIgnoreIndex) continue;
      if (v[i] < 0 || v[i] >= c.vocab) {
        throw Error(std::string(c.is_target ? "[cross_entropy] target " : "[embedding] token id ") +
                    std::to_string(v[i]) + " outside the vocabulary (" + std::to_string(c.vocab) +
                    " tokens)");
      }
    }
  }
}

// Weights already on the device are used in place; host ones (small tables such as RoPE
// frequencies) are uploaded and kept in `uploads`.
void bind_weights(const Graph& graph, std::vector<void*>& ptrs, std::vector<Tensor>& uploads) {
  for (size_t i = 0; i < graph.nodes.size(); ++i) {
    const Node& n = graph.nodes[i];
    if (n.op != Op::kWeight) continue;
    if (n.constant.device() == device()) {
      ptrs[i] = const_cast<void*>(n.constant.data());
    } else {
      uploads.push_back(n.constant.clone().to(device()));
      ptrs[i] = uploads.back().data();
    }
  }
}

std::vector<Tensor> outputs_from(const Graph& graph, const std::vector<const void*>& host) {
  std::vector<Tensor> outputs;
  for (size_t i = 0; i < graph.outputs.size(); ++i) {
    const Node& node = graph.nodes[static_cast<size_t>(graph.outputs[i])];
    Tensor t = Tensor::empty(node.shape, node.dtype);
    std::memcpy(t.data(), host[i], t.nbytes());
    outputs.push_back(std::move(t));
  }
  return outputs;
}

class CudaExecutable : public graph::Executable {
 public:
  CudaExecutable(fusion::Plan plan, const KernelOptions& kernels)
      : plan_(std::move(plan)), kernels_(kernels) {
    const Graph& graph = plan_.graph;
    ptrs_.assign(graph.nodes.size(), nullptr);
    arena_ = device_allocate(device().index, plan_.arena_bytes);
    for (size_t i = 0; i < ptrs_.size(); ++i) {
      if (plan_.offset[i] >= 0) ptrs_[i] = static_cast<char*>(arena_.get()) + plan_.offset[i];
    }
    bind_weights(graph, ptrs_, uploads_);
    layout_inputs();
    size_t scratch = 0;
    for (ValueId id : plan_.schedule) {
      steps_.push_back(make_step(graph, id, &plan_, kernels_));
      scratch = std::max(scratch, scratch_bytes(graph, id, &plan_, kernels_));
    }
    scratch_ = device_allocate(device().index, scratch);
    workspace_ = device_allocate(device().index, kMatmulWorkspaceBytes);
    size_t out_bytes = 0;
    for (ValueId id : graph.outputs) {
      output_offsets_.push_back(out_bytes);
      out_bytes += aligned(node_bytes(graph.nodes[static_cast<size_t>(id)]));
    }
    host_outputs_ = pinned_allocate(out_bytes);
  }

  ~CudaExecutable() override {
    if (exec_) cudaGraphExecDestroy(exec_);
  }

  graph::RunResult run(const std::vector<Tensor>& inputs) override {
    const Graph& graph = plan_.graph;
    if (inputs.size() != input_ids_.size()) {
      throw Error("graph expects " + std::to_string(input_ids_.size()) + " inputs, got " +
                  std::to_string(inputs.size()));
    }
    std::vector<void*> state;
    for (size_t i = 0; i < inputs.size(); ++i) {
      const Node& node = graph.nodes[static_cast<size_t>(input_ids_[i])];
      check_input(node, inputs[i]);
      if (node.is_state) {
        ptrs_[static_cast<size_t>(input_ids_[i])] = const_cast<void*>(inputs[i].data());
        state.push_back(ptrs_[static_cast<size_t>(input_ids_[i])]);
      } else {
        std::memcpy(static_cast<char*>(host_inputs_.get()) + input_offsets_[i], inputs[i].data(),
                    inputs[i].nbytes());
      }
    }
    check_ids(id_checks_, inputs);
    if (kernels_.profile) {
      const StepProfile profile(graph, plan_.schedule);
      enqueue(&profile);
      synchronize_with_timeout(stream());
      profile.report();
    } else {
      // A capture bakes in the state buffers' addresses: another KV cache needs another capture.
      if (!exec_ || state != captured_state_) capture(state);
      TFM_CUDA(cudaGraphLaunch(exec_, stream()));
      synchronize_with_timeout(stream());
    }
    std::vector<const void*> host;
    for (size_t offset : output_offsets_) {
      host.push_back(static_cast<const char*>(host_outputs_.get()) + offset);
    }
    return {outputs_from(graph, host), graph::state_inputs(graph, input_ids_, inputs)};
  }

  size_t arena_bytes() const override { return plan_.arena_bytes; }

 private:
  void layout_inputs() {
    const Graph& graph = plan_.graph;
    size_t bytes = 0;
    for (ValueId id : input_ids_) {
      const Node& node = graph.nodes[static_cast<size_t>(id)];
      input_offsets_.push_back(bytes);
      if (!node.is_state) bytes += aligned(node_bytes(node));
    }
    input_bytes_ = bytes;
    host_inputs_ = pinned_allocate(bytes);
    device_inputs_ = device_allocate(device().index, bytes);
    for (size_t i = 0; i < input_ids_.size(); ++i) {
      if (graph.nodes[static_cast<size_t>(input_ids_[i])].is_state) continue;
      ptrs_[static_cast<size_t>(input_ids_[i])] =
          static_cast<char*>(device_inputs_.get()) + input_offsets_[i];
    }
  }

  // With a profile, an event goes before and after each step.
  void enqueue(const StepProfile* profile = nullptr) {
    if (input_bytes_ > 0) {
      TFM_CUDA(cudaMemcpyAsync(device_inputs_.get(), host_inputs_.get(), input_bytes_,
                               cudaMemcpyHostToDevice, stream()));
    }
    StepContext context{ptrs_, scratch_.get(), workspace_.get(), stream()};
    for (size_t i = 0; i < steps_.size(); ++i) {
      if (profile) profile->mark(i, stream());
      steps_[i](context);
    }
    if (profile) profile->mark(steps_.size(), stream());
    const Graph& graph = plan_.graph;
    for (size_t i = 0; i < graph.outputs.size(); ++i) {
      const auto id = static_cast<size_t>(graph.outputs[i]);
      TFM_CUDA(cudaMemcpyAsync(static_cast<char*>(host_outputs_.get()) + output_offsets_[i],
                               ptrs_[id], node_bytes(graph.nodes[id]), cudaMemcpyDeviceToHost,
                               stream()));
    }
  }

  void capture(const std::vector<void*>& state) {
    if (exec_) cudaGraphExecDestroy(exec_);
    exec_ = nullptr;
    TFM_CUDA(cudaStreamBeginCapture(stream(), cudaStreamCaptureModeThreadLocal));
    cudaGraph_t captured = nullptr;
    try {
      enqueue();
    } catch (...) {
      // Ends the (invalidated) capture so the stream takes work again, and clears the error that
      // reports it, which the next launch's check would otherwise take for its own.
      cudaStreamEndCapture(stream(), &captured);
      cudaGetLastError();
      if (captured) cudaGraphDestroy(captured);
      throw;
    }
    TFM_CUDA(cudaStreamEndCapture(stream(), &captured));
    const cudaError_t status = cudaGraphInstantiate(&exec_, captured, 0);
    cudaGraphDestroy(captured);
    TFM_CUDA(status);
    captured_state_ = state;
  }

  fusion::Plan plan_;
  KernelOptions kernels_;
  std::vector<ValueId> input_ids_ = plan_.graph.inputs();
  std::vector<IdCheck> id_checks_ = id_checks(plan_.graph, input_ids_);
  std::vector<void*> ptrs_;
  std::shared_ptr<void> arena_, scratch_, workspace_, device_inputs_;
  std::shared_ptr<void> host_inputs_, host_outputs_;  // pinned
  std::vector<size_t> input_offsets_, output_offsets_;
  size_t input_bytes_ = 0;
  std::vector<Tensor> uploads_;
  std::vector<Step> steps_;
  cudaGraphExec_t exec_ = nullptr;
  std::vector<void*> captured_state_;
};

class CudaBackend : public graph::Backend {
 public:
  std::unique_ptr<graph::Executable> compile(Graph graph,
                                             const graph::CompileOptions& options) override {
    return std::make_unique<CudaExecutable>(
        fusion::compile(std::move(graph), options.fuse ? cuda_pipeline() : fusion::Pipeline{},
                        cuda_target()),
        options.kernels);
  }

  // Node by node with a buffer each and no capture: the reference the compiled path must match.
  std::vector<Tensor> run_eager(const Graph& graph, const std::vector<Tensor>& inputs) override {
    const KernelOptions kernels;
    const std::vector<ValueId> input_ids = graph.inputs();
    if (inputs.size() != input_ids.size()) {
      throw Error("graph expects " + std::to_string(input_ids.size()) + " inputs, got " +
                  std::to_string(inputs.size()));
    }
    std::vector<void*> ptrs(graph.nodes.size(), nullptr);
    std::vector<Tensor> keep;  // device buffers alive until the outputs are copied
    for (size_t i = 0; i < inputs.size(); ++i) {
      const Node& node = graph.nodes[static_cast<size_t>(input_ids[i])];
      check_input(node, inputs[i]);
      keep.push_back(node.is_state ? inputs[i] : inputs[i].to(device()));
      ptrs[static_cast<size_t>(input_ids[i])] = keep.back().data();
    }
    check_ids(id_checks(graph, input_ids), inputs);
    bind_weights(graph, ptrs, keep);
    size_t scratch = 0;
    for (size_t i = 0; i < graph.nodes.size(); ++i)
      scratch = std::max(scratch, scratch_bytes(graph, static_cast<ValueId>(i), nullptr, kernels));
    const std::shared_ptr<void> scratch_buffer = device_allocate(device().index, scratch);
    const std::shared_ptr<void> workspace = device_allocate(device().index, kMatmulWorkspaceBytes);
    StepContext context{ptrs, scratch_buffer.get(), workspace.get(), stream()};
    // Steps may own device memory their kernels use: kept until the stream is done.
    std::vector<Step> steps;
    for (size_t i = 0; i < graph.nodes.size(); ++i) {
      const Node& node = graph.nodes[i];
      if (node.op == Op::kInput || node.op == Op::kWeight) continue;
      if (!graph::aliases_input(node)) {
        keep.push_back(Tensor::empty(node.shape, node.dtype, device()));
        ptrs[i] = keep.back().data();
      }
      steps.push_back(make_step(graph, static_cast<ValueId>(i), nullptr, kernels));
      steps.back()(context);
    }
    synchronize_with_timeout(stream());
    std::vector<Tensor> host_outputs;
    for (ValueId id : graph.outputs) {
      const Node& node = graph.nodes[static_cast<size_t>(id)];
      host_outputs.push_back(Tensor::empty(node.shape, node.dtype));
      TFM_CUDA(cudaMemcpy(host_outputs.back().data(), ptrs[static_cast<size_t>(id)],
                          node_bytes(node), cudaMemcpyDeviceToHost));
    }
    return host_outputs;
  }

  Tensor prepare_weight(const Tensor& weight, DType dtype) override {
    // Vectors (norms, biases) are tiny and read as f32 by every kernel.
    const DType target = weight.ndim() == 1 ? DType::f32 : dtype;
    const Tensor host = weight.device() == kCpu ? weight : weight.to(kCpu);
    return host.to(target).to(device());
  }
};

CudaBackend& backend() {
  static CudaBackend b;
  return b;
}

DeviceInfo describe(int index) {
  cudaDeviceProp props{};
  TFM_CUDA(cudaGetDeviceProperties(&props, index));
  return {Device{"cuda", index}, std::string(props.name) + ", " + gib(props.totalGlobalMem),
          props.totalGlobalMem};
}

void copy(void* dst, const void* src, size_t bytes, int index, bool to_device) {
  TFM_CUDA(cudaSetDevice(index));
  // cudaMemcpy runs on the legacy stream, which the kernels' non-blocking stream is not ordered
  // with either way, and from pageable memory it may return before its DMA lands. Waiting for the
  // device before and after, a copy sees every launch before it and is whole for every launch
  // after (a KV cache or gradient buffer uploaded and read by the next run).
  TFM_CUDA(cudaDeviceSynchronize());
  TFM_CUDA(
      cudaMemcpy(dst, src, bytes, to_device ? cudaMemcpyHostToDevice : cudaMemcpyDeviceToHost));
  TFM_CUDA(cudaDeviceSynchronize());
}

// Linked in whole (an object library), so this runs before main and the CUDA device kind is
// known to device_map and to the graph compiler.
[[maybe_unused]] const bool registered = [] {
  register_device_kind({.name = "cuda",
                        .rank = 1,
                        .count = device_count,
                        .describe = describe,
                        .allocate = device_allocate,
                        .copy = copy,
                        .fill_zero = device_fill_zero,
                        .peak_allocated = [](int) { return device_peak_bytes(); },
                        .use_plugin = nullptr,
                        .platforms = {},
                        .use_platform = nullptr});
  graph::register_backend("cuda", &backend());
  return true;
}();

}  // namespace
}  // namespace tfm::cuda
