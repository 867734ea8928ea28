#include "generation/buckets.h"

#include <gtest/gtest.h>

#include <set>

namespace tfm::generation {
namespace {

class BucketsTest : public ::testing::TestWithParam<bool> {};

TEST_P(BucketsTest, EveryPromptFitsItsCache) {
  for (int64_t prompt = 1; prompt <= 3000; prompt += 7) {
    for (int64_t new_tokens : {0, 1, 16, 200, 1000}) {
      const GenerationShapes s = plan_shapes(prompt, new_tokens, GetParam());
      EXPECT_GE(s.padded_prompt, prompt);
      EXPECT_EQ(s.padded_prompt % s.chunk, 0);
      EXPECT_LE(s.padded_prompt + new_tokens, s.cache_len) << prompt << " + " << new_tokens;
    }
  }
}

TEST_P(BucketsTest, OneChunkSizePerCacheLengthBeyondTinyPrompts) {
  std::set<std::pair<int64_t, int64_t>> pairs;
  std::set<int64_t> lengths;
  for (int64_t prompt = 17; prompt <= 3000; ++prompt) {
    const GenerationShapes s = plan_shapes(prompt, 32, GetParam());
    pairs.insert({s.cache_len, s.chunk});
    lengths.insert(s.cache_len);
  }
  EXPECT_EQ(pairs.size(), lengths.size());
}

INSTANTIATE_TEST_SUITE_P(Devices, BucketsTest, ::testing::Values(false, true),
                         [](const auto& info) { return info.param ? "accelerator" : "cpu"; });

TEST_P(BucketsTest, PaddingWastesUnderAQuarterOfTheCache) {
  for (int64_t prompt = 17; prompt <= 3000; ++prompt) {
    const GenerationShapes s = plan_shapes(prompt, 64, GetParam());
    EXPECT_LT(s.padded_prompt - prompt, s.cache_len / 4) << prompt;
  }
}

// The benchmark's prompts: 128 and 1024 tokens with 64 new ones.
TEST(Buckets, AnAcceleratorPrefillsInLargerChunks) {
  EXPECT_EQ(plan_shapes(1024, 64, true).chunk, 512);
  EXPECT_EQ(plan_shapes(1024, 64, false).chunk, 256);
  EXPECT_EQ(plan_shapes(128, 64, true).chunk, 64);
  EXPECT_EQ(plan_shapes(128, 64, false).chunk, 64);
}

}  // namespace
}  // namespace tfm::generation
