#include "fusion/pipeline.h"

#include "fusion/passes.h"
#include "graph/effects.h"

namespace tfm::fusion {

Plan compile(graph::Graph graph, const Pipeline& passes, const Target& target) {
  for (const Pass& pass : passes) pass.run(graph, target);
  graph::check_updates(graph);
  return plan_memory(std::move(graph), target.alignment);
}

Pipeline standard_pipeline() {
  return {
      {"fuse_residuals_into_products", fuse_residuals_into_products},
      {"fuse_qkv_products", fuse_qkv_products},
      {"fuse_gated_products", fuse_gated_products},
      {"fuse_input_norms_into_products", fuse_input_norms_into_products},
      {"fold_widening_casts", fold_widening_casts},
      {"fuse_elementwise", fuse_elementwise},
      {"fuse_norms_into_rope", fuse_norms_into_rope},
      {"fuse_prepare_attention", fuse_prepare_attention},
      {"fold_gradient_sums", fold_gradient_sums},
      {"fold_residuals_into_norm_grads", fold_residuals_into_norm_grads},
      {"fold_casts", fold_casts},
      {"fold_accumulations", fold_accumulations},
      {"fold_summed_accumulations", fold_summed_accumulations},
      {"fold_norm_weight_grads", fold_norm_weight_grads},
      {"fuse_rope_grads_into_norm_grads", fuse_rope_grads_into_norm_grads},
      {"fold_narrow_copies", fold_narrow_copies},
      {"fold_losses_into_gradients", fold_losses_into_gradients},
      {"pair_elementwise_siblings", pair_elementwise_siblings},
      {"save_attention_statistics", save_attention_statistics},
  };
}

}  // namespace tfm::fusion
