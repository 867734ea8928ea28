// The few shapes generate() compiles for. The KV cache length is rounded up to a power of two
// (from 256) and each cache length has one or two prefill chunk sizes, so every cache length costs
// two or three graphs (prefill chunks, decode step) and a long chat compiles a handful, not one per
// prompt. The chunk size depends on the device: the CPU takes each prompt in the one of its two
// that costs it least (up to 256 rows: its caches favour short chunks), while an accelerator has
// one (two graphs a cache length) and reads every weight once per chunk, so it wants as many rows
// as it can get (a 1024-token prompt is two chunks there, four on the CPU).
#pragma once

#include <cstdint>

namespace tfm::generation {

struct GenerationShapes {
  int64_t chunk;          // tokens per prefill step
  int64_t padded_prompt;  // the prompt left-padded to whole chunks
  int64_t cache_len;      // KV cache slots
};

GenerationShapes plan_shapes(int64_t prompt_len, int64_t max_new_tokens, bool accelerator);

}  // namespace tfm::generation
