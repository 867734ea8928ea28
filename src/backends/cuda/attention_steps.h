// Attention on CUDA: which kernels run an attention (kAttention), its gradient (kAttentionGrad) and
// what it reads of a step's new tokens (kPrepareAttention), chosen in one place that the steps and
// their scratch both follow.
#pragma once

#include "backends/cuda/steps.h"

namespace tfm::cuda {

enum class AttentionPath {
  kFlash,        // bf16 q, k and v (autocast) where a flash kernel covers the head size
                 // (flash_attention_steps.h); the backward only for bf16 dy, and as the options say
  kProducts,     // bf16 q, k and v otherwise: tensor-core products (attention_product_steps.h)
  kFusedDecode,  // f32, one new token a row, its prepare_attention folded in (attention_fusion.h)
  kSplitKeys,    // f32: keys split into chunks over the cache (attention.cu, attention_grad.cu)
};

// `plan`: the compiled plan (its arena decides the fused decode), or null in eager mode.
AttentionPath attention_path(const graph::Graph& graph, const graph::Node& n,
                             const fusion::Plan* plan, const KernelOptions& kernels);
size_t attention_step_scratch_bytes(const graph::Graph& graph, const graph::Node& n,
                                    const fusion::Plan* plan, const KernelOptions& kernels);
// kAttention and kAttentionGrad nodes.
Step attention_step(const graph::Graph& graph, graph::ValueId id, const fusion::Plan* plan,
                    const KernelOptions& kernels);
// kPrepareAttention: nothing where it folds into its attention (kFusedDecode).
Step prepare_attention_step(const graph::Graph& graph, graph::ValueId id, const fusion::Plan* plan);

}  // namespace tfm::cuda
