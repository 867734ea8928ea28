// New weights for a model that starts from a config instead of a checkpoint.
#pragma once

#include <cstdint>

#include "models/decoder.h"

namespace tfm::models {

// As transformers' _init_weights for these models: matrices (projections, embedding, untied
// lm_head) drawn from N(0, initializer_range), norm weights 1, biases 0. f32 on the host.
DecoderWeights init_weights(const ModelConfig& config, const DecoderFeatures& features,
                            uint64_t seed);

}  // namespace tfm::models
