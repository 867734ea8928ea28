// --device, and the plugin a plugin-provided kind needs (--pjrt-plugin), for every command that
// loads a model or lists devices.
#pragma once

#include <CLI/CLI.hpp>
#include <string>

namespace tfm::cli {

struct DeviceOptions {
  std::string device = "auto";
  std::string pjrt_plugin;  // a PJRT plugin's .so: XLA's CPU plugin, Neuron's libneuronpjrt.so
  int pjrt_devices = 0;     // devices to ask the plugin for (0: its default)
  std::string pjrt_cache;   // the compile cache's folder ("": the default)
  bool no_pjrt_cache = false;
};

// Takes both spellings of the plugin flags (--pjrt-plugin and --pjrt_plugin), so the command
// that speaks TrainingArguments' names and the others read alike.
void add_device_options(CLI::App* cmd, DeviceOptions& options);
void add_plugin_options(CLI::App* cmd, DeviceOptions& options);  // without --device
// Opens the plugins the options name; the device spec then resolves against them.
void open_device_plugins(const DeviceOptions& options);

}  // namespace tfm::cli
