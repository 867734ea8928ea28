// Mistral: Llama's layout without biases, attending within `sliding_window` (decoder.cc).
#include "models/architectures.h"

namespace tfm::models {

DecoderFeatures mistral_features(const ModelConfig&) { return {}; }

}  // namespace tfm::models
