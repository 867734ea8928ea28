#include "cli/device_options.h"

#include "cli/count_validators.h"
#include "tfm/device.h"
#include "tfm/error.h"

namespace tfm::cli {

void add_plugin_options(CLI::App* cmd, DeviceOptions& options) {
  cmd->add_option("--pjrt-plugin,--pjrt_plugin", options.pjrt_plugin,
                  "PJRT plugin (.so) whose devices --device pjrt[:N] names, e.g. the XLA CPU "
                  "plugin; with --device neuron, Neuron's libneuronpjrt.so in place of the one "
                  "tfm finds");
  cmd->add_option("--pjrt-devices,--pjrt_devices", options.pjrt_devices,
                  "Devices to ask the PJRT plugin for (default: its own count)")
      ->check(at_least(1));
  cmd->add_option("--pjrt-cache,--pjrt_cache", options.pjrt_cache,
                  "Folder of compiled PJRT executables kept between runs (default: "
                  "~/.cache/tfm/pjrt)");
  cmd->add_flag("--no-pjrt-cache,--no_pjrt_cache", options.no_pjrt_cache,
                "Compile every shape afresh; keep nothing on disk");
}

void add_device_options(CLI::App* cmd, DeviceOptions& options) {
  cmd->add_option("--device", options.device,
                  "cpu, cuda[:N], pjrt[:N] (with --pjrt-plugin), neuron[:N] (AWS Neuron's "
                  "PJRT plugin, found where libneuronxla installs it) or auto (default)");
  add_plugin_options(cmd, options);
}

void open_device_plugins(const DeviceOptions& options) {
  const bool neuron = options.device.substr(0, options.device.find(':')) == "neuron";
  if (options.pjrt_plugin.empty() && !neuron) {
    if (options.pjrt_devices != 0) throw Error("--pjrt-devices needs --pjrt-plugin");
    if (!options.pjrt_cache.empty()) throw Error("--pjrt-cache needs --pjrt-plugin");
    return;
  }
  if (options.no_pjrt_cache && !options.pjrt_cache.empty()) {
    throw Error("--pjrt-cache and --no-pjrt-cache contradict each other");
  }
  PluginOptions plugin{.device_count = options.pjrt_devices};
  if (options.no_pjrt_cache) plugin.compile_cache = "";
  if (!options.pjrt_cache.empty()) plugin.compile_cache = options.pjrt_cache;
  use_device_plugin(neuron ? "neuron" : "pjrt", options.pjrt_plugin, plugin);
}

}  // namespace tfm::cli
