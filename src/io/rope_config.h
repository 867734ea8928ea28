// The RoPE part of config.json, which moved between transformers versions: 4.x has a top-level
// `rope_theta` and an optional `rope_scaling`; 5 has `rope_parameters` holding both.
#pragma once

#include <nlohmann/json.hpp>
#include <string>

#include "io/model_config.h"

namespace tfm {

// transformers' RotaryEmbeddingConfigMixin.default_theta, which most architectures keep.
inline constexpr double kDefaultRopeTheta = 10000.0;

// Fills rope_theta (`default_theta` where the config has none) and rope_scaling; needs
// max_position_embeddings already set.
void parse_rope(const nlohmann::json& json, const std::string& where, ModelConfig& config,
                double default_theta = kDefaultRopeTheta);
// Writes them into `json` in the layout it already uses (transformers 5 when it has none).
void write_rope(const ModelConfig& config, nlohmann::json& json);

}  // namespace tfm
