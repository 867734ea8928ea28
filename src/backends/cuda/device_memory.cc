#include "backends/cuda/device_memory.h"

#include <cuda_runtime.h>

#include <algorithm>
#include <string>

#include "backends/cuda/cuda_status.h"
#include "tfm/error.h"

namespace tfm::cuda {

int device_count() {
  static const int count = [] {
    int n = 0;
    // No driver or no GPU: CUDA is simply absent, not an error.
    if (cudaGetDeviceCount(&n) != cudaSuccess) {
      cudaGetLastError();
      return 0;
    }
    return n;
  }();
  return count;
}

std::shared_ptr<void> device_allocate(int index, size_t bytes) {
  TFM_CUDA(cudaSetDevice(index));
  // Never empty: an empty tensor still needs storage that compares unequal to null.
  bytes = std::max<size_t>(bytes, 256);
  void* p = nullptr;
  const cudaError_t status = cudaMalloc(&p, bytes);
  if (status == cudaErrorMemoryAllocation) {
    cudaGetLastError();
    size_t free = 0, total = 0;
    cudaMemGetInfo(&free, &total);
    throw Error("out of memory on cuda:" + std::to_string(index) + ": asked for " + gib(bytes) +
                ", " + gib(free) + " free of " + gib(total));
  }
  TFM_CUDA(status);
  return {p, [](void* q) { cudaFree(q); }};
}

std::shared_ptr<void> pinned_allocate(size_t bytes) {
  void* p = nullptr;
  TFM_CUDA(cudaMallocHost(&p, std::max<size_t>(bytes, 256)));
  return {p, [](void* q) { cudaFreeHost(q); }};
}

}  // namespace tfm::cuda
