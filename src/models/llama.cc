// Llama (1 to 3.x): the base layout; attention_bias and mlp_bias switch biases on.
#include "models/architectures.h"

namespace tfm::models {

DecoderFeatures llama_features(const ModelConfig& config) {
  return {.qk_norm = false,
          .qkv_bias = config.attention_bias,
          .o_bias = config.attention_bias,
          .mlp_bias = config.mlp_bias};
}

}  // namespace tfm::models
