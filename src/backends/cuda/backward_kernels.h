// CUDA kernels of training: the loss and the backward op of each forward op (see graph::Op for
// their meaning, and the cpu backend's kernels for the reference they mirror). Everything is f32;
// the linear layers' products run through Matmul. Each launcher checks its launch and names
// itself when the launch fails. `scratch` arguments hold the launcher's *_scratch_bytes().
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "backends/cuda/kernels.h"

namespace tfm::cuda {

// out[j] = the sum over rows of x[r, j], in a fixed order.
size_t reduce_rows_scratch_bytes(int64_t rows, int64_t n);
void reduce_rows(const float* x, int64_t rows, int64_t n, float* out, void* scratch,
                 cudaStream_t stream);

// loss_sum[0] = the sum over rows whose target is not `ignore` (graph::kIgnoreIndex, which device
// code cannot include) of -log softmax(logits[r])[target], rows added in a fixed order. A target
// outside the vocabulary (the cpu throws) makes the loss and its row's gradient NaN instead of
// reading outside the row. The logits are f32, or bf16 (autocast's output layer).
size_t cross_entropy_scratch_bytes(int64_t rows);
void cross_entropy(const void* logits, DType logits_dtype, const int32_t* targets, int32_t ignore,
                   int64_t rows, int64_t vocab, float* loss_sum, void* scratch,
                   cudaStream_t stream);
// d_logits = d_loss[0] * (softmax(logits) - one_hot(target)); zero rows for ignored targets.
// d_logits: the logits themselves (in their dtype), or a buffer of its own in f32 or bf16 (the
// backward products' operand: graph::fold_casts).
void cross_entropy_grad(const void* logits, DType logits_dtype, const int32_t* targets,
                        int32_t ignore, const float* d_loss, int64_t rows, int64_t vocab,
                        void* d_logits, DType out_dtype, cudaStream_t stream);
// Both: the loss, then the gradient written over the logits, each row read once for the two
// (graph::fold_losses_into_gradients). Scratch as cross_entropy's.
void cross_entropy_and_grad(void* logits, DType logits_dtype, const int32_t* targets,
                            int32_t ignore, const float* d_loss, int64_t rows, int64_t vocab,
                            float* loss_sum, void* scratch, cudaStream_t stream);

// d_table [vocab, hidden] = the sum of dy's rows by token id, added in token order; `accumulate`:
// added into d_table's values (graph::fold_summed_accumulations).
void embedding_grad(const float* dy, const int32_t* ids, int64_t count, int64_t vocab,
                    int64_t hidden, float* d_table, cudaStream_t stream, bool accumulate = false);

// x: f32, or a bf16 product's output (autocast) as the forward norm read it.
// dx (f32 or bf16) = the input gradient, plus `residual` where it is not null.
void rms_norm_grad_input(const void* x, DType x_dtype, const float* w, const float* dy,
                         const float* residual, int64_t rows, int64_t hidden, float eps, void* dx,
                         DType dx_dtype, cudaStream_t stream);
size_t rms_norm_grad_weight_scratch_bytes(int64_t rows, int64_t hidden);
// dw = the column sums of dy * x / rms(x); `accumulate`: dw += them (graph::fold_accumulations).
void rms_norm_grad_weight(const void* x, DType x_dtype, const float* dy, int64_t rows,
                          int64_t hidden, float eps, float* dw, void* scratch, cudaStream_t stream,
                          bool accumulate = false);

// dy as RoPE's output gradient of [batch, seq, heads, hidden] rows, rotated back before the norm's
// backward reads it (graph::fuse_rope_grads_into_norm_grads). `positions` null: dy as it is.
struct RopeRows {
  const int32_t* positions = nullptr;  // [batch, seq]
  const float* inv_freq = nullptr;     // [hidden / 2]
  int64_t batch = 1, seq = 1, heads = 1;
  float attention_scaling = 1.f;
};
// Both of the above in one pass over x and dy (graph::fold_norm_weight_grads): dx (f32 or bf16,
// plus `residual` where it is not null), and the weight's gradient added into dw_acc. With
// `rope`, dy is rotated back first: as it is loaded, for rows of 128, 256, 512 or 1024 values.
// With `bf16_copy`, f32 dx is also written there rounded to bf16 (graph::fold_narrow_copies).
size_t rms_norm_grads_scratch_bytes(int64_t rows, int64_t hidden, bool rotated);
// dy: f32, or bf16 where RoPE's gradient runs inside (attention's gradients under autocast).
void rms_norm_grads(const void* x, DType x_dtype, const float* w, const void* dy, DType dy_dtype,
                    const float* residual, int64_t rows, int64_t hidden, float eps, void* dx,
                    DType dx_dtype, float* dw_acc, void* scratch, cudaStream_t stream,
                    const RopeRows* rope = nullptr, void* bf16_copy = nullptr);

size_t rope_grad_scratch_bytes(int64_t head_dim);
// dy: f32 or bf16 (attention's gradients under autocast); dx: f32, or bf16 where the products
// read it so (graph::fold_casts).
void rope_grad(const void* dy, DType dy_dtype, const int32_t* positions, const float* inv_freq,
               int64_t batch, int64_t seq, int64_t heads, int64_t head_dim, float attention_scaling,
               void* dx, DType dx_dtype, void* scratch, cudaStream_t stream);

// Attention's backward over f32 q [B, S, Hq, D], k and v [B, L, Hkv, D] (L is the shape's
// cache_len): writes [dq | dk | dv] to `out` without atomics, each output row summed by one block
// in a fixed order.
size_t attention_grad_scratch_bytes(const AttentionShape& shape);
void attention_grad(const float* q, const float* k, const float* v, const int32_t* mask,
                    const int32_t* slots, const float* dy, const AttentionShape& shape, float scale,
                    float* out, void* scratch, cudaStream_t stream);

}  // namespace tfm::cuda
