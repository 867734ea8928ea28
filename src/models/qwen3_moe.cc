// Qwen3-MoE: Qwen3's attention (q_norm, k_norm) with mixture-of-experts MLPs (mlp.gate, the
// router, and mlp.experts.E.{gate,up,down}_proj), dense MLPs on the layers the config lists.
#include "models/architectures.h"

namespace tfm::models {

DecoderFeatures qwen3_moe_features(const ModelConfig& config) {
  DecoderFeatures f = qwen3_features(config);
  f.moe_block = "mlp.";
  f.expert_projections = {"gate_proj", "up_proj", "down_proj"};
  return f;
}

}  // namespace tfm::models
