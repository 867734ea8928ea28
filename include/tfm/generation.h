// generate() settings, named as in transformers' GenerationConfig.
#pragma once

#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <vector>

namespace tfm {

struct GenerationConfig {
  int max_new_tokens = 20;
  int min_new_tokens = 0;
  bool do_sample = false;
  float temperature = 1.0f;
  int top_k = 50;      // 0 turns it off
  float top_p = 1.0f;  // 1 turns it off
  float repetition_penalty = 1.0f;
  std::optional<uint64_t> seed;
  std::vector<int64_t> eos_token_id;  // empty: the model's config decides
  std::optional<int64_t> pad_token_id;
  std::string cache_implementation = "static";
  bool disable_compile = false;
  // Called with (batch row, new token id) as each token is produced.
  std::function<void(int row, int64_t token)> streamer;
};

// Counters of one generate() call, for the CLI's closing line and the benchmarks.
struct GenerationStats {
  int prompt_tokens = 0;    // longest unpadded prompt in the batch
  int new_tokens = 0;       // per row
  double prefill_ms = 0;    // time to first token
  double decode_ms = 0;     // the remaining tokens
  int graphs_compiled = 0;  // during this call
  int graphs_loaded = 0;    // during this call, from a compiler backend's on-disk cache
};

}  // namespace tfm
