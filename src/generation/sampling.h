// Choosing the next token from one row of logits, as transformers' logits processors do:
// repetition penalty, min_new_tokens, then greedy argmax or temperature / top-k / top-p sampling.
#pragma once

#include <cstdint>
#include <random>
#include <span>
#include <vector>

#include "tfm/generation.h"

namespace tfm::generation {

struct TokenChooser {
  const GenerationConfig& config;
  std::span<const int64_t> eos_ids;
  std::mt19937_64& rng;

  // `logits` is modified in place. `history`: the row's prompt and generated ids so far.
  int64_t choose(std::span<float> logits, std::span<const int64_t> history, int new_tokens) const;
};

void apply_repetition_penalty(std::span<float> logits, std::span<const int64_t> history,
                              float penalty);
void apply_top_k(std::span<float> logits, int top_k);
void apply_top_p(std::span<float> logits, float top_p);
int64_t argmax(std::span<const float> logits);
int64_t sample(std::span<const float> logits, std::mt19937_64& rng);

}  // namespace tfm::generation
