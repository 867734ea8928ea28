// Supported architectures by their config.json `architectures` name; one file each.
#pragma once

#include <string>

#include "models/decoder.h"

namespace tfm::models {

DecoderFeatures qwen3_features(const ModelConfig& config);
DecoderFeatures qwen2_features(const ModelConfig& config);
DecoderFeatures llama_features(const ModelConfig& config);
DecoderFeatures mistral_features(const ModelConfig& config);
DecoderFeatures mixtral_features(const ModelConfig& config);
DecoderFeatures qwen3_moe_features(const ModelConfig& config);

// Throws, listing the supported names, when `config.architecture` is not one of them. `tp`: how
// this process holds the model (the experts it holds).
DecoderFeatures features_for(const ModelConfig& config, const std::string& source,
                             const Parallelism& tp = {});

}  // namespace tfm::models
