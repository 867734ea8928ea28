// Qwen2: Llama's layout with biases on the q, k and v projections (never on o_proj).
#include "models/architectures.h"

namespace tfm::models {

DecoderFeatures qwen2_features(const ModelConfig&) {
  return {.qk_norm = false, .qkv_bias = true, .o_bias = false, .mlp_bias = false};
}

}  // namespace tfm::models
