#include "generation/buckets.h"

#include <gtest/gtest.h>

#include <set>

namespace tfm::generation {
namespace {

TEST(Buckets, EveryPromptFitsItsCache) {
  for (int64_t prompt = 1; prompt <= 3000; prompt += 7) {
    for (int64_t new_tokens : {0, 1, 16, 200, 1000}) {
      const GenerationShapes s = plan_shapes(prompt, new_tokens);
      EXPECT_GE(s.padded_prompt, prompt);
      EXPECT_EQ(s.padded_prompt % s.chunk, 0);
      EXPECT_LE(s.padded_prompt + new_tokens, s.cache_len) << prompt << " + " << new_tokens;
    }
  }
}

TEST(Buckets, OneChunkSizePerCacheLengthBeyondTinyPrompts) {
  std::set<std::pair<int64_t, int64_t>> pairs;
  std::set<int64_t> lengths;
  for (int64_t prompt = 17; prompt <= 3000; ++prompt) {
    const GenerationShapes s = plan_shapes(prompt, 32);
    pairs.insert({s.cache_len, s.chunk});
    lengths.insert(s.cache_len);
  }
  EXPECT_EQ(pairs.size(), lengths.size());
}

}  // namespace
}  // namespace tfm::generation
