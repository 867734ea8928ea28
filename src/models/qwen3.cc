// Qwen3: Llama's layout plus an RMSNorm on every query and key head (q_norm, k_norm).
#include "models/architectures.h"

namespace tfm::models {

DecoderFeatures qwen3_features(const ModelConfig& config) {
  DecoderFeatures f;
  f.qk_norm = true;
  f.qkv_bias = f.o_bias = config.attention_bias;
  return f;
}

}  // namespace tfm::models
