// The few shapes generate() compiles for. Prompts are left-padded to a multiple of a prefill
// chunk and the KV cache length is rounded up, so a long chat reuses a handful of graphs.
#pragma once

#include <cstdint>

namespace tfm::generation {

// Tokens per prefill step: 16, 64 or 256, the smallest that holds the prompt (256 beyond).
int64_t prefill_chunk(int64_t prompt_len);
// Cache length for `needed` slots: 256, 1024, 4096, ... (powers of 4 from 256).
int64_t cache_bucket(int64_t needed);

}  // namespace tfm::generation
