// The few shapes generate() compiles for. The KV cache length is rounded up to a power of two
// (from 256) and prefill chunks are powers of two, so a long chat compiles a handful of graphs,
// not one per prompt. The chunk size depends on the device: the CPU compiles a shape in a few
// milliseconds and takes each prompt in the chunk that costs it least (up to 256 rows: its caches
// favour short chunks), while an accelerator has one chunk size per cache length (two graphs
// each) and reads every weight once per chunk, so it wants as many rows as it can get (a
// 1024-token prompt is two chunks there, four on the CPU).
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
