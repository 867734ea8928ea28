// The kernels of attention as tensor-core products (attention_product_steps.h) that run between
// its cuBLASLt products: layout changes and the masked softmax with its gradient.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "backends/cuda/kernels.h"

namespace tfm::cuda {

// [batch, seq, heads, head_dim] (f32 or bf16) -> bf16 [batch, heads, seq, head_dim].
void to_head_major(const void* x, DType dtype, int64_t batch, int64_t seq, int64_t heads,
                   int64_t head_dim, void* out, cudaStream_t stream);
// f32 [batch, heads, seq, head_dim] -> [batch, seq, heads, head_dim] in `out_dtype` (f32, or bf16
// for autocast's attention output: graph::fold_casts).
void from_head_major(const float* x, int64_t batch, int64_t seq, int64_t heads, int64_t head_dim,
                     void* out, DType out_dtype, cudaStream_t stream);
// scores [batch, heads, seq, len] f32 (rows `ld` elements apart) -> the softmax of scale * scores
// over the keys query i of batch row b sees (j <= slots[i], slots[i] - j < window unless window
// is 0, and mask[b, j]), in place and as bf16 `probs` (same layout); a query that sees no key gets
// a zero row.
void masked_softmax(float* scores, void* probs, const int32_t* mask, const int32_t* slots,
                    int64_t batch, int64_t heads, int64_t seq, int64_t len, int64_t ld, float scale,
                    int64_t window, cudaStream_t stream);
// d_scores (bf16) = scale * probs * (d_probs - sum_j probs * d_probs), row by row (rows `ld`
// elements apart): the gradient of the unscaled scores.
void softmax_grad(const float* probs, const float* d_probs, int64_t rows, int64_t len, int64_t ld,
                  float scale, void* d_scores, cudaStream_t stream);

}  // namespace tfm::cuda
