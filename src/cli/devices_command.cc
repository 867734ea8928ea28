// `tfm devices`: every device this tfm can run on, as device_map would name it.
#include <iostream>
#include <memory>

#include "cli/commands.h"
#include "cli/device_options.h"
#include "tfm/device.h"

namespace tfm::cli {
namespace {

void print_devices(const DeviceOptions& options) {
  open_device_plugins(options);
  for (const DeviceInfo& info : devices()) {
    std::cout << info.device.str() << "\t" << info.description << "\n";
    for (const auto& [name, value] : info.attributes) {
      std::cout << "\t" << name << ": " << value << "\n";
    }
  }
}

void add_devices_command(CLI::App& app) {
  auto options = std::make_shared<DeviceOptions>();
  CLI::App* command = app.add_subcommand("devices", "List the devices tfm can run on");
  add_plugin_options(command, *options);
  command->add_flag_callback(
      "--neuron", [options] { options->device = "neuron"; },
      "Also find AWS Neuron's PJRT plugin (as --device neuron does) and list its devices");
  command->callback([options] { print_devices(*options); });
}

const bool kRegistered = register_command(&add_devices_command);

}  // namespace
}  // namespace tfm::cli
