// Attention under bf16 autocast (training) run flash-style (flash_attention.cu), forward and
// backward, where a kernel covers its head size: no scores in memory, two floats per query row
// for the backward pass. Other head sizes take the tensor-core products of
// attention_product_steps.h. (On the H200, Qwen3-0.6B shape at 8 x 1024, the products' backward
// took 2.5 ms a layer and the WMMA flash kernels 17 ms; the mma.sync kernels that replaced those
// are not measured yet: bench/RESULTS.md.)
#pragma once

#include "backends/cuda/steps.h"

namespace tfm::cuda {

// The scratch the flash backward may keep the scores' gradients in (KernelOptions).
size_t saved_score_grad_bytes(const KernelOptions& kernels);
// kAttention: writes f32 out. No scratch.
Step flash_attention_step(const graph::Graph& graph, const graph::Node& n, size_t out);
// kAttentionGrad with bf16 dy: writes bf16 [dq | dk | dv]; scratch holds
// flash_attention_grad_scratch_bytes(). It reads its forward attention's row statistics where that
// ran flash-style (attention_steps.h) and kept them.
Step flash_attention_grad_step(const graph::Graph& graph, const graph::Node& n, size_t out,
                               const fusion::Plan* plan, const KernelOptions& kernels);

}  // namespace tfm::cuda
