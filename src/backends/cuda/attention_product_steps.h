// Attention over whole sequences (training, under bf16 autocast) as tensor-core products: per
// query head, scores = q k^T and out = softmax(scale * scores) v through batched cuBLASLt products
// (bf16 operands, f32 accumulation), with the masked softmax and its gradient as row kernels. The
// scores of a chunk of batch rows exist at once in scratch; the backward pass computes them again
// instead of keeping them. Grouped-query heads read their KV head through the products' strides.
#pragma once

#include "backends/cuda/steps.h"

namespace tfm::cuda {

size_t attention_products_scratch_bytes(const AttentionShape& shape, bool backward);
// kAttention with bf16 q, k and v (written in the node's dtype: f32, or bf16 under autocast).
Step attention_products_step(const graph::Graph& graph, const graph::Node& n, size_t out);
// kAttentionGrad with bf16 q, k and v and f32 or bf16 dy: writes [dq | dk | dv] in the node's
// dtype (bf16 with bf16 dy, graph::Builder::attention_grad).
Step attention_grad_products_step(const graph::Graph& graph, const graph::Node& n, size_t out);

}  // namespace tfm::cuda
