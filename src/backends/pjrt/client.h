// A PJRT client of one plugin: its devices, buffers moved between host and device, modules
// compiled and executables run. Owns what it creates; every call's error is a tfm::Error.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "backends/pjrt/plugin.h"
#include "tfm/dtype.h"
#include "tfm/tensor.h"

namespace tfm::pjrt {

class Client;

// A device buffer, destroyed with its owner.
struct BufferDeleter {
  const Plugin* plugin = nullptr;
  void operator()(PJRT_Buffer* buffer) const;
};
using Buffer = std::unique_ptr<PJRT_Buffer, BufferDeleter>;

struct LoadedExecutableDeleter {
  const Plugin* plugin = nullptr;
  void operator()(PJRT_LoadedExecutable* executable) const;
};
using LoadedExecutable = std::unique_ptr<PJRT_LoadedExecutable, LoadedExecutableDeleter>;

PJRT_Buffer_Type buffer_type(DType dtype);  // throws for a dtype PJRT programs here do not take

class Client {
 public:
  // `device_count`: the devices of a CPU client (its option cpu_device_count); 0 leaves the
  // plugin's default.
  Client(const Plugin& plugin, int device_count);
  ~Client();
  Client(const Client&) = delete;
  Client& operator=(const Client&) = delete;

  const Plugin& plugin() const { return plugin_; }
  const std::string& platform_name() const { return platform_name_; }
  const std::string& platform_version() const { return platform_version_; }
  int device_count() const { return static_cast<int>(devices_.size()); }
  PJRT_Device* device(int index) const;
  std::string describe(int index) const;  // the device's kind and description
  int64_t device_id(int index) const;     // its id, as a compile's device assignment names it

  Buffer upload(const void* data, DType dtype, const Shape& shape, int device) const;
  void download(PJRT_Buffer* buffer, void* dst, size_t bytes) const;
  Shape dimensions(PJRT_Buffer* buffer) const;

  LoadedExecutable compile(const std::string& mlir, const std::string& compile_options) const;
  // The plugin's own bytes for a compiled executable, and the executable loaded back from them
  // (PJRT_Executable_Serialize, PJRT_Executable_DeserializeAndLoad): what the compile cache keeps.
  std::string serialize(PJRT_LoadedExecutable* executable) const;
  LoadedExecutable deserialize(const std::string& bytes) const;
  size_t output_count(PJRT_LoadedExecutable* executable) const;
  // Runs on the executable's devices: each device's arguments in the module's order (one list
  // for a program of one device, one a partition of an SPMD program); returns each device's
  // `outputs` results.
  std::vector<std::vector<Buffer>> execute(
      PJRT_LoadedExecutable* executable, const std::vector<std::vector<PJRT_Buffer*>>& arguments,
      const std::vector<int64_t>& non_donatable, size_t outputs) const;
  // What an executable compiled by this client depends on besides its module and options: the
  // plugin, its C API and platform versions, its attributes and the devices (the compile cache's
  // key includes it).
  std::string identity() const;

 private:
  void await(PJRT_Event* event, const char* what) const;
  PJRT_DeviceDescription* description(int index) const;

  const Plugin& plugin_;
  PJRT_Client* client_ = nullptr;
  std::vector<PJRT_Device*> devices_;
  std::string platform_name_, platform_version_;
};

}  // namespace tfm::pjrt
