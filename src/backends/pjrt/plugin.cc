#include "backends/pjrt/plugin.h"

#include <dlfcn.h>

#include <map>
#include <memory>
#include <mutex>

#include "tfm/error.h"

namespace tfm::pjrt {

Plugin::Plugin(std::string path, const PJRT_Api* api) : path_(std::move(path)), api_(api) {
  major_ = api_->pjrt_api_version.major_version;
  minor_ = api_->pjrt_api_version.minor_version;
  if (major_ != PJRT_API_MAJOR) {
    throw Error("PJRT plugin '" + path_ + "' speaks C API version " + std::to_string(major_) + "." +
                std::to_string(minor_) + ", tfm was built for major version " +
                std::to_string(PJRT_API_MAJOR));
  }
  if (has(offsetof(PJRT_Api, PJRT_Plugin_Initialize))) {
    PJRT_Plugin_Initialize_Args args = TFM_PJRT_ARGS(PJRT_Plugin_Initialize_Args);
    check(api_->PJRT_Plugin_Initialize(&args), "PJRT_Plugin_Initialize");
  }
}

const Plugin& Plugin::open(const std::string& path) {
  static std::mutex mutex;
  // Never destroyed: a plugin is not unloaded, and its client (pjrt_backend.cc) outlives exit.
  static auto& opened = *new std::map<std::string, std::unique_ptr<Plugin>>;
  std::lock_guard<std::mutex> lock(mutex);
  auto it = opened.find(path);
  if (it != opened.end()) return *it->second;
  // RTLD_LOCAL: a plugin carries its own copy of LLVM and protobuf, which must not meet ours.
  void* handle = dlopen(path.c_str(), RTLD_NOW | RTLD_LOCAL);
  if (handle == nullptr) {
    throw Error("cannot open PJRT plugin '" + path + "': " + dlerror());
  }
  using GetApi = const PJRT_Api* (*)();
  auto get_api = reinterpret_cast<GetApi>(dlsym(handle, "GetPjrtApi"));
  if (get_api == nullptr) {
    throw Error("'" + path + "' is not a PJRT plugin: it exports no GetPjrtApi");
  }
  const PJRT_Api* api = get_api();
  if (api == nullptr) throw Error("PJRT plugin '" + path + "': GetPjrtApi returned null");
  std::unique_ptr<Plugin> plugin(new Plugin(path, api));
  return *opened.emplace(path, std::move(plugin)).first->second;
}

void Plugin::require(size_t offset, const char* call) const {
  if (!has(offset)) {
    throw Error("PJRT plugin '" + path_ + "' (C API " + std::to_string(major_) + "." +
                std::to_string(minor_) + ") has no " + call);
  }
}

void Plugin::check(PJRT_Error* error, const char* call) const {
  if (error == nullptr) return;
  PJRT_Error_Message_Args message = TFM_PJRT_ARGS(PJRT_Error_Message_Args);
  message.error = error;
  api_->PJRT_Error_Message(&message);
  std::string text(message.message, message.message_size);
  discard(error);
  throw Error(std::string(call) + " failed in PJRT plugin '" + path_ + "': " + text);
}

void Plugin::discard(PJRT_Error* error) const {
  if (error == nullptr) return;
  PJRT_Error_Destroy_Args destroy = TFM_PJRT_ARGS(PJRT_Error_Destroy_Args);
  destroy.error = error;
  api_->PJRT_Error_Destroy(&destroy);
}

std::string named_value_str(const PJRT_NamedValue& value) {
  switch (value.type) {
    case PJRT_NamedValue_kString:
      return std::string(value.string_value, value.value_size);
    case PJRT_NamedValue_kInt64:
      return std::to_string(value.int64_value);
    case PJRT_NamedValue_kInt64List: {
      std::string out;
      for (size_t i = 0; i < value.value_size; ++i) {
        out += (i ? ", " : "") + std::to_string(value.int64_array_value[i]);
      }
      return out;
    }
    case PJRT_NamedValue_kFloat:
      return std::to_string(value.float_value);
    case PJRT_NamedValue_kBool:
      return value.bool_value ? "true" : "false";
  }
  return "?";
}

std::vector<std::pair<std::string, std::string>> Plugin::attributes() const {
  std::vector<std::pair<std::string, std::string>> out;
  if (!has(offsetof(PJRT_Api, PJRT_Plugin_Attributes))) return out;
  PJRT_Plugin_Attributes_Args args = TFM_PJRT_ARGS(PJRT_Plugin_Attributes_Args);
  TFM_PJRT_CALL(*this, PJRT_Plugin_Attributes, &args);
  for (size_t i = 0; i < args.num_attributes; ++i) {
    const PJRT_NamedValue& v = args.attributes[i];
    out.emplace_back(std::string(v.name, v.name_size), named_value_str(v));
  }
  return out;
}

}  // namespace tfm::pjrt
