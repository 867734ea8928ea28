// Causal-LM cross-entropy over logits rows, one block per row (a row is a whole vocabulary, too
// long for a warp). Sums run in double, as on the cpu, and in a fixed order: the loss of a step is
// the same bits every run.
#include "backends/cuda/backward_kernels.h"
#include "backends/cuda/cuda_status.h"
#include "backends/cuda/float_types.cuh"
#include "backends/cuda/loss_kernels.cuh"

namespace tfm::cuda {

namespace {

// cross_entropy_rows_kernel over every row, with the loss's per-row terms and the gradient where
// given (null: not written).
void launch_rows(const void* logits, DType logits_dtype, const int32_t* targets, int32_t ignore,
                 const float* d_loss, int64_t rows, int64_t vocab, double* per_row, void* d_logits,
                 DType out_dtype, const char* name, cudaStream_t stream) {
  if (rows == 0) return;  // a grid of no blocks fails to launch
  with_float_types(logits_dtype, out_dtype, name, [&](auto logits_type, auto out_type) {
    using L = typename decltype(logits_type)::type;
    using T = typename decltype(out_type)::type;
    cross_entropy_rows_kernel<<<static_cast<unsigned>(rows), kThreads, 0, stream>>>(
        static_cast<const L*>(logits), targets, ignore, d_loss, vocab, per_row,
        static_cast<T*>(d_logits));
  });
  check_launch(name);
}

// The loss from the per-row terms; no rows still need the loss 0 it writes.
void sum_rows(const double* per_row, int64_t rows, float* loss_sum, cudaStream_t stream) {
  sum_kernel<<<1, kThreads, 0, stream>>>(per_row, rows, loss_sum);
  check_launch("cross_entropy_sum");
}

}  // namespace

size_t cross_entropy_scratch_bytes(int64_t rows) {
  return static_cast<size_t>(rows) * sizeof(double);
}

void cross_entropy(const void* logits, DType logits_dtype, const int32_t* targets, int32_t ignore,
                   int64_t rows, int64_t vocab, float* loss_sum, void* scratch,
                   cudaStream_t stream) {
  auto* per_row = static_cast<double*>(scratch);
  launch_rows(logits, logits_dtype, targets, ignore, nullptr, rows, vocab, per_row, nullptr,
              DType::f32, "cross_entropy_rows", stream);
  sum_rows(per_row, rows, loss_sum, stream);
}

void cross_entropy_grad(const void* logits, DType logits_dtype, const int32_t* targets,
                        int32_t ignore, const float* d_loss, int64_t rows, int64_t vocab,
                        void* d_logits, DType out_dtype, cudaStream_t stream) {
  launch_rows(logits, logits_dtype, targets, ignore, d_loss, rows, vocab, nullptr, d_logits,
              out_dtype, "cross_entropy_grad", stream);
}

void cross_entropy_and_grad(void* logits, DType logits_dtype, const int32_t* targets,
                            int32_t ignore, const float* d_loss, int64_t rows, int64_t vocab,
                            float* loss_sum, void* scratch, cudaStream_t stream) {
  auto* per_row = static_cast<double*>(scratch);
  launch_rows(logits, logits_dtype, targets, ignore, d_loss, rows, vocab, per_row, logits,
              logits_dtype, "cross_entropy_and_grad", stream);
  sum_rows(per_row, rows, loss_sum, stream);
}

}  // namespace tfm::cuda
