#include "generation/buckets.h"

#include <algorithm>

namespace tfm::generation {
namespace {

constexpr int64_t kTinyPrompt = 16;  // single-question prompts: not worth a 64-token chunk
// The CPU's prefill products are efficient from 128 rows; a 1024-token prefill in chunks of 256
// took 2129-2721 ms against 2174-2997 in chunks of 128 on a Xeon with AMX (medians 2403, 2674),
// each chunk streaming all the weights once.
constexpr int64_t kCpuMaxChunk = 256;
constexpr int64_t kAcceleratorMaxChunk = 1024;

int64_t round_up(int64_t value, int64_t multiple) {
  return (value + multiple - 1) / multiple * multiple;
}

// A quarter of the cache, so padding a prompt to whole chunks wastes under a quarter of it (a
// prompt just past a multiple of half the cache would otherwise need a cache twice as long).
int64_t chunk_for(int64_t cache_len, bool accelerator) {
  return std::min(accelerator ? kAcceleratorMaxChunk : kCpuMaxChunk, cache_len / 4);
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
