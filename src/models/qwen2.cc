// Qwen2: Llama's layout with biases on the q, k and v projections (never on o_proj).
#include "models/architectures.h"

namespace tfm::models {

DecoderFeatures qwen2_features(const ModelConfig&) {
  DecoderFeatures f;
  f.qkv_bias = true;
  return f;
}

}  // namespace tfm::models
