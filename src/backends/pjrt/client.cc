#include "backends/pjrt/client.h"

#include "tfm/error.h"

namespace tfm::pjrt {

void BufferDeleter::operator()(PJRT_Buffer* buffer) const {
  PJRT_Buffer_Destroy_Args args = TFM_PJRT_ARGS(PJRT_Buffer_Destroy_Args);
  args.buffer = buffer;
  plugin->discard(plugin->api()->PJRT_Buffer_Destroy(&args));
}

void LoadedExecutableDeleter::operator()(PJRT_LoadedExecutable* executable) const {
  PJRT_LoadedExecutable_Destroy_Args args = TFM_PJRT_ARGS(PJRT_LoadedExecutable_Destroy_Args);
  args.executable = executable;
  plugin->discard(plugin->api()->PJRT_LoadedExecutable_Destroy(&args));
}

PJRT_Buffer_Type buffer_type(DType dtype) {
  switch (dtype) {
    case DType::f32:
      return PJRT_Buffer_Type_F32;
    case DType::bf16:
      return PJRT_Buffer_Type_BF16;
    case DType::f16:
      return PJRT_Buffer_Type_F16;
    case DType::i32:
      return PJRT_Buffer_Type_S32;
    case DType::i64:
      return PJRT_Buffer_Type_S64;
  }
  throw Error("no PJRT buffer type for dtype " + std::string(dtype_name(dtype)));
}

Client::Client(const Plugin& plugin, int device_count) : plugin_(plugin) {
  PJRT_Client_Create_Args args = TFM_PJRT_ARGS(PJRT_Client_Create_Args);
  PJRT_NamedValue option = TFM_PJRT_ARGS(PJRT_NamedValue);
  static const char kDeviceCount[] = "cpu_device_count";
  if (device_count > 0) {
    option.name = kDeviceCount;
    option.name_size = sizeof kDeviceCount - 1;
    option.type = PJRT_NamedValue_kInt64;
    option.int64_value = device_count;
    option.value_size = 1;
    args.create_options = &option;
    args.num_options = 1;
  }
  TFM_PJRT_CALL(plugin_, PJRT_Client_Create, &args);
  client_ = args.client;

  PJRT_Client_AddressableDevices_Args devices = TFM_PJRT_ARGS(PJRT_Client_AddressableDevices_Args);
  devices.client = client_;
  TFM_PJRT_CALL(plugin_, PJRT_Client_AddressableDevices, &devices);
  devices_.assign(devices.addressable_devices,
                  devices.addressable_devices + devices.num_addressable_devices);

  PJRT_Client_PlatformName_Args name = TFM_PJRT_ARGS(PJRT_Client_PlatformName_Args);
  name.client = client_;
  TFM_PJRT_CALL(plugin_, PJRT_Client_PlatformName, &name);
  platform_name_.assign(name.platform_name, name.platform_name_size);
  PJRT_Client_PlatformVersion_Args version = TFM_PJRT_ARGS(PJRT_Client_PlatformVersion_Args);
  version.client = client_;
  TFM_PJRT_CALL(plugin_, PJRT_Client_PlatformVersion, &version);
  platform_version_.assign(version.platform_version, version.platform_version_size);
}

Client::~Client() {
  PJRT_Client_Destroy_Args args = TFM_PJRT_ARGS(PJRT_Client_Destroy_Args);
  args.client = client_;
  plugin_.discard(plugin_.api()->PJRT_Client_Destroy(&args));
}

PJRT_Device* Client::device(int index) const {
  if (index < 0 || index >= device_count()) {
    throw Error("PJRT device " + std::to_string(index) + " does not exist: the plugin '" +
                plugin_.path() + "' has " + std::to_string(device_count()));
  }
  return devices_[static_cast<size_t>(index)];
}

PJRT_DeviceDescription* Client::description(int index) const {
  PJRT_Device_GetDescription_Args get = TFM_PJRT_ARGS(PJRT_Device_GetDescription_Args);
  get.device = device(index);
  TFM_PJRT_CALL(plugin_, PJRT_Device_GetDescription, &get);
  return get.device_description;
}

std::string Client::describe(int index) const {
  PJRT_DeviceDescription_ToString_Args str = TFM_PJRT_ARGS(PJRT_DeviceDescription_ToString_Args);
  str.device_description = description(index);
  TFM_PJRT_CALL(plugin_, PJRT_DeviceDescription_ToString, &str);
  return platform_name_ + " " + std::string(str.to_string, str.to_string_size);
}

int64_t Client::device_id(int index) const {
  PJRT_DeviceDescription_Id_Args id = TFM_PJRT_ARGS(PJRT_DeviceDescription_Id_Args);
  id.device_description = description(index);
  TFM_PJRT_CALL(plugin_, PJRT_DeviceDescription_Id, &id);
  return id.id;
}

void Client::await(PJRT_Event* event, const char* what) const {
  if (event == nullptr) return;
  PJRT_Event_Await_Args wait = TFM_PJRT_ARGS(PJRT_Event_Await_Args);
  wait.event = event;
  PJRT_Error* error = plugin_.api()->PJRT_Event_Await(&wait);
  PJRT_Event_Destroy_Args destroy = TFM_PJRT_ARGS(PJRT_Event_Destroy_Args);
  destroy.event = event;
  plugin_.api()->PJRT_Event_Destroy(&destroy);
  plugin_.check(error, what);
}

Buffer Client::upload(const void* data, DType dtype, const Shape& shape, int device_index) const {
  PJRT_Client_BufferFromHostBuffer_Args args = TFM_PJRT_ARGS(PJRT_Client_BufferFromHostBuffer_Args);
  args.client = client_;
  args.data = data;
  args.type = buffer_type(dtype);
  args.dims = shape.data();
  args.num_dims = shape.size();
  args.host_buffer_semantics = PJRT_HostBufferSemantics_kImmutableUntilTransferCompletes;
  args.device = device(device_index);
  TFM_PJRT_CALL(plugin_, PJRT_Client_BufferFromHostBuffer, &args);
  Buffer buffer(args.buffer, BufferDeleter{&plugin_});
  // The host memory is the caller's only for this call.
  await(args.done_with_host_buffer, "PJRT_Client_BufferFromHostBuffer (transfer)");
  return buffer;
}

void Client::download(PJRT_Buffer* buffer, void* dst, size_t bytes) const {
  PJRT_Buffer_ToHostBuffer_Args args = TFM_PJRT_ARGS(PJRT_Buffer_ToHostBuffer_Args);
  args.src = buffer;
  TFM_PJRT_CALL(plugin_, PJRT_Buffer_ToHostBuffer, &args);  // the size it needs
  if (args.dst_size != bytes) {
    throw Error("PJRT buffer holds " + std::to_string(args.dst_size) + " bytes, the host tensor " +
                std::to_string(bytes));
  }
  args.dst = dst;
  TFM_PJRT_CALL(plugin_, PJRT_Buffer_ToHostBuffer, &args);
  await(args.event, "PJRT_Buffer_ToHostBuffer (transfer)");
}

Shape Client::dimensions(PJRT_Buffer* buffer) const {
  PJRT_Buffer_Dimensions_Args args = TFM_PJRT_ARGS(PJRT_Buffer_Dimensions_Args);
  args.buffer = buffer;
  TFM_PJRT_CALL(plugin_, PJRT_Buffer_Dimensions, &args);
  return Shape(args.dims, args.dims + args.num_dims);
}

LoadedExecutable Client::compile(const std::string& mlir, const std::string& options) const {
  static const char kFormat[] = "mlir";
  PJRT_Program program = TFM_PJRT_ARGS(PJRT_Program);
  program.code = const_cast<char*>(mlir.data());
  program.code_size = mlir.size();
  program.format = kFormat;
  program.format_size = sizeof kFormat - 1;
  PJRT_Client_Compile_Args args = TFM_PJRT_ARGS(PJRT_Client_Compile_Args);
  args.client = client_;
  args.program = &program;
  args.compile_options = options.data();
  args.compile_options_size = options.size();
  TFM_PJRT_CALL(plugin_, PJRT_Client_Compile, &args);
  return LoadedExecutable(args.executable, LoadedExecutableDeleter{&plugin_});
}

// The executable behind a loaded one, destroyed after `use` reads it.
template <typename Use>
auto with_executable(const Plugin& plugin, PJRT_LoadedExecutable* loaded, Use use) {
  PJRT_LoadedExecutable_GetExecutable_Args get =
      TFM_PJRT_ARGS(PJRT_LoadedExecutable_GetExecutable_Args);
  get.loaded_executable = loaded;
  TFM_PJRT_CALL(plugin, PJRT_LoadedExecutable_GetExecutable, &get);
  struct Destroy {
    const Plugin& plugin;
    PJRT_Executable* executable;
    ~Destroy() {
      PJRT_Executable_Destroy_Args args = TFM_PJRT_ARGS(PJRT_Executable_Destroy_Args);
      args.executable = executable;
      plugin.discard(plugin.api()->PJRT_Executable_Destroy(&args));
    }
  } destroy{plugin, get.executable};
  return use(get.executable);
}

size_t Client::output_count(PJRT_LoadedExecutable* executable) const {
  return with_executable(plugin_, executable, [&](PJRT_Executable* e) {
    PJRT_Executable_NumOutputs_Args count = TFM_PJRT_ARGS(PJRT_Executable_NumOutputs_Args);
    count.executable = e;
    TFM_PJRT_CALL(plugin_, PJRT_Executable_NumOutputs, &count);
    return count.num_outputs;
  });
}

std::string Client::serialize(PJRT_LoadedExecutable* executable) const {
  return with_executable(plugin_, executable, [&](PJRT_Executable* e) {
    PJRT_Executable_Serialize_Args args = TFM_PJRT_ARGS(PJRT_Executable_Serialize_Args);
    args.executable = e;
    TFM_PJRT_CALL(plugin_, PJRT_Executable_Serialize, &args);
    std::string bytes(args.serialized_bytes, args.serialized_bytes_size);
    if (args.serialized_executable_deleter != nullptr) {
      args.serialized_executable_deleter(args.serialized_executable);
    }
    return bytes;
  });
}

LoadedExecutable Client::deserialize(const std::string& bytes) const {
  PJRT_Executable_DeserializeAndLoad_Args args =
      TFM_PJRT_ARGS(PJRT_Executable_DeserializeAndLoad_Args);
  args.client = client_;
  args.serialized_executable = bytes.data();
  args.serialized_executable_size = bytes.size();
  TFM_PJRT_CALL(plugin_, PJRT_Executable_DeserializeAndLoad, &args);
  return LoadedExecutable(args.loaded_executable, LoadedExecutableDeleter{&plugin_});
}

std::string Client::identity() const {
  std::string id = "plugin " + plugin_.path() + "\nC API " +
                   std::to_string(plugin_.major_version()) + "." +
                   std::to_string(plugin_.minor_version()) + "\nplatform " + platform_name_ + " " +
                   platform_version_ + "\n";
  for (const auto& [name, value] : plugin_.attributes()) id += name + ": " + value + "\n";
  for (int i = 0; i < device_count(); ++i) id += "device " + describe(i) + "\n";
  return id;
}

std::vector<std::vector<Buffer>> Client::execute(
    PJRT_LoadedExecutable* executable, const std::vector<std::vector<PJRT_Buffer*>>& arguments,
    const std::vector<int64_t>& non_donatable, size_t output_count) const {
  TFM_CHECK(!arguments.empty(), "PJRT execute: no device's arguments");
  PJRT_ExecuteOptions options = TFM_PJRT_ARGS(PJRT_ExecuteOptions);
  options.non_donatable_input_indices = non_donatable.data();
  options.num_non_donatable_input_indices = non_donatable.size();
  const size_t devices = arguments.size();
  std::vector<std::vector<PJRT_Buffer*>> outputs(devices,
                                                 std::vector<PJRT_Buffer*>(output_count, nullptr));
  std::vector<PJRT_Buffer* const*> argument_lists;
  std::vector<PJRT_Buffer**> output_lists;
  for (size_t d = 0; d < devices; ++d) {
    TFM_CHECK(arguments[d].size() == arguments[0].size(), "PJRT execute: argument counts differ");
    argument_lists.push_back(arguments[d].data());
    output_lists.push_back(outputs[d].data());
  }
  std::vector<PJRT_Event*> done(devices, nullptr);
  PJRT_LoadedExecutable_Execute_Args args = TFM_PJRT_ARGS(PJRT_LoadedExecutable_Execute_Args);
  args.executable = executable;
  args.options = &options;
  args.argument_lists = argument_lists.data();
  args.num_devices = devices;
  args.num_args = arguments[0].size();
  args.output_lists = output_lists.data();
  args.device_complete_events = done.data();
  TFM_PJRT_CALL(plugin_, PJRT_LoadedExecutable_Execute, &args);
  std::vector<std::vector<Buffer>> results(devices);
  for (size_t d = 0; d < devices; ++d) {
    for (PJRT_Buffer* b : outputs[d]) results[d].emplace_back(b, BufferDeleter{&plugin_});
  }
  for (PJRT_Event* event : done) await(event, "PJRT_LoadedExecutable_Execute (completion)");
  return results;
}

}  // namespace tfm::pjrt
