#include "generation/buckets.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <map>
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

TEST(Buckets, AnAcceleratorHasOneChunkSizePerCacheLengthBeyondTinyPrompts) {
  std::set<std::pair<int64_t, int64_t>> pairs;
  std::set<int64_t> lengths;
  for (int64_t prompt = 17; prompt <= 3000; ++prompt) {
    const GenerationShapes s = plan_shapes(prompt, 32, true);
    pairs.insert({s.cache_len, s.chunk});
    lengths.insert(s.cache_len);
  }
  EXPECT_EQ(pairs.size(), lengths.size());
}

// The CPU compiles a few more shapes: two chunk sizes a cache length beyond tiny prompts, a quarter
// and a half of it up to 256.
TEST(Buckets, TheCpuHasTwoChunkSizesPerCacheLengthBeyondTinyPrompts) {
  std::map<int64_t, std::set<int64_t>> chunks;
  for (int64_t prompt = 17; prompt <= 3000; ++prompt) {
    for (int64_t new_tokens : {1, 32, 200}) {
      const GenerationShapes s = plan_shapes(prompt, new_tokens, false);
      chunks[s.cache_len].insert(s.chunk);
    }
  }
  for (const auto& [cache_len, sizes] : chunks) {
    for (const int64_t chunk : sizes) {
      EXPECT_TRUE(chunk == std::min<int64_t>(256, cache_len / 4) ||
                  chunk == std::min<int64_t>(256, cache_len / 2))
          << chunk << " for a cache of " << cache_len;
    }
  }
}

// Each chunk costs its rows and 64 more (the weights streamed once), so the CPU takes a prompt of
// up to 256 tokens in one chunk (from 64) and a longer one in the chunk with the fewest rows and
// chunks: 300 tokens as three chunks of 128 (576 rows' cost), not two of 256 (640).
TEST(Buckets, TheCpuTakesEachPromptInItsCheapestChunks) {
  const std::pair<int64_t, int64_t> prompt_and_chunk[] = {
      {0, 16},    {1, 16},    {16, 16},   {17, 64},   {64, 64},    {65, 128},  {128, 128},
      {129, 256}, {256, 256}, {300, 128}, {400, 256}, {1024, 256}, {1100, 256}};
  for (const auto& [prompt, chunk] : prompt_and_chunk) {
    EXPECT_EQ(plan_shapes(prompt, 1, false).chunk, chunk) << prompt;
  }
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
  EXPECT_EQ(plan_shapes(128, 64, false).chunk, 128);
}

}  // namespace
}  // namespace tfm::generation
