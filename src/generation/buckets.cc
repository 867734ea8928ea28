#include "generation/buckets.h"

#include <initializer_list>

namespace tfm::generation {

int64_t prefill_chunk(int64_t prompt_len) {
  for (int64_t chunk : {16, 64}) {
    if (prompt_len <= chunk) return chunk;
  }
  return 256;
}

int64_t cache_bucket(int64_t needed) {
  int64_t len = 256;
  while (len < needed) len *= 4;
  return len;
}

}  // namespace tfm::generation
