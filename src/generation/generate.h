// transformers' generate() on a model: the body of CausalLM::generate.
#pragma once

#include <vector>

#include "models/causal_lm.h"
#include "tfm/generation.h"

namespace tfm::generation {

// What transformers' generate() refuses (GenerationConfig.validate and its logits processors),
// with its words: throws tfm::Error. generate() checks it first.
void check_config(const GenerationConfig& config);
// The ids that end a row: the config's own, else generation_config.json's, else config.json's.
std::vector<int64_t> stop_ids(const GenerationConfig& config, const ModelConfig& model);

// input_ids [batch, seq] (left-padded where attention_mask says so), returns the prompt followed
// by the new tokens, i64 [batch, seq + new] on the host.
Tensor generate(CausalLMImpl& model, const Tensor& input_ids, const Tensor* attention_mask,
                const GenerationConfig& config, GenerationStats* stats);
// Prompts of any lengths, left-padded into one batch; each row ends at its first EOS.
std::vector<std::vector<int64_t>> generate(CausalLMImpl& model,
                                           const std::vector<std::vector<int64_t>>& prompts,
                                           const GenerationConfig& config, GenerationStats* stats);

}  // namespace tfm::generation
