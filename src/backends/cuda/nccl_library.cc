// Built where nccl.h is found (TFM_NCCL).
#if TFM_NCCL
#include "backends/cuda/nccl_library.h"

#include <dlfcn.h>

#include <string>

#include "tfm/error.h"

namespace tfm::cuda {
namespace {

constexpr const char* kSoname = "libnccl.so.2";

template <typename Function>
void resolve(void* handle, const char* name, Function& out) {
  void* symbol = dlsym(handle, name);
  if (symbol == nullptr) {
    throw Error(std::string("NCCL (") + kSoname + ") has no " + name +
                ": tensor parallelism and FSDP on CUDA need NCCL 2.13 or later");
  }
  out = reinterpret_cast<Function>(symbol);
}

NcclLibrary open_nccl() {
  void* handle = dlopen(kSoname, RTLD_NOW | RTLD_LOCAL);
  if (handle == nullptr) {
    throw Error(std::string("NCCL (") + kSoname + ") cannot be opened (" + dlerror() +
                "): tensor parallelism and FSDP on CUDA need it (Debian: libnccl2)");
  }
  NcclLibrary lib{};
  resolve(handle, "ncclGetErrorString", lib.GetErrorString);
  resolve(handle, "ncclGetLastError", lib.GetLastError);
  resolve(handle, "ncclGetUniqueId", lib.GetUniqueId);
  resolve(handle, "ncclCommInitRank", lib.CommInitRank);
  resolve(handle, "ncclAllReduce", lib.AllReduce);
  resolve(handle, "ncclAllGather", lib.AllGather);
  resolve(handle, "ncclReduceScatter", lib.ReduceScatter);
  resolve(handle, "ncclSend", lib.Send);
  resolve(handle, "ncclRecv", lib.Recv);
  resolve(handle, "ncclGroupStart", lib.GroupStart);
  resolve(handle, "ncclGroupEnd", lib.GroupEnd);
  resolve(handle, "ncclCommGetAsyncError", lib.CommGetAsyncError);
  resolve(handle, "ncclCommAbort", lib.CommAbort);
  return lib;
}

}  // namespace

const NcclLibrary& nccl() {
  static const NcclLibrary lib = open_nccl();
  return lib;
}

}  // namespace tfm::cuda
#endif  // TFM_NCCL
