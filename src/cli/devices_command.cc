// `tfm devices`: every device this tfm can run on, as device_map would name it.
#include <iostream>

#include "cli/commands.h"
#include "tfm/device.h"

namespace tfm::cli {
namespace {

void print_devices() {
  for (const DeviceInfo& info : devices()) {
    std::cout << info.device.str() << "\t" << info.description << "\n";
  }
}

void add_devices_command(CLI::App& app) {
  CLI::App* command = app.add_subcommand("devices", "List the devices tfm can run on");
  command->callback(print_devices);
}

const bool kRegistered = register_command(&add_devices_command);

}  // namespace
}  // namespace tfm::cli
