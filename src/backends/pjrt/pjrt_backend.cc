// The PJRT backend: a graph of basic ops printed as StableHLO (stablehlo.h), compiled by the
// plugin tfm::use_device_plugin("pjrt", ...) named, and run with the weights and the state (KV
// cache) staying in device buffers between runs; only the other inputs move. State is donated
// (the module aliases each update to its state's argument), and its new buffers take the old
// ones' place in the caller's tensors.
#include <cstring>
#include <filesystem>
#include <optional>

#include "backends/pjrt/cached_compile.h"
#include "backends/pjrt/client.h"
#include "backends/pjrt/compile_options.h"
#include "backends/pjrt/device_buffer.h"
#include "backends/pjrt/stablehlo.h"
#include "core/device_registry.h"
#include "graph/backend.h"
#include "tfm/error.h"

namespace tfm::pjrt {
namespace {

using graph::Graph;
using graph::Node;
using graph::Op;
using graph::ValueId;

// The process's one client, of the plugin it was given, and its compile cache (if any).
std::unique_ptr<Client>& client_slot() {
  static std::unique_ptr<Client> client;
  return client;
}
std::optional<CompileCache>& cache_slot() {
  static std::optional<CompileCache> cache;
  return cache;
}

const Client& client() {
  const std::unique_ptr<Client>& c = client_slot();
  if (c == nullptr) {
    throw Error(
        "the pjrt device needs a PJRT plugin: pass --pjrt-plugin PATH (or call "
        "tfm::use_device_plugin(\"pjrt\", path)), e.g. xla_cpu_pjrt.so from PyPI's "
        "xla-cpu-pjrt");
  }
  return *c;
}

void use_plugin(const std::string& path, const PluginOptions& options) {
  std::unique_ptr<Client>& c = client_slot();
  if (c != nullptr) {
    if (c->plugin().path() == path) return;
    throw Error("PJRT plugin '" + path + "' requested, but this process already uses '" +
                c->plugin().path() + "'");
  }
  const std::filesystem::path dir = options.compile_cache
                                        ? std::filesystem::path(*options.compile_cache)
                                        : default_compile_cache_dir();
  if (!dir.empty()) cache_slot().emplace(dir);
  c = std::make_unique<Client>(Plugin::open(path), options.device_count);
}

std::shared_ptr<void> allocate(int index, size_t bytes) {
  return make_device_buffer(client(), index, bytes);
}

void copy(void* dst, const void* src, size_t bytes, int /*index*/, bool to_device) {
  if (to_device) {
    DeviceBuffer& h = holder_of(dst, "copy to pjrt");
    h.buffer.reset();
    h.bytes_to_upload.resize(bytes);
    std::memcpy(h.bytes_to_upload.data(), src, bytes);
    return;
  }
  DeviceBuffer& h = holder_of(src, "copy from pjrt");
  if (h.buffer != nullptr) {
    h.client->download(h.buffer.get(), dst, bytes);
  } else if (h.bytes_to_upload.empty()) {
    std::memset(dst, 0, bytes);
  } else {
    std::memcpy(dst, h.bytes_to_upload.data(), bytes);
  }
}

void fill_zero(void* data, size_t /*bytes*/, int /*index*/) {
  DeviceBuffer& h = holder_of(data, "fill pjrt with zeros");
  h.buffer.reset();
  h.bytes_to_upload.clear();  // empty: zeros when first made
}

DeviceInfo describe(int index) {
  const Client& c = client();
  DeviceInfo info{Device{"pjrt", index},
                  c.describe(index) + " (plugin " + c.plugin().path() + ", C API " +
                      std::to_string(c.plugin().major_version()) + "." +
                      std::to_string(c.plugin().minor_version()) + ", platform version " +
                      c.platform_version() + ")",
                  0};
  info.attributes = c.plugin().attributes();
  return info;
}

class PjrtExecutable : public graph::Executable {
 public:
  PjrtExecutable(Graph graph, const Client& client, int device)
      : graph_(std::move(graph)), client_(client), device_(device) {
    module_ = emit_stablehlo(graph_);
    const std::optional<CompileCache>& cache = cache_slot();
    Compiled compiled = compile_cached(client_, cache ? &*cache : nullptr, module_.text,
                                       serialize(CompileOptions{}));
    executable_ = std::move(compiled.executable);
    from_cache_ = compiled.from_cache;
    output_count_ = client_.output_count(executable_.get());
    input_ids_ = graph_.inputs();
    for (size_t i = input_ids_.size(); i < module_.arguments.size(); ++i) {
      const Node& n = graph_.nodes[static_cast<size_t>(module_.arguments[i])];
      // Weights the model keeps on the device are used where they are; others (RoPE's
      // inverse frequencies, built per graph) are uploaded once, here.
      weights_.push_back(
          n.constant.device().type == "pjrt" ? n.constant : n.constant.to(Device{"pjrt", device_}));
    }
    for (const ValueId id : input_ids_) {
      int update = -1;
      for (size_t k = 0; k < graph_.updates.size(); ++k) {
        if (graph_.updates[k].state == id) update = static_cast<int>(k);
      }
      update_of_input_.push_back(update);
    }
  }

  graph::RunResult run(const std::vector<Tensor>& inputs) override {
    if (inputs.size() != input_ids_.size()) {
      throw Error("graph expects " + std::to_string(input_ids_.size()) + " inputs, got " +
                  std::to_string(inputs.size()));
    }
    std::vector<Buffer> uploaded;  // this run's host inputs, alive until it ends
    std::vector<PJRT_Buffer*> arguments;
    std::vector<int64_t> kept;  // arguments not donated: all but the updated state
    for (size_t i = 0; i < inputs.size(); ++i) {
      const Node& n = graph_.nodes[static_cast<size_t>(input_ids_[i])];
      check_input(n, inputs[i]);
      if (n.is_state) {
        arguments.push_back(buffer_of(inputs[i], "graph input '" + n.name + "'"));
        if (update_of_input_[i] < 0) kept.push_back(static_cast<int64_t>(i));
        continue;
      }
      const Tensor host = inputs[i].is_contiguous() ? inputs[i] : inputs[i].clone();
      uploaded.push_back(client_.upload(host.data(), n.dtype, n.shape, device_));
      arguments.push_back(uploaded.back().get());
      kept.push_back(static_cast<int64_t>(i));
    }
    for (size_t w = 0; w < weights_.size(); ++w) {
      arguments.push_back(buffer_of(weights_[w], "weight '" + weight_node(w).name + "'"));
      kept.push_back(static_cast<int64_t>(input_ids_.size() + w));
    }
    std::vector<Buffer> results =
        client_.execute(executable_.get(), arguments, kept, output_count_);
    TFM_CHECK(results.size() == module_.outputs + graph_.updates.size(),
              "PJRT executable's result count");
    graph::RunResult out;
    for (size_t r = 0; r < module_.outputs; ++r) {
      const Node& n = graph_.nodes[static_cast<size_t>(graph_.outputs[r])];
      Tensor t = Tensor::empty(n.shape, n.dtype);
      client_.download(results[r].get(), t.data(), t.nbytes());
      out.outputs.push_back(std::move(t));
    }
    // The donated state's new buffers go into the tensors the caller gave: to the caller the
    // state is updated in place, as on a kernel backend (eager runs, which return no state,
    // rely on it).
    for (size_t i = 0; i < inputs.size(); ++i) {
      const Node& n = graph_.nodes[static_cast<size_t>(input_ids_[i])];
      if (!n.is_state) continue;
      const int update = update_of_input_[i];
      if (update >= 0) {
        DeviceBuffer& h = holder_of(inputs[i].data(), "graph input '" + n.name + "'");
        h.buffer = std::move(results[module_.outputs + static_cast<size_t>(update)]);
        h.shape = n.shape;
      }
      out.state.push_back(inputs[i]);
    }
    return out;
  }

  size_t arena_bytes() const override { return 0; }
  bool from_compile_cache() const override { return from_cache_; }

 private:
  const Node& weight_node(size_t w) const {
    return graph_.nodes[static_cast<size_t>(module_.arguments[input_ids_.size() + w])];
  }

  static void check_input(const Node& n, const Tensor& t) {
    if (t.shape() != n.shape || t.dtype() != n.dtype) {
      throw Error("graph input '" + n.name + "' expects " + shape_str(n.shape) + " " +
                  std::string(dtype_name(n.dtype)) + ", got " + shape_str(t.shape()) + " " +
                  std::string(dtype_name(t.dtype())));
    }
    if (!n.is_state && t.device() != kCpu) {
      throw Error("graph input '" + n.name + "' must be a host tensor, got one on " +
                  t.device().str());
    }
  }

  Graph graph_;
  const Client& client_;
  int device_;
  Module module_;
  LoadedExecutable executable_;
  bool from_cache_ = false;
  size_t output_count_ = 0;
  std::vector<ValueId> input_ids_;
  std::vector<Tensor> weights_;
  std::vector<int> update_of_input_;  // each input's Graph::updates entry (-1: none)
};

class PjrtBackend : public graph::Backend {
 public:
  std::unique_ptr<graph::Executable> compile(Graph graph,
                                             const graph::CompileOptions& options) override {
    if (!options.mesh.devices.empty()) {
      throw Error("the PJRT backend does not run tensor-parallel or FSDP graphs yet");
    }
    // The plugin's compiler fuses: the graph goes as the model built it (options.fuse is a
    // kernel backend's switch).
    return std::make_unique<PjrtExecutable>(std::move(graph), client(),
                                            process_accelerator_index());
  }

  std::vector<Tensor> run_eager(const Graph& graph, const std::vector<Tensor>& inputs) override {
    // A compiler backend has no op-by-op mode: eager is the same graph compiled whole.
    return compile(graph, {})->run(inputs).outputs;
  }

  Tensor prepare_weight(const Tensor& weight, DType dtype) override {
    // Vectors (norms, biases) in f32, as the kernel backends keep them.
    const DType target = weight.ndim() == 1 ? DType::f32 : dtype;
    Tensor host = weight.to(target);
    if (!host.is_contiguous()) host = host.clone();
    const int device = process_accelerator_index();
    return tensor_of(client().upload(host.data(), target, host.shape(), device), client(), device,
                     host.shape(), target);
  }
};

PjrtBackend& backend() {
  static PjrtBackend b;
  return b;
}

[[maybe_unused]] const bool registered = [] {
  register_device_kind({.name = "pjrt",
                        .rank = 0,
                        .count = [] { return client_slot() ? client_slot()->device_count() : 0; },
                        .describe = describe,
                        .allocate = allocate,
                        .copy = copy,
                        .fill_zero = fill_zero,
                        .peak_allocated = [](int) { return size_t{0}; },
                        .use_plugin = use_plugin});
  graph::register_backend("pjrt", &backend());
  return true;
}();

}  // namespace
}  // namespace tfm::pjrt
