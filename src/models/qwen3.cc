// Qwen3: Llama's layout plus an RMSNorm on every query and key head (q_norm, k_norm).
#include "models/architectures.h"

namespace tfm::models {

DecoderFeatures qwen3_features(const ModelConfig& config) {
  return {.qk_norm = true,
          .qkv_bias = config.attention_bias,
          .o_bias = config.attention_bias,
          .mlp_bias = false};
}

}  // namespace tfm::models
