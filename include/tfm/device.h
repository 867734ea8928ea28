// Devices by name. "cpu" is always there; each backend built into tfm registers the kind of
// device it runs ("cuda"), and says how many the machine has.
#pragma once

#include <cstddef>
#include <optional>
#include <string>
#include <utility>
#include <vector>

namespace tfm {

struct Device {
  std::string type = "cpu";  // the kind, as registered: "cpu", "cuda", "pjrt"
  int index = 0;

  std::string str() const;  // "cpu", "cuda:0"
  bool operator==(const Device&) const = default;
};

inline const Device kCpu{};

struct DeviceInfo {
  Device device;
  std::string description;  // e.g. "NVIDIA H200, 139.8 GiB"
  size_t memory_bytes = 0;
  // A plugin's own attributes (a PJRT plugin's: its XLA and StableHLO versions), by name.
  std::vector<std::pair<std::string, std::string>> attributes = {};
};

std::vector<DeviceInfo> devices();  // every device present, cpu first
// The kinds this build of tfm has a backend for, present on this machine or not.
std::vector<std::string> device_kinds();
bool is_available(const std::string& kind);  // "cpu", "cuda"

// Kinds whose devices a plugin provides ("pjrt": a PJRT plugin's .so, such as XLA's CPU plugin
// or AWS Neuron's libneuronpjrt.so). Before the kind's first use; a kind this build lacks, or
// one without plugins, is refused. `kind` may also be a platform that tfm finds the plugin of
// itself ("neuron": docs/ARCHITECTURE.md says where it looks); `path` "" then means "find it".
struct PluginOptions {
  int device_count = 0;  // devices to ask the plugin for (0: its default; XLA's CPU plugin makes
                         // as many as asked)
  // Where compiled executables are kept between runs: nullopt, the kind's default
  // (~/.cache/tfm/pjrt, or under $XDG_CACHE_HOME); "", nowhere.
  std::optional<std::string> compile_cache = std::nullopt;
};
void use_device_plugin(const std::string& kind, const std::string& path,
                       const PluginOptions& options = {});
int device_count(const std::string& kind);  // 0 for a kind this build lacks

// Parses "cpu", "KIND", "KIND:N" or "auto" and checks the device is present; "neuron[:N]" finds
// and opens Neuron's PJRT plugin (unless open already) and names its pjrt device. "auto" picks the
// present kind its backend ranks first (an accelerator before the cpu); `chosen_reason` (if given)
// says which and why. An accelerator without an index under tfmrun or torchrun means
// KIND:LOCAL_RANK (modulo the devices present), as torchrun scripts choose with
// torch.cuda.set_device(local_rank). A process computes on one accelerator: the first it
// resolves; asking for another is an error.
Device resolve_device(const std::string& spec, std::string* chosen_reason = nullptr);

}  // namespace tfm
