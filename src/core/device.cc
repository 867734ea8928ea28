#include "tfm/device.h"

#include <charconv>
#include <thread>

#include "tfm/error.h"

namespace tfm {
namespace {

std::vector<DeviceProvider>& providers() {
  static std::vector<DeviceProvider> all;
  return all;
}

std::string type_names_present() {
  std::string names = "cpu";
  for (const DeviceProvider& p : providers()) {
    if (p.count() > 0) names += ", " + p.name;
  }
  return names;
}

}  // namespace

std::string Device::str() const {
  if (type == DeviceType::cpu) return "cpu";
  return "cuda:" + std::to_string(index);
}

void register_device_provider(DeviceProvider provider) {
  providers().push_back(std::move(provider));
}

const DeviceProvider* find_device_provider(DeviceType type) {
  for (const DeviceProvider& p : providers()) {
    if (p.type == type) return &p;
  }
  return nullptr;
}

std::vector<DeviceInfo> devices() {
  std::vector<DeviceInfo> all;
  all.push_back({kCpu, std::to_string(std::thread::hardware_concurrency()) + " threads", 0});
  for (const DeviceProvider& p : providers()) {
    for (int i = 0; i < p.count(); ++i) all.push_back(p.describe(i));
  }
  return all;
}

int device_count(const std::string& type_name) {
  if (type_name == "cpu") return 1;
  for (const DeviceProvider& p : providers()) {
    if (p.name == type_name) return p.count();
  }
  if (type_name == "cuda") return 0;  // known type, backend not built in
  throw Error("unknown device type '" + type_name + "' (known: cpu, cuda)");
}

bool is_available(const std::string& type_name) { return device_count(type_name) > 0; }

Device resolve_device(const std::string& spec, std::string* chosen_reason) {
  if (spec == "auto") {
    for (const DeviceProvider& p : providers()) {
      if (p.count() > 0) {
        if (chosen_reason)
          *chosen_reason =
              "device_map=auto chose " + p.name + ":0 (" + p.describe(0).description + ")";
        return Device{p.type, 0};
      }
    }
    if (chosen_reason) *chosen_reason = "device_map=auto chose cpu (no accelerator present)";
    return kCpu;
  }
  if (spec == "cpu") return kCpu;
  const std::string type_name = spec.substr(0, spec.find(':'));
  int index = 0;
  if (type_name.size() < spec.size()) {
    const char* first = spec.data() + type_name.size() + 1;
    const char* last = spec.data() + spec.size();
    auto [end, ec] = std::from_chars(first, last, index);
    if (ec != std::errc() || end != last || index < 0) {
      throw Error("device '" + spec + "': expected cpu, cuda, cuda:N or auto");
    }
  }
  if (type_name != "cuda") {
    throw Error("unknown device '" + spec + "' (known: cpu, cuda, cuda:N, auto)");
  }
  const int count = device_count(type_name);
  if (count == 0) {
    const bool built = find_device_provider(DeviceType::cuda) != nullptr;
    throw Error("device '" + spec + "' requested but no CUDA device is present" +
                (built ? "" : " (this tfm was built without the CUDA backend)") +
                "; present: " + type_names_present());
  }
  if (index >= count) {
    throw Error("device '" + spec + "' requested but only " + std::to_string(count) +
                " CUDA device(s) are present");
  }
  return Device{DeviceType::cuda, index};
}

}  // namespace tfm
