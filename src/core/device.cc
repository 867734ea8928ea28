#include "tfm/device.h"

#include <algorithm>
#include <charconv>
#include <cstdlib>
#include <cstring>
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

namespace {

int claimed_accelerator = -1;  // the accelerator index this process computes on, once chosen

// Without an index: the one already chosen, else under a launcher LOCAL_RANK's (modulo the
// count, as torchrun scripts pick with torch.cuda.set_device), else the first.
int default_accelerator(int count) {
  if (claimed_accelerator >= 0) return claimed_accelerator;
  const char* local_rank = std::getenv("LOCAL_RANK");
  int rank = 0;
  if (local_rank != nullptr) {
    const char* last = local_rank + std::strlen(local_rank);
    auto [end, ec] = std::from_chars(local_rank, last, rank);
    if (ec != std::errc() || end != last || rank < 0) rank = 0;
  }
  return rank % count;
}

Device claim_accelerator(DeviceType type, int index) {
  if (claimed_accelerator >= 0 && claimed_accelerator != index) {
    throw Error("device cuda:" + std::to_string(index) + " requested, but this process computes " +
                "on cuda:" + std::to_string(claimed_accelerator) +
                " (one CUDA device per process: start one process per device with tfmrun)");
  }
  claimed_accelerator = index;
  return Device{type, index};
}

}  // namespace

int process_accelerator_index() { return std::max(claimed_accelerator, 0); }

Device resolve_device(const std::string& spec, std::string* chosen_reason) {
  if (spec == "auto") {
    for (const DeviceProvider& p : providers()) {
      if (p.count() > 0) {
        const int index = default_accelerator(p.count());
        if (chosen_reason)
          *chosen_reason = "device_map=auto chose " + p.name + ":" + std::to_string(index) +
                           " (" + p.describe(index).description + ")";
        return claim_accelerator(p.type, index);
      }
    }
    if (chosen_reason) *chosen_reason = "device_map=auto chose cpu (no accelerator present)";
    return kCpu;
  }
  if (spec == "cpu") return kCpu;
  const std::string type_name = spec.substr(0, spec.find(':'));
  int index = -1;
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
  return claim_accelerator(DeviceType::cuda, index < 0 ? default_accelerator(count) : index);
}

}  // namespace tfm
