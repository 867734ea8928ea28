// A long chat must not compile a graph per prompt: prompts are padded to a few prefill chunks and
// the cache to a few lengths.
#include <gtest/gtest.h>

#include <random>
#include <set>

#include "generation/buckets.h"
#include "support/fixtures.h"
#include "tfm/log.h"
#include "tfm/model.h"

namespace tfm {
namespace {

// Each shape the turns plan (generation::plan_shapes: prefill chunks and a decode step for each
// cache length) is compiled once, and twenty turns need fewer than the graph cache takes before
// it warns of shapes that keep changing.
TEST(ChatGraphs, TwentyTurnsCompileAHandfulOfGraphs) {
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
  std::set<std::pair<int64_t, int64_t>> planned;  // rows of a step, cache length
  for (const size_t length : prompt_lengths) {
    const generation::GenerationShapes s =
        generation::plan_shapes(static_cast<int64_t>(length), gc.max_new_tokens, false);
    planned.insert({s.chunk, s.cache_len});
    planned.insert({1, s.cache_len});
  }
  EXPECT_LE(model.graph_stats().compiles, static_cast<int64_t>(planned.size()));
  EXPECT_LE(model.graph_stats().compiles, 8) << "past 8 graphs the graph cache warns";
  EXPECT_GE(model.graph_stats().hits, 20 * 7);
}

}  // namespace
}  // namespace tfm
