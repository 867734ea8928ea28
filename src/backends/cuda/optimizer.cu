// The optimizer's arithmetic on the GPU: AdamW's update through the same per-element function as
// the CPU (ops::adamw_update), and the gradient norm's sum of squares in double over fixed
// chunks, added in a fixed order (the same bits every run, so a resumed step clips identically).
#include <algorithm>

#include "backends/cuda/cuda_status.h"
#include "backends/cuda/optimizer_device_kernels.cuh"
#include "backends/cuda/optimizer_kernels.h"

namespace tfm::cuda {
namespace {

int grid_for(int64_t n) {
  return static_cast<int>(std::min<int64_t>(blocks_for(n, kThreads), kMaxBlocks));
}

int64_t chunks_of(int64_t n) { return (n + kChunkElements - 1) / kChunkElements; }

}  // namespace

void adamw_update(const float* scalars, bool decays, float* p, const float* g, float* m, float* v,
                  int64_t n, cudaStream_t stream) {
  if (n == 0) return;  // a grid of 0 blocks is a launch error
  adamw_kernel<<<grid_for(n), kThreads, 0, stream>>>(scalars, decays, p, g, m, v, n);
  check_launch("adamw_update");
}

size_t sum_squares_scratch_bytes(int64_t n) {
  return static_cast<size_t>(chunks_of(n)) * sizeof(double);
}

void sum_squares(const float* x, int64_t n, float* out, void* scratch, cudaStream_t stream) {
  if (n == 0) {
    TFM_CUDA(cudaMemsetAsync(out, 0, sizeof(float), stream));
    return;
  }
  const int64_t chunks = chunks_of(n);
  auto* partial = static_cast<double*>(scratch);
  chunk_squares_kernel<<<static_cast<unsigned>(chunks), kThreads, 0, stream>>>(x, n, partial);
  check_launch("sum_squares_chunks");
  sum_partials_kernel<<<1, kThreads, 0, stream>>>(partial, chunks, out);
  check_launch("sum_squares_total");
}

}  // namespace tfm::cuda
