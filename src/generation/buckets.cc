#include "generation/buckets.h"

#include <algorithm>

namespace tfm::generation {
namespace {

constexpr int64_t kTinyPrompt = 16;  // single-question prompts: not worth a 64-token chunk
constexpr int64_t kCpuMaxChunk = 256;
constexpr int64_t kAcceleratorMaxChunk = 1024;
// Each CPU chunk streams all the weights once, which costs about what 64 more of its rows cost.
// On a Xeon with AMX (2 cores, Qwen3-0.6B's shape), prompts of 64, 128 and 200 tokens in one
// chunk (of 64, 128, 256 rows) took 95, 131-139 and 233-234 ms: 0.68-0.74 ms per row plus 64. A
// 1024-token prefill in chunks of 256 took 1102-1138 ms, of 128 1303-1323 ms, of 512 1259-1341.
constexpr int64_t kCpuChunkCostInRows = 64;

int64_t round_up(int64_t value, int64_t multiple) {
  return (value + multiple - 1) / multiple * multiple;
}

// The CPU's chunk for a cache length is a quarter or half of it (up to 256), whichever takes the
// prompt at the least cost in rows: a 128-token prompt is one chunk of 128, not two of 64. Two
// sizes a cache length keep a chat's graphs few (the graph cache warns past 8).
int64_t cpu_chunk(int64_t prompt_len, int64_t cache_len) {
  int64_t best = 0, best_cost = INT64_MAX;
  for (const int64_t share : {cache_len / 4, cache_len / 2}) {
    const int64_t chunk = std::min(kCpuMaxChunk, share);
    const int64_t cost = round_up(prompt_len, chunk) / chunk * (chunk + kCpuChunkCostInRows);
    if (cost <= best_cost) best = chunk, best_cost = cost;
  }
  return best;
}

// On an accelerator each cache length has one chunk size (one prefill graph): a quarter of the
// cache, so padding a prompt to whole chunks wastes under a quarter of it (a prompt just past a
// multiple of half the cache would otherwise need a cache twice as long).
int64_t accelerator_chunk(int64_t cache_len) {
  return std::min(kAcceleratorMaxChunk, cache_len / 4);
}

}  // namespace

GenerationShapes plan_shapes(int64_t prompt_len, int64_t max_new_tokens, bool accelerator) {
  const auto chunk = [&](int64_t cache_len) {
    if (prompt_len <= kTinyPrompt) return kTinyPrompt;
    return accelerator ? accelerator_chunk(cache_len) : cpu_chunk(prompt_len, cache_len);
  };
  GenerationShapes s{};
  s.cache_len = 256;
  while (round_up(prompt_len, chunk(s.cache_len)) + max_new_tokens > s.cache_len) s.cache_len *= 2;
  s.chunk = chunk(s.cache_len);
  s.padded_prompt = round_up(prompt_len, s.chunk);
  return s;
}

}  // namespace tfm::generation
