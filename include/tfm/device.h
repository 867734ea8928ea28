// Devices and the registry of what is present. "cpu" is always there; a backend built into tfm
// (CUDA) registers its device type and reports how many devices the machine has.
#pragma once

#include <cstddef>
#include <functional>
#include <memory>
#include <string>
#include <vector>

namespace tfm {

enum class DeviceType : uint8_t { cpu, cuda };

struct Device {
  DeviceType type = DeviceType::cpu;
  int index = 0;

  std::string str() const;  // "cpu", "cuda:0"
  bool operator==(const Device&) const = default;
};

inline const Device kCpu{DeviceType::cpu, 0};

struct DeviceInfo {
  Device device;
  std::string description;  // e.g. "NVIDIA H200, 139.8 GiB"
  size_t memory_bytes = 0;
};

// What a backend tells the registry about its device type.
struct DeviceProvider {
  DeviceType type;
  std::string name;  // "cuda"
  std::function<int()> count;
  std::function<DeviceInfo(int index)> describe;
  // Device memory: allocate returns an owning pointer whose deleter frees it.
  std::function<std::shared_ptr<void>(int index, size_t bytes)> allocate;
  std::function<void(void* dst, const void* src, size_t bytes, int index, bool to_device)> copy;
  std::function<void(void* data, size_t bytes, int index)> fill_zero;
  // The most device memory this process's allocations held at once (what benchmarks compare with
  // torch.cuda.max_memory_allocated).
  std::function<size_t(int index)> peak_allocated;
};

void register_device_provider(DeviceProvider provider);
const DeviceProvider* find_device_provider(DeviceType type);

std::vector<DeviceInfo> devices();                // every device present, cpu first
bool is_available(const std::string& type_name);  // "cpu", "cuda"
int device_count(const std::string& type_name);

// Parses "cpu", "cuda", "cuda:N" or "auto" and checks the device is present. "auto" picks the
// best accelerator present, else the cpu; `chosen_reason` (if given) says which and why.
// "cuda" (and "auto" choosing it) under tfmrun or torchrun means cuda:LOCAL_RANK (modulo the
// devices present), as torchrun scripts choose with torch.cuda.set_device(local_rank). A process
// computes on one CUDA device: the first it resolves; asking for another is an error.
Device resolve_device(const std::string& spec, std::string* chosen_reason = nullptr);
// That device's index (0 before any is resolved).
int process_accelerator_index();

}  // namespace tfm
