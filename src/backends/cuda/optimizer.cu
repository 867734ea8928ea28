// The optimizer's arithmetic on the GPU: AdamW's update through the same per-element function as
// the CPU (ops::adamw_update), and the gradient norm's sum of squares in double over fixed
// chunks, added in a fixed order (the same bits every run, so a resumed step clips identically).
#include <algorithm>
#include <memory>
#include <mutex>

#include "backends/cuda/cuda_status.h"
#include "backends/cuda/device_memory.h"
#include "backends/cuda/optimizer_device_kernels.cuh"
#include "backends/cuda/optimizer_kernels.h"

namespace tfm::cuda {
namespace {

int grid_for(int64_t n) {
  return static_cast<int>(std::min<int64_t>(blocks_for(n, kThreads), kMaxBlocks));
}

// Partial sums and the result, grown as needed and kept: a training run asks every step.
struct SumScratch {
  std::mutex mutex;
  std::shared_ptr<void> buffer;
  int64_t capacity = 0;  // doubles, the last one the result
};

}  // namespace

void adamw_update(const ops::AdamWScalars& s, float decay, float* p, const float* g, float* m,
                  float* v, int64_t n, cudaStream_t stream) {
  if (n == 0) return;  // a grid of 0 blocks is a launch error
  adamw_kernel<<<grid_for(n), kThreads, 0, stream>>>(s, decay, p, g, m, v, n);
  check_launch("adamw_update");
}

double sum_squares(const float* x, int64_t n, cudaStream_t stream) {
  if (n == 0) return 0.0;
  static SumScratch scratch;
  std::lock_guard<std::mutex> lock(scratch.mutex);
  const int64_t chunks = (n + kChunkElements - 1) / kChunkElements;
  if (scratch.capacity < chunks + 1) {
    int device = 0;
    TFM_CUDA(cudaGetDevice(&device));
    scratch.buffer = device_allocate(device, static_cast<size_t>(chunks + 1) * sizeof(double));
    scratch.capacity = chunks + 1;
  }
  auto* partial = static_cast<double*>(scratch.buffer.get());
  chunk_squares_kernel<<<static_cast<unsigned>(chunks), kThreads, 0, stream>>>(x, n, partial);
  check_launch("sum_squares_chunks");
  sum_partials_kernel<<<1, kThreads, 0, stream>>>(partial, chunks, partial + chunks);
  check_launch("sum_squares_total");
  double total = 0;
  TFM_CUDA(cudaMemcpyAsync(&total, partial + chunks, sizeof total, cudaMemcpyDeviceToHost, stream));
  TFM_CUDA(cudaStreamSynchronize(stream));
  return total;
}

}  // namespace tfm::cuda
