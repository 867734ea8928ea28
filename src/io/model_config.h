// Reading and writing config.json (the typed ModelConfig is public: tfm/config.h), with the
// defaults transformers uses when a field is absent (Qwen3Config, LlamaConfig, Qwen2Config). Reads
// both layouts: transformers 5 (`rope_parameters`, `dtype`) and 4.x (top-level `rope_theta` +
// `rope_scaling`, `torch_dtype`).
#pragma once

#include <cstdint>
#include <filesystem>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "tfm/config.h"

namespace tfm {

// `source` (the file path) names the config in messages.
ModelConfig parse_model_config(const nlohmann::json& json, const std::string& source);
// A config.json's text: malformed JSON, as any other problem, is a tfm::Error naming `source`.
ModelConfig parse_model_config_text(std::string_view text, const std::string& source);
ModelConfig load_model_config(const std::filesystem::path& config_json);
// `raw` with the typed fields written back, in the layout `raw` uses.
nlohmann::json to_json(const ModelConfig& config);

}  // namespace tfm
