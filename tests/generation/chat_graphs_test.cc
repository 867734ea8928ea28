// A long chat must not compile a graph per prompt: prompts are padded to a few prefill chunks and
// the cache to a few lengths.
#include <gtest/gtest.h>

#include <random>

#include "support/fixtures.h"
#include "tfm/log.h"
#include "tfm/model.h"

namespace tfm {
namespace {

TEST(ChatGraphs, TwentyTurnsCompileAtMostSixGraphs) {
  set_log_level(LogLevel::kWarn);
  CausalLM model = AutoModelForCausalLM::from_pretrained(
      testing::fixture_dir("qwen3"), {.dtype = DType::f32, .device_map = "cpu"});
  std::mt19937_64 rng(7);
  std::uniform_int_distribution<int64_t> token(3, 1023), turn_len(3, 40);
  std::vector<int64_t> conversation{1, 10, 11, 12, 13};
  GenerationConfig gc;
  gc.max_new_tokens = 8;
  gc.eos_token_id = {2};
  std::vector<size_t> prompt_lengths;
  for (int turn = 0; turn < 20; ++turn) {
    for (int64_t i = turn_len(rng); i > 0; --i) conversation.push_back(token(rng));
    prompt_lengths.push_back(conversation.size());
    conversation = model.generate({conversation}, gc).at(0);
  }
  EXPECT_GT(prompt_lengths.back(), 300u) << "the chat should grow past several buckets";
  EXPECT_LE(model.graph_stats().compiles, 6);
  EXPECT_GE(model.graph_stats().hits, 20 * 7);
}

}  // namespace
}  // namespace tfm
