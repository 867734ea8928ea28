#include <algorithm>
#include <cctype>
#include <charconv>
#include <cstdlib>
#include <cstring>
#include <thread>

#include "core/device_registry.h"
#include "tfm/error.h"

namespace tfm {
namespace {

std::vector<DeviceKind>& kinds() {
  static std::vector<DeviceKind> all;
  return all;
}

// Kinds tfm has a backend for in some builds: a build without one has no such device, and says
// why, rather than call the name unknown. Backends register their kinds; this only names them.
const char* const kBuildOptionalKinds[] = {"cuda", "pjrt"};
// Platforms a kind's plugin reaches, and that kind: "neuron" is a PJRT plugin tfm finds itself.
const std::pair<const char*, const char*> kBuildOptionalPlatforms[] = {{"neuron", "pjrt"}};

std::string kinds_present() {
  std::string names = "cpu";
  for (const DeviceKind& k : kinds()) {
    if (k.count() > 0) names += ", " + k.name;
  }
  return names;
}

// Every kind a device spec may name, registered here or built into other builds.
std::vector<std::string> kinds_named() {
  std::vector<std::string> names;
  for (const DeviceKind& k : kinds()) names.push_back(k.name);
  for (const char* k : kBuildOptionalKinds) {
    if (std::find(names.begin(), names.end(), k) == names.end()) names.emplace_back(k);
  }
  std::sort(names.begin(), names.end());  // the same message whatever order backends registered in
  return names;
}

bool known_kind(const std::string& kind) {
  const std::vector<std::string> names = kinds_named();
  return kind == "cpu" || std::find(names.begin(), names.end(), kind) != names.end();
}

std::string kinds_known() {
  std::string names = "cpu";
  for (const std::string& k : kinds_named()) names += ", " + k;
  return names;
}

std::string specs_known() {
  std::string specs = "cpu";
  for (const std::string& k : kinds_named()) specs += ", " + k + ", " + k + ":N";
  for (const auto& [platform, kind] : kBuildOptionalPlatforms) {
    specs += ", " + std::string(platform) + ", " + platform + ":N";
  }
  return specs + " or auto";
}

// The kind whose plugin reaches `platform` ("pjrt" for "neuron"), null when `platform` is none.
const char* platform_kind(const std::string& platform) {
  for (const auto& [name, kind] : kBuildOptionalPlatforms) {
    if (platform == name) return kind;
  }
  return nullptr;
}

std::string upper(std::string name) {
  for (char& c : name) c = static_cast<char>(std::toupper(static_cast<unsigned char>(c)));
  return name;
}

int claimed_accelerator = -1;  // the accelerator index this process computes on, once chosen
std::string claimed_kind;

// Without an index: the one already chosen, else under a launcher LOCAL_RANK's (modulo the
// count, as torchrun scripts pick with torch.cuda.set_device), else the first.
int default_accelerator(int count) {
  if (claimed_accelerator >= 0) return claimed_accelerator % count;
  const char* local_rank = std::getenv("LOCAL_RANK");
  int rank = 0;
  if (local_rank != nullptr) {
    const char* last = local_rank + std::strlen(local_rank);
    auto [end, ec] = std::from_chars(local_rank, last, rank);
    if (ec != std::errc() || end != last || rank < 0) rank = 0;
  }
  return rank % count;
}

Device claim_accelerator(const std::string& kind, int index) {
  const Device device{kind, index};
  if (claimed_accelerator >= 0 && (claimed_accelerator != index || claimed_kind != kind)) {
    throw Error("device " + device.str() + " requested, but this process computes on " +
                Device{claimed_kind, claimed_accelerator}.str() +
                " (one accelerator per process: start one process per device with tfmrun)");
  }
  claimed_accelerator = index;
  claimed_kind = kind;
  return device;
}

}  // namespace

std::string Device::str() const {
  if (type == "cpu") return "cpu";
  return type + ":" + std::to_string(index);
}

void register_device_kind(DeviceKind kind) { kinds().push_back(std::move(kind)); }

const DeviceKind* find_device_kind(const std::string& name) {
  for (const DeviceKind& k : kinds()) {
    if (k.name == name) return &k;
  }
  return nullptr;
}

int process_accelerator_index() { return std::max(claimed_accelerator, 0); }

namespace {

std::function<std::vector<std::pair<std::string, std::string>>()>& cpu_attributes() {
  static std::function<std::vector<std::pair<std::string, std::string>>()> attributes;
  return attributes;
}

}  // namespace

void register_cpu_attributes(
    std::function<std::vector<std::pair<std::string, std::string>>()> attributes) {
  cpu_attributes() = std::move(attributes);
}

std::vector<DeviceInfo> devices() {
  std::vector<DeviceInfo> all;
  all.push_back({kCpu, std::to_string(std::thread::hardware_concurrency()) + " threads", 0});
  if (cpu_attributes()) all.back().attributes = cpu_attributes()();
  for (const DeviceKind& k : kinds()) {
    for (int i = 0; i < k.count(); ++i) all.push_back(k.describe(i));
  }
  return all;
}

std::vector<std::string> device_kinds() {
  std::vector<std::string> names{"cpu"};
  for (const DeviceKind& k : kinds()) names.push_back(k.name);
  return names;
}

int device_count(const std::string& kind) {
  if (kind == "cpu") return 1;
  if (!known_kind(kind)) {
    throw Error("unknown device type '" + kind + "' (known: " + kinds_known() + ")");
  }
  const DeviceKind* k = find_device_kind(kind);
  return k != nullptr ? k->count() : 0;
}

bool is_available(const std::string& kind) { return device_count(kind) > 0; }

namespace {

// Finds and opens `platform`'s plugin through the kind that reaches it (`path`, where given, is
// the plugin to take instead of the one found).
void use_platform(const std::string& platform, const char* kind, const std::string& path,
                  const PluginOptions& options) {
  const DeviceKind* k = find_device_kind(kind);
  if (k == nullptr) {
    throw Error("device type '" + platform + "' runs through the " + upper(kind) +
                " backend, and this tfm was built without it");
  }
  if (std::find(k->platforms.begin(), k->platforms.end(), platform) == k->platforms.end()) {
    throw Error("the " + upper(kind) + " backend of this tfm does not reach " + platform);
  }
  k->use_platform(platform, path, options);
}

}  // namespace

void use_device_plugin(const std::string& kind, const std::string& path,
                       const PluginOptions& options) {
  if (const char* owner = platform_kind(kind)) {
    use_platform(kind, owner, path, options);
    return;
  }
  if (!known_kind(kind)) {
    throw Error("unknown device type '" + kind + "' (known: " + kinds_known() + ")");
  }
  const DeviceKind* k = find_device_kind(kind);
  if (k == nullptr) {
    throw Error("plugin '" + path + "' for device type '" + kind +
                "': this tfm was built without the " + upper(kind) + " backend");
  }
  if (!k->use_plugin) throw Error("device type '" + kind + "' takes no plugin");
  k->use_plugin(path, options);
}

Device resolve_device(const std::string& spec, std::string* chosen_reason) {
  if (spec == "auto") {
    const DeviceKind* best = nullptr;
    for (const DeviceKind& k : kinds()) {
      if (k.count() > 0 && (best == nullptr || k.rank > best->rank)) best = &k;
    }
    if (best == nullptr) {
      if (chosen_reason) *chosen_reason = "device_map=auto chose cpu (no accelerator present)";
      return kCpu;
    }
    const int index = default_accelerator(best->count());
    if (chosen_reason) {
      *chosen_reason = "device_map=auto chose " + Device{best->name, index}.str() + " (" +
                       best->describe(index).description + ")";
    }
    return claim_accelerator(best->name, index);
  }
  if (spec == "cpu") return kCpu;
  const std::string kind = spec.substr(0, spec.find(':'));
  int index = -1;
  if (kind.size() < spec.size()) {
    const char* first = spec.data() + kind.size() + 1;
    const char* last = spec.data() + spec.size();
    auto [end, ec] = std::from_chars(first, last, index);
    if (ec != std::errc() || end != last || index < 0) {
      throw Error("device '" + spec + "': expected " + specs_known());
    }
  }
  if (const char* owner = platform_kind(kind)) {
    // "neuron:1" is the PJRT kind's device 1 of Neuron's plugin: found and opened here unless it
    // is open already (device_map="neuron" with nothing else said); another plugin is refused.
    use_platform(kind, owner, "", {});
    return resolve_device(owner + spec.substr(kind.size()), chosen_reason);
  }
  if (!known_kind(kind)) {
    throw Error("unknown device '" + spec + "' (known: " + kinds_known() + ", auto)");
  }
  const DeviceKind* k = find_device_kind(kind);
  const int count = k != nullptr ? k->count() : 0;
  if (count == 0) {
    std::string why;
    if (k == nullptr) {
      why = " (this tfm was built without the " + upper(kind) + " backend)";
    } else if (k->use_plugin) {
      why = " (" + kind + " devices come from a plugin: pass --" + kind +
            "-plugin PATH, or call tfm::use_device_plugin first)";
    }
    throw Error("device '" + spec + "' requested but no " + upper(kind) + " device is present" +
                why + "; present: " + kinds_present());
  }
  if (index >= count) {
    throw Error("device '" + spec + "' requested but only " + std::to_string(count) + " " + kind +
                " device(s) are present");
  }
  return claim_accelerator(kind, index < 0 ? default_accelerator(count) : index);
}

}  // namespace tfm
