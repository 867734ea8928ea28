// What a backend tells the device registry about the kind of device it runs, and the memory of
// such devices: Tensor allocates and copies through it. Internal: the public face is tfm/device.h.
#pragma once

#include <functional>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "tfm/device.h"

namespace tfm {

struct DeviceKind {
  std::string name;  // "cuda"
  // resolve_device("auto") takes the present kind of the highest rank; the cpu has 0.
  int rank = 1;
  std::function<int()> count;
  std::function<DeviceInfo(int index)> describe;
  // Device memory: allocate returns an owning pointer whose deleter frees it.
  std::function<std::shared_ptr<void>(int index, size_t bytes)> allocate;
  std::function<void(void* dst, const void* src, size_t bytes, int index, bool to_device)> copy;
  std::function<void(void* data, size_t bytes, int index)> fill_zero;
  // The most device memory this process's allocations held at once (what benchmarks compare with
  // torch.cuda.max_memory_allocated).
  std::function<size_t(int index)> peak_allocated;
  // A compiler backend's kind: a DistributedConfig runs as one program of this process,
  // partitioned over the kind's devices (graph::Partitioning), not as a process per rank.
  bool partitions_programs = false;
  // A step's state must be a whole buffer (a compiler backend donates it and takes the result in
  // its place), not a view into one, such as one row of a KV cache.
  bool whole_buffer_states = false;
  // Kinds whose devices come from a plugin: opens it (tfm::use_device_plugin); null for others.
  std::function<void(const std::string& path, const PluginOptions& options)> use_plugin;
  // Platforms whose plugin the kind finds itself ("neuron" for pjrt): use_platform finds it where
  // the platform installs it (or takes `path` where one is given), prepares what it needs, and
  // opens it as the kind's plugin; "neuron[:N]" then names the kind's devices.
  std::vector<std::string> platforms;
  std::function<void(const std::string& platform, const std::string& path,
                     const PluginOptions& options)>
      use_platform;
};

void register_device_kind(DeviceKind kind);
// What the CPU backend says of the CPU, as named attributes (its ISA, the paths its products
// take there): the cpu's DeviceInfo::attributes, which `tfm devices` prints.
void register_cpu_attributes(
    std::function<std::vector<std::pair<std::string, std::string>>()> attributes);
const DeviceKind* find_device_kind(const std::string& name);  // null for the cpu and the unknown
// The index of the accelerator this process computes on (0 before one is resolved).
int process_accelerator_index();

}  // namespace tfm
