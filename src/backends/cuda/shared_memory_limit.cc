#include "backends/cuda/shared_memory_limit.h"

#include <cuda_runtime.h>

#include <map>
#include <mutex>
#include <utility>

#include "backends/cuda/cuda_status.h"

namespace tfm::cuda {

void allow_shared_memory(const void* kernel, size_t bytes, const char* name) {
  static std::mutex mutex;
  static std::map<std::pair<int, const void*>, size_t> allowed;
  int device = 0;
  check(cudaGetDevice(&device), name);
  const std::lock_guard<std::mutex> lock(mutex);
  size_t& limit = allowed[{device, kernel}];
  if (bytes <= limit) return;
  check(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize,
                             static_cast<int>(bytes)),
        name);
  limit = bytes;
}

}  // namespace tfm::cuda
