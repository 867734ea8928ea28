// The cross-entropy kernels (see loss.cu), in a header of their own so tests/cuda_emulation can
// run them on the CPU.
#pragma once

#include <cmath>

#include "backends/cuda/device_math.cuh"

namespace tfm::cuda {
namespace {

constexpr int kThreads = 512;

// log(sum(exp(row))) in one pass over the row (a row is a whole vocabulary, read from memory):
// each thread keeps the largest value it has seen and its sum of exp(x - that), in double,
// rescaled when the largest grows; the block then brings every thread's sum to the row's max.
// As on the cpu, the result is float(log(double sum)) + max; a NaN or +inf anywhere gives NaN.
// Logits L are f32, or bf16 (autocast's output layer), widened as they are read.
template <typename L>
__device__ float row_log_sum_exp(const L* row, int64_t vocab) {
  float max = -INFINITY;
  double sum = 0;
  for (int64_t v = threadIdx.x; v < vocab; v += blockDim.x) {
    const float x = widen(row[v]);
    if (x > max) {
      sum *= exp(static_cast<double>(max) - x);  // 0 while nothing was seen (max -inf)
      max = x;
    }
    if (x != -INFINITY) sum += expf(x - max);  // (-inf - -inf would be NaN)
  }
  const float row_max = block_reduce(max, Max{});
  // A thread that saw nothing (or only -inf) adds nothing; one that saw +inf or NaN adds NaN.
  sum = max == -INFINITY ? 0.0 : sum * exp(static_cast<double>(max) - row_max);
  sum = block_reduce(sum, Sum{});
  return static_cast<float>(log(sum)) + row_max;
}

__device__ __forceinline__ bool in_vocab(int32_t target, int64_t vocab) {
  return target >= 0 && target < vocab;
}

// Row r's loss into `per_row` (0 for an ignored target, NaN for one outside the vocabulary;
// summed by sum_kernel) and its gradient, softmax - one-hot times *d_loss, into `d_logits`: either
// may be null, and one launch writing both reads each row once for the two.
// `d_logits` may be `logits` itself, in the logits' dtype: every thread reads the target's logit
// and its elements before writing them, and the reductions that read the whole row finish
// (block_reduce synchronizes) before any write. Another dtype (bf16 for the backward products:
// graph::fold_casts) has a buffer of its own.
template <typename L, typename Out>
__global__ void __launch_bounds__(kThreads)
    cross_entropy_rows_kernel(const L* logits, const int32_t* __restrict__ targets, int32_t ignore,
                              const float* __restrict__ d_loss, int64_t vocab,
                              double* __restrict__ per_row, Out* d_logits) {
  const int64_t r = blockIdx.x;
  const int32_t target = targets[r];
  // The branch is the same for the whole block, so it may skip the block-wide reductions.
  if (target == ignore || !in_vocab(target, vocab)) {
    if (per_row != nullptr && threadIdx.x == 0) per_row[r] = target == ignore ? 0.0 : nan("");
    if (d_logits == nullptr) return;
    const Out fill = narrow<Out>(target == ignore ? 0.f : nanf(""));
    Out* out = d_logits + r * vocab;
    for (int64_t v = threadIdx.x; v < vocab; v += blockDim.x) out[v] = fill;
    return;
  }
  const L* row = logits + r * vocab;
  const float target_logit = widen(row[target]);
  const float lse = row_log_sum_exp(row, vocab);
  if (per_row != nullptr && threadIdx.x == 0) per_row[r] = static_cast<double>(lse) - target_logit;
  if (d_logits == nullptr) return;
  const float scale = *d_loss;
  Out* out = d_logits + r * vocab;
  for (int64_t v = threadIdx.x; v < vocab; v += blockDim.x) {
    const float p = expf(widen(row[v]) - lse) * scale;
    out[v] = narrow<Out>(v == target ? p - scale : p);
  }
}

__global__ void __launch_bounds__(kThreads)
    sum_kernel(const double* __restrict__ per_row, int64_t rows, float* __restrict__ out) {
  double sum = 0;
  for (int64_t r = threadIdx.x; r < rows; r += blockDim.x) sum += per_row[r];
  sum = block_reduce(sum, Sum{});
  if (threadIdx.x == 0) *out = static_cast<float>(sum);
}

}  // namespace
}  // namespace tfm::cuda
