// Llama (1 to 3.x): the base layout; attention_bias and mlp_bias switch biases on.
#include "models/architectures.h"

namespace tfm::models {

DecoderFeatures llama_features(const ModelConfig& config) {
  DecoderFeatures f;
  f.qkv_bias = f.o_bias = config.attention_bias;
  f.mlp_bias = config.mlp_bias;
  return f;
}

}  // namespace tfm::models
