// The PJRT backend: a graph of basic ops printed as StableHLO (stablehlo.h), compiled by the
// plugin tfm::use_device_plugin("pjrt", ...) named, and run with the weights and the state (KV
// cache) staying in device buffers between runs; only the other inputs move. State is donated
// (the module aliases each update to its state's argument), and its new buffers take the old
// ones' place in the caller's tensors.
#include <cstdlib>
#include <cstring>
#include <deque>
#include <filesystem>
#include <map>
#include <optional>
#include <set>

#include "backends/pjrt/cached_compile.h"
#include "backends/pjrt/client.h"
#include "backends/pjrt/compile_options.h"
#include "backends/pjrt/device_buffer.h"
#include "backends/pjrt/embedded_python.h"
#include "backends/pjrt/neuron_install.h"
#include "backends/pjrt/sharding.h"
#include "backends/pjrt/stablehlo.h"
#include "core/device_registry.h"
#include "graph/backend.h"
#include "tfm/error.h"
#include "tfm/log.h"

namespace tfm::pjrt {
namespace {

using graph::Graph;
using graph::Node;
using graph::Op;
using graph::ValueId;

// The process's one client, of the plugin it was given, and its compile cache (if any). The
// client is never destroyed: at exit the plugin's own static objects go first (they were made
// after this slot), and destroying the client then called into them (a test hung at exit while
// an XLA thread freed an executable against the plugin's destroyed JIT registry).
std::unique_ptr<Client>& client_slot() {
  static auto* client = new std::unique_ptr<Client>;
  return *client;
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

// --device neuron: AWS Neuron's plugin where its packages install it (or at `path`), opened once
// what it reads from the environment is set and Python runs for its libneuronxla callbacks.
void use_platform(const std::string& platform, const std::string& path,
                  const PluginOptions& options) {
  TFM_CHECK(platform == "neuron", "the PJRT backend registers no other platform");
  static std::string opened;  // Neuron's plugin, once this process has opened it
  if (!opened.empty() && (path.empty() || path == opened)) return;
  if (client_slot() != nullptr) {
    throw Error("device neuron requested, but this process already uses PJRT plugin '" +
                client_slot()->plugin().path() + "'");
  }
  const GetEnv getenv = [](const char* name) { return std::getenv(name); };
  const NeuronInstall install = find_neuron_install(path, getenv);
  log_info("device neuron: plugin " + install.plugin);
  for (const auto& [name, value] : neuron_environment(getenv)) {
    ::setenv(name.c_str(), value.c_str(), 1);
    log_info("device neuron: " + name + "=" + value);
  }
  if (install.site_packages.empty()) {
    log_warn("device neuron: no libneuronxla Python package beside '" + install.plugin +
             "' or in the Python environments searched: compiles that need neuronx-cc will fail");
  } else {
    start_embedded_python(install.python_version, install.site_packages, "libneuronxla");
  }
  use_plugin(install.plugin, options);
  opened = install.plugin;
}

std::shared_ptr<void> allocate(int index, size_t bytes) {
  return make_device_buffer(client(), index, bytes);
}

void copy(void* dst, const void* src, size_t bytes, int /*index*/, bool to_device) {
  if (to_device) {
    const Place p = place_of(dst, "copy to pjrt");
    p.holder->write(p.offset, src, bytes);
  } else {
    const Place p = place_of(src, "copy from pjrt");
    p.holder->read(p.offset, dst, bytes);
  }
}

void fill_zero(void* data, size_t bytes, int /*index*/) {
  const Place p = place_of(data, "fill pjrt with zeros");
  p.holder->zero(p.offset, bytes);
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

// Where `t` (a weight, or the tensor given for a state input) lies: a part of a larger buffer is
// placed in it (Placement::buffer left for the caller to number); one filling its buffer is an
// argument of its own.
std::optional<std::pair<DeviceBuffer*, Placement>> placement_of(const Tensor& t,
                                                                const std::string& name) {
  if (!t.defined() || t.device().type != "pjrt") return std::nullopt;
  const Place p = place_of(t.data(), "'" + name + "'");
  if (p.offset == 0 && p.holder->bytes() == t.nbytes()) return std::nullopt;
  const auto element = static_cast<int64_t>(dtype_size(t.dtype()));
  return std::make_pair(p.holder, Placement{0, static_cast<int64_t>(p.offset) / element,
                                            static_cast<int64_t>(p.holder->bytes()) / element});
}

class PjrtExecutable : public graph::Executable {
 public:
  PjrtExecutable(Graph graph, const Client& client, int device,
                 graph::Partitioning partitioning)
      : graph_(std::move(graph)),
        client_(client),
        device_(device),
        partitioning_(std::move(partitioning)) {
    if (partitioned() && client_.device_count() < partitioning_.devices()) {
      throw Error("a program partitioned over " + std::to_string(partitioning_.devices()) +
                  " devices, but the PJRT plugin '" + client_.plugin().path() + "' has " +
                  std::to_string(client_.device_count()) +
                  " (XLA's CPU plugin makes as many as --pjrt-devices asks)");
    }
    input_ids_ = graph_.inputs();
    std::vector<Tensor> bound;  // what the state inputs were built bound to (Node::constant)
    for (const ValueId id : input_ids_)
      bound.push_back(graph_.nodes[static_cast<size_t>(id)].constant);
    for (Node& n : graph_.nodes) {
      if (n.op == Op::kInput) n.constant = Tensor();  // the graph keeps no caller's buffer alive
      // Weights the model keeps on the device are used where they are; others (RoPE's
      // inverse frequencies, built per graph) are uploaded once, here.
      if (n.op == Op::kWeight && n.constant.device().type != "pjrt") {
        n.constant = n.constant.to(Device{"pjrt", device_});
      }
    }
    weights_ = placements(nullptr, 0);
    std::set<int> buffers;
    for (const auto& [id, p] : weights_) buffers.insert(p.buffer);
    weight_buffers_ = buffers.size();
    variants_.push_back(compile_layout(placements(&bound, static_cast<int>(weight_buffers_))));
  }

  graph::RunResult run(const std::vector<Tensor>& inputs) override {
    if (inputs.size() != input_ids_.size()) {
      throw Error("graph expects " + std::to_string(input_ids_.size()) + " inputs, got " +
                  std::to_string(inputs.size()));
    }
    for (size_t i = 0; i < inputs.size(); ++i) {
      check_input(graph_.nodes[static_cast<size_t>(input_ids_[i])], inputs[i]);
    }
    const Variant& v = variant_for(inputs);
    const auto devices = static_cast<size_t>(partitioning_.devices());
    std::vector<Buffer> uploaded;  // this run's host inputs, alive until it ends
    std::vector<std::vector<PJRT_Buffer*>> buffers(devices);  // each device's arguments
    std::vector<DeviceBuffer*> holders;  // each argument's, null for a host input
    std::vector<int64_t> kept;           // arguments not donated: all but the updated state
    for (size_t k = 0; k < v.arguments.size(); ++k) {
      const Argument& a = v.arguments[k];
      if (!a.updated) kept.push_back(static_cast<int64_t>(k));
      if (a.input && !a.state) {
        const Tensor& t = inputs[*a.input];
        const Tensor host = t.is_contiguous() ? t : t.clone();
        for (size_t d = 0; d < devices; ++d) {
          uploaded.push_back(upload_block(host, a, static_cast<int>(d)));
          buffers[d].push_back(uploaded.back().get());
        }
        holders.push_back(nullptr);
        continue;
      }
      const Tensor& held = a.input ? inputs[*a.input] : a.weight;
      DeviceBuffer* holder = place_of(held.data(), a.name).holder;
      if (partitioned()) {
        const std::vector<PJRT_Buffer*> blocks = holder->blocks(*a.sharding, a.dtype, a.name);
        for (size_t d = 0; d < devices; ++d) buffers[d].push_back(blocks[d]);
      } else {
        buffers[0].push_back(holder->buffer(a.shape, a.dtype, a.name));
      }
      holders.push_back(holder);
    }
    std::vector<std::vector<Buffer>> results =
        client_.execute(v.executable.get(), buffers, kept, v.output_count);
    for (const std::vector<Buffer>& device_results : results) {
      TFM_CHECK(device_results.size() == v.module.outputs + v.module.updated_arguments.size(),
                "PJRT executable's result count");
    }
    graph::RunResult out;
    for (size_t r = 0; r < v.module.outputs; ++r) {
      const Node& n = graph_.nodes[static_cast<size_t>(graph_.outputs[r])];
      Tensor t = Tensor::empty(n.shape, n.dtype);
      // Whole on every device of a partitioned program: the first's.
      client_.download(results[0][r].get(), t.data(), t.nbytes());
      out.outputs.push_back(std::move(t));
    }
    // The donated state's new buffers go into the holders the caller's tensors are in: to the
    // caller the state is updated in place, as on a kernel backend (eager runs, which return no
    // state, rely on it).
    for (size_t u = 0; u < v.module.updated_arguments.size(); ++u) {
      const size_t k = v.module.updated_arguments[u];
      const Argument& a = v.arguments[k];
      if (!partitioned()) {
        holders[k]->replace(std::move(results[0][v.module.outputs + u]), a.shape, a.dtype);
        continue;
      }
      std::vector<Buffer> blocks;
      for (size_t d = 0; d < devices; ++d) {
        blocks.push_back(std::move(results[d][v.module.outputs + u]));
      }
      holders[k]->replace_blocks(std::move(blocks), *a.sharding, a.dtype);
    }
    for (size_t i = 0; i < inputs.size(); ++i) {
      if (graph_.nodes[static_cast<size_t>(input_ids_[i])].is_state) out.state.push_back(inputs[i]);
    }
    return out;
  }

  size_t arena_bytes() const override { return 0; }
  bool from_compile_cache() const override { return variants_.front().from_cache; }

 private:
  // A module argument: a host input, a state input, a weight, or one buffer that several of them
  // (the Trainer's flat parameters or gradients) are parts of.
  struct Argument {
    std::string name;
    Shape shape;
    DType dtype = DType::f32;
    std::optional<size_t> input;  // a graph input among its members
    bool state = false;
    Tensor weight;         // a weight among its members (when no input is)
    bool updated = false;  // donated: the run writes its new value
    std::optional<Sharding> sharding;  // a partitioned program's
  };
  // The graph compiled for one layout of its weights and state in device buffers.
  struct Variant {
    Placements state;       // the state inputs' (the variant's key)
    Placements placements;  // the weights' and the state inputs'

    Module module;
    LoadedExecutable executable;
    bool from_cache = false;
    size_t output_count = 0;
    std::vector<Argument> arguments;
  };

  // The parts of larger buffers among the weights, or among the state inputs where `inputs` (a
  // tensor per graph input, null for the weights) has them; their buffers numbered from
  // `first_buffer` in node order.
  Placements placements(const std::vector<Tensor>* inputs, int first_buffer) const {
    Placements out;
    std::map<DeviceBuffer*, int> number;
    size_t input = 0;
    for (size_t i = 0; i < graph_.nodes.size(); ++i) {
      const Node& n = graph_.nodes[i];
      const Tensor* t = nullptr;
      if (n.op == Op::kInput) {
        if (inputs != nullptr && n.is_state) t = &(*inputs)[input];
        ++input;
      } else if (n.op == Op::kWeight && inputs == nullptr) {
        t = &n.constant;
      }
      if (t == nullptr) continue;
      auto placed = placement_of(*t, n.name);
      if (!placed) continue;
      placed->second.buffer =
          number.emplace(placed->first, first_buffer + static_cast<int>(number.size()))
              .first->second;
      out[static_cast<ValueId>(i)] = placed->second;
    }
    return out;
  }

  // The graph compiled for its state inputs placed as `state` says.
  Variant compile_layout(Placements state) const {
    Variant v;
    v.state = std::move(state);
    v.placements = weights_;
    v.placements.insert(v.state.begin(), v.state.end());
    const std::map<ValueId, Sharding> shardings = argument_shardings(v.placements);
    v.module = emit_stablehlo(graph_, v.placements,
                              partitions_of(shardings, partitioning_.devices()));
    const std::optional<CompileCache>& cache = cache_slot();
    Compiled compiled = compile_cached(client_, cache ? &*cache : nullptr, v.module.text,
                                       serialize(compile_options()));
    v.executable = std::move(compiled.executable);
    v.from_cache = compiled.from_cache;
    v.output_count = client_.output_count(v.executable.get());
    std::map<ValueId, size_t> input_index;
    for (size_t i = 0; i < input_ids_.size(); ++i) input_index[input_ids_[i]] = i;
    for (const std::vector<ValueId>& members : v.module.arguments) {
      Argument a;
      const Node& first = graph_.nodes[static_cast<size_t>(members[0])];
      auto placement = v.placements.find(members[0]);
      a.shape = placement == v.placements.end() ? first.shape : Shape{placement->second.size};
      a.dtype = first.dtype;
      a.name = members.size() == 1 ? "'" + first.name + "'"
                                   : "the buffer of '" + first.name + "' and " +
                                         std::to_string(members.size() - 1) + " more";
      if (partitioned()) a.sharding = shardings.at(members[0]);
      for (const ValueId id : members) {
        const Node& n = graph_.nodes[static_cast<size_t>(id)];
        if (n.op == Op::kWeight) {
          a.weight = n.constant;
        } else {
          a.input = input_index.at(id);
          a.state = n.is_state;
        }
      }
      v.arguments.push_back(std::move(a));
    }
    for (const size_t a : v.module.updated_arguments) v.arguments[a].updated = true;
    return v;
  }

  // The variant for where `inputs`' state lies, compiled now if no run had that layout: a graph
  // built bound to its state (graph::Builder::state) and given other buffers still runs.
  const Variant& variant_for(const std::vector<Tensor>& inputs) {
    const Placements placed = placements(&inputs, static_cast<int>(weight_buffers_));
    for (const Variant& v : variants_) {
      if (v.state == placed) return v;
    }
    log_info(
        "pjrt: the graph's state given in another layout than it was compiled for: "
        "compiling that layout too");
    variants_.push_back(compile_layout(placed));
    return variants_.back();
  }

  bool partitioned() const { return partitioning_.devices() > 1; }

  // How a partitioned program splits each graph input and weight (none for one device).
  std::map<ValueId, Sharding> argument_shardings(const Placements& placements) const {
    if (!partitioned()) return {};
    return pjrt::argument_shardings(graph_, partitioning_, placements);
  }

  CompileOptions compile_options() const {
    CompileOptions options;
    if (!partitioned()) return options;
    options.num_partitions = partitioning_.devices();
    options.use_spmd_partitioning = true;
    for (int d = 0; d < partitioning_.devices(); ++d) {
      options.partition_devices.push_back(client_.device_id(d));
    }
    return options;
  }

  // Device `device`'s block of the host input `host` (the whole of it on one device).
  Buffer upload_block(const Tensor& host, const Argument& a, int device) const {
    if (!partitioned()) return client_.upload(host.data(), a.dtype, a.shape, device_);
    Tensor block = Tensor::empty(a.sharding->block_shape(), a.dtype);
    a.sharding->cut(host.data(), dtype_size(a.dtype), device, block.data());
    return client_.upload(block.data(), a.dtype, block.shape(), device);
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
    if (n.is_state && t.device().type != "pjrt") {
      throw Error("graph input '" + n.name +
                  "' is state: expected a tensor on a pjrt device, "
                  "got one on " +
                  t.device().str());
    }
  }

  Graph graph_;
  const Client& client_;
  int device_;
  graph::Partitioning partitioning_;
  std::vector<ValueId> input_ids_;
  Placements weights_;  // where the weights lie in larger buffers, fixed for the executable
  size_t weight_buffers_ = 0;
  std::deque<Variant> variants_;  // the first compiled with the graph; a deque keeps references
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
                                            process_accelerator_index(), options.partitioning);
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
                        .partitions_programs = true,
                        .whole_buffer_states = true,
                        .use_plugin = use_plugin,
                        .platforms = {"neuron"},
                        .use_platform = use_platform});
  graph::register_backend("pjrt", &backend());
  return true;
}();

}  // namespace
}  // namespace tfm::pjrt
