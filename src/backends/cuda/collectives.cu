// The data movement around NCCL's collectives that NCCL itself does not do: placing gathered
// blocks side by side along the last axis, and summing one block of ranks' copies.
#include "backends/cuda/cuda_status.h"
#include "backends/cuda/device_math.cuh"
#include "backends/cuda/kernels.h"

namespace tfm::cuda {
namespace {

constexpr int kThreads = 256;

__global__ void interleave_gathered_kernel(const float* gathered, int64_t rows, int64_t cols,
                                           int64_t ranks, float* out) {
  const int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x;
  if (i >= rows * cols * ranks) return;
  const int64_t width = cols * ranks, row = i / width, rank = i % width / cols, col = i % cols;
  out[i] = gathered[(rank * rows + row) * cols + col];
}

__global__ void sum_replica_block_kernel(const float* all, int64_t count, int64_t first,
                                         int64_t block, float* out) {
  const int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x;
  if (i >= count) return;
  float sum = 0.f;
  for (int64_t r = first; r < first + block; ++r) sum += all[r * count + i];
  out[i] = sum;
}

}  // namespace

void interleave_gathered(const float* gathered, int64_t rows, int64_t cols, int64_t ranks,
                         float* out, cudaStream_t stream) {
  if (rows * cols * ranks == 0) return;  // a grid of 0 blocks is a launch error
  interleave_gathered_kernel<<<blocks_for(rows * cols * ranks, kThreads), kThreads, 0, stream>>>(
      gathered, rows, cols, ranks, out);
  check_launch("interleave_gathered");
}

void sum_replica_block(const float* all, int64_t count, int64_t first, int64_t block, float* out,
                       cudaStream_t stream) {
  if (count == 0) return;  // a grid of 0 blocks is a launch error
  sum_replica_block_kernel<<<blocks_for(count, kThreads), kThreads, 0, stream>>>(all, count, first,
                                                                                 block, out);
  check_launch("sum_replica_block");
}

}  // namespace tfm::cuda
