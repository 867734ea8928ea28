// Causal-LM cross-entropy over logits rows, one block per row (a row is a whole vocabulary, too
// long for a warp). Sums run in double, as on the cpu, and in a fixed order: the loss of a step is
// the same bits every run.
#include "backends/cuda/backward_kernels.h"
#include "backends/cuda/cuda_status.h"
#include "backends/cuda/float_types.cuh"
#include "backends/cuda/loss_kernels.cuh"

namespace tfm::cuda {

size_t cross_entropy_scratch_bytes(int64_t rows) {
  return static_cast<size_t>(rows) * sizeof(double);
}

void cross_entropy(const void* logits, DType logits_dtype, const int32_t* targets, int32_t ignore,
                   int64_t rows, int64_t vocab, float* loss_sum, void* scratch,
                   cudaStream_t stream) {
  auto* per_row = static_cast<double*>(scratch);
  // A grid of no blocks fails to launch; no rows still need the loss 0 the sum writes.
  if (rows > 0) {
    with_float_type(logits_dtype, "cross_entropy", [&](auto type) {
      using L = typename decltype(type)::type;
      row_loss_kernel<<<static_cast<unsigned>(rows), kThreads, 0, stream>>>(
          static_cast<const L*>(logits), targets, ignore, vocab, per_row);
    });
    check_launch("cross_entropy_rows");
  }
  sum_kernel<<<1, kThreads, 0, stream>>>(per_row, rows, loss_sum);
  check_launch("cross_entropy_sum");
}

void cross_entropy_grad(const void* logits, DType logits_dtype, const int32_t* targets,
                        int32_t ignore, const float* d_loss, int64_t rows, int64_t vocab,
                        void* d_logits, DType out_dtype, cudaStream_t stream) {
  if (rows == 0) return;  // a grid of no blocks fails to launch
  with_float_type(logits_dtype, "cross_entropy_grad", [&](auto logits_type) {
    with_float_type(out_dtype, "cross_entropy_grad", [&](auto out_type) {
      using L = typename decltype(logits_type)::type;
      using T = typename decltype(out_type)::type;
      cross_entropy_grad_kernel<<<static_cast<unsigned>(rows), kThreads, 0, stream>>>(
          static_cast<const L*>(logits), targets, ignore, d_loss, vocab, static_cast<T*>(d_logits));
    });
  });
  check_launch("cross_entropy_grad");
}

}  // namespace tfm::cuda
