#include "models/architectures.h"

#include "tfm/error.h"

namespace tfm::models {

namespace {

DecoderFeatures architecture_features(const ModelConfig& config, const std::string& source) {
  if (config.architecture == "Qwen3ForCausalLM") return qwen3_features(config);
  if (config.architecture == "Qwen2ForCausalLM") return qwen2_features(config);
  if (config.architecture == "LlamaForCausalLM") return llama_features(config);
  if (config.architecture == "MistralForCausalLM") return mistral_features(config);
  if (config.architecture == "MixtralForCausalLM") return mixtral_features(config);
  if (config.architecture == "Qwen3MoeForCausalLM") return qwen3_moe_features(config);
  throw Error(source + ": architecture '" + config.architecture +
              "' is not supported (supported: Qwen3ForCausalLM, LlamaForCausalLM, "
              "Qwen2ForCausalLM, MistralForCausalLM, MixtralForCausalLM, Qwen3MoeForCausalLM)");
}

}  // namespace

DecoderFeatures features_for(const ModelConfig& config, const std::string& source,
                             const Parallelism& tp) {
  DecoderFeatures f = architecture_features(config, source);
  f.experts = local_experts(config, tp);
  return f;
}

}  // namespace tfm::models
