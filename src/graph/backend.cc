#include "graph/backend.h"

#include <map>

#include "backends/cpu/cpu_backend.h"
#include "tfm/error.h"

namespace tfm::graph {
namespace {

std::map<DeviceType, Backend*>& accelerator_backends() {
  static std::map<DeviceType, Backend*> all;
  return all;
}

}  // namespace

void register_backend(DeviceType type, Backend* backend) { accelerator_backends()[type] = backend; }

Backend& backend_for(Device device) {
  if (device.type == DeviceType::cpu) return cpu::cpu_backend();
  auto it = accelerator_backends().find(device.type);
  if (it == accelerator_backends().end()) {
    throw Error("no backend for device " + device.str() + " in this build of tfm");
  }
  return *it->second;
}

}  // namespace tfm::graph
