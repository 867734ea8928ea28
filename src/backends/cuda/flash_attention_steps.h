// Attention under bf16 autocast (training) run flash-style (flash_attention.cu) where a kernel
// covers its head size: no scores in memory. Other shapes take the tensor-core products of
// attention_product_steps.h, and so does the backward pass while one batch row's scores fit the
// products' scratch budget: measured on the H200 (Qwen3-0.6B shape, 8 x 1024), the flash
// backward kernels took 17 ms a layer against the products' 2.5 ms; beyond the budget (long
// sequences) they keep the memory at two floats per query row instead of the scores.
#pragma once

#include "backends/cuda/steps.h"

namespace tfm::cuda {

// Whether kAttention node n (bf16 q, k and v) runs flash-style.
bool runs_flash_attention(const graph::Graph& graph, const graph::Node& n);
// Whether kAttentionGrad node n runs flash-style.
bool runs_flash_attention_grad(const graph::Graph& graph, const graph::Node& n);
// kAttention: writes f32 out. No scratch.
Step flash_attention_step(const graph::Graph& graph, const graph::Node& n, size_t out);
// kAttentionGrad with f32 dy: writes f32 [dq | dk | dv]; scratch holds
// flash_attention_grad_scratch_bytes().
Step flash_attention_grad_step(const graph::Graph& graph, const graph::Node& n, size_t out);

}  // namespace tfm::cuda
