// A PJRT plugin (the C API that XLA's CPU and GPU plugins, TPU's and AWS Neuron's implement),
// opened with dlopen: the version handshake, its attributes, and every call's error turned into a
// tfm::Error naming the call and the plugin's message.
#pragma once

#include <cstddef>
#include <string>
#include <utility>
#include <vector>

#include "pjrt_c_api.h"

namespace tfm::pjrt {

class Plugin {
 public:
  // Opens the plugin at `path` once per process (a plugin cannot be unloaded); throws, naming the
  // path, when it is missing, exports no GetPjrtApi, or speaks another major API version.
  static const Plugin& open(const std::string& path);

  const PJRT_Api* api() const { return api_; }
  const std::string& path() const { return path_; }
  int major_version() const { return major_; }
  int minor_version() const { return minor_; }
  // PJRT_Plugin_Attributes, each value printed ("xla_version: 2", "stablehlo_current_version:
  // 1, 9, 3"); empty when the plugin predates the call.
  std::vector<std::pair<std::string, std::string>> attributes() const;

  // Does the plugin's function table reach the field at `offset`? A plugin older than the header
  // tfm was built with has a shorter table.
  bool has(size_t offset) const { return offset < api_->struct_size; }
  void require(size_t offset, const char* call) const;
  // Throws for a non-null error, naming the call and the plugin's message (the error is freed).
  void check(PJRT_Error* error, const char* call) const;
  // For destructors, which cannot throw: frees a non-null error unread.
  void discard(PJRT_Error* error) const;

 private:
  Plugin(std::string path, const PJRT_Api* api);
  std::string path_;
  const PJRT_Api* api_;
  int major_ = 0, minor_ = 0;
};

// Calls api->fn(args) after checking the plugin has fn: `fn` names the call in errors.
#define TFM_PJRT_CALL(plugin, fn, args)            \
  do {                                             \
    (plugin).require(offsetof(PJRT_Api, fn), #fn); \
    (plugin).check((plugin).api()->fn(args), #fn); \
  } while (0)

// An argument struct of the C API, zeroed, its struct_size the header's: plugins newer or older
// than the header read the fields both know.
#define TFM_PJRT_ARGS(type) ::tfm::pjrt::zeroed<type>(type##_STRUCT_SIZE)
template <typename T>
T zeroed(size_t struct_size) {
  T args{};
  args.struct_size = struct_size;
  return args;
}

std::string named_value_str(const PJRT_NamedValue& value);

}  // namespace tfm::pjrt
