#include "generation/buckets.h"

namespace tfm::generation {
namespace {

constexpr int64_t kMaxChunk = 128;   // prefill matrix products are efficient from here on
constexpr int64_t kTinyPrompt = 16;  // single-question prompts: not worth a 64-token chunk

int64_t round_up(int64_t value, int64_t multiple) {
  return (value + multiple - 1) / multiple * multiple;
}

}  // namespace

GenerationShapes plan_shapes(int64_t prompt_len, int64_t max_new_tokens) {
  GenerationShapes s{};
  s.cache_len = 256;
  while (s.cache_len < round_up(prompt_len, kMaxChunk) + max_new_tokens) s.cache_len *= 2;
  s.chunk = prompt_len <= kTinyPrompt ? kTinyPrompt : (s.cache_len == 256 ? 64 : kMaxChunk);
  s.padded_prompt = round_up(prompt_len, s.chunk);
  return s;
}

}  // namespace tfm::generation
