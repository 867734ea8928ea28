#include "backends/cuda/device_memory.h"

#include <cuda_runtime.h>

#include <algorithm>
#include <atomic>
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

namespace {

std::atomic<size_t> in_use{0}, peak{0};

void count_allocation(size_t bytes) {
  const size_t now = in_use.fetch_add(bytes) + bytes;
  size_t seen = peak.load();
  while (now > seen && !peak.compare_exchange_weak(seen, now)) {
  }
}

}  // namespace

size_t device_peak_bytes() { return peak.load(); }

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
  count_allocation(bytes);
  return {p, [bytes](void* q) {
            cudaFree(q);
            in_use.fetch_sub(bytes);
          }};
}

void device_fill_zero(void* data, size_t bytes, int index) {
  TFM_CUDA(cudaSetDevice(index));
  // cudaMemset runs on the legacy stream, which the kernels' non-blocking streams do not wait for.
  TFM_CUDA(cudaDeviceSynchronize());
  TFM_CUDA(cudaMemset(data, 0, bytes));
  TFM_CUDA(cudaDeviceSynchronize());
}

std::shared_ptr<void> pinned_allocate(size_t bytes) {
  void* p = nullptr;
  TFM_CUDA(cudaMallocHost(&p, std::max<size_t>(bytes, 256)));
  return {p, [](void* q) { cudaFreeHost(q); }};
}

}  // namespace tfm::cuda
