#include "generation/buckets.h"

#include <algorithm>

namespace tfm::generation {
namespace {

constexpr int64_t kTinyPrompt = 16;  // single-question prompts: not worth a 64-token chunk
constexpr int64_t kCpuChunk = 128;   // the CPU's prefill products are efficient from here on
constexpr int64_t kAcceleratorMaxChunk = 1024;

int64_t round_up(int64_t value, int64_t multiple) {
  return (value + multiple - 1) / multiple * multiple;
}

// The chunk size of a cache length: on the CPU 64 for the smallest cache (less padding for short
// prompts), 128 beyond; on an accelerator half the cache, up to kAcceleratorMaxChunk.
int64_t chunk_for(int64_t cache_len, bool accelerator) {
  if (accelerator) return std::min(kAcceleratorMaxChunk, cache_len / 2);
  return cache_len == 256 ? kCpuChunk / 2 : kCpuChunk;
}

}  // namespace

GenerationShapes plan_shapes(int64_t prompt_len, int64_t max_new_tokens, bool accelerator) {
  const auto chunk = [&](int64_t cache_len) {
    return prompt_len <= kTinyPrompt ? kTinyPrompt : chunk_for(cache_len, accelerator);
  };
  GenerationShapes s{};
  s.cache_len = 256;
  while (round_up(prompt_len, chunk(s.cache_len)) + max_new_tokens > s.cache_len) s.cache_len *= 2;
  s.chunk = chunk(s.cache_len);
  s.padded_prompt = round_up(prompt_len, s.chunk);
  return s;
}

}  // namespace tfm::generation
