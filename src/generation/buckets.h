// The few shapes generate() compiles for. The KV cache length is rounded up to a power of two
// (from 256) and each cache length has one prefill chunk size, so every cache length costs two
// graphs (prefill chunk, decode step) and a long chat compiles a handful, not one per prompt.
// The chunk size depends on the device: the CPU's products are efficient from 128 rows and its
// caches favour short chunks, while an accelerator reads every weight once per chunk and wants
// as many rows as it can get (a 1024-token prompt is two chunks there, four on the CPU).
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
