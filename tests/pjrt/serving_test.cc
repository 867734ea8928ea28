// The serving engine on the pjrt device (XLA's CPU plugin), whose steps take whole buffers: every
// step runs all rows, and entries move back through the host. Sequences batched, queued, a long
// prompt between decode steps and a move of the cache give transformers' greedy ids (the
// fixtures' greedy_16) and generate()'s.
#include <gtest/gtest.h>

#include <chrono>
#include <string_view>

#include "api/causal_lm_access.h"
#include "serving/engine.h"
#include "support/fixtures.h"
#include "tfm/device.h"
#include "tfm/log.h"
#include "tfm/model.h"

namespace tfm::serving {
namespace {

using namespace std::chrono_literals;

bool plugin() {
  if (std::string_view(TFM_TEST_PJRT_PLUGIN).empty()) return false;
  use_device_plugin("pjrt", TFM_TEST_PJRT_PLUGIN, {.compile_cache = ""});
  return true;
}

std::vector<int64_t> unpadded_prompt(int row) {
  const nlohmann::json& ref = testing::reference("qwen3");
  std::vector<int64_t> ids;
  for (size_t j = 0; j < ref["padded_input_ids"][row].size(); ++j) {
    if (ref["padded_attention_mask"][row][j] == 1) ids.push_back(ref["padded_input_ids"][row][j]);
  }
  return ids;
}

std::vector<int64_t> greedy_16(int row) {
  const auto all = testing::reference("qwen3")["greedy_16"][row].get<std::vector<int64_t>>();
  return {all.end() - 16, all.end()};
}

std::vector<int64_t> run_to_end(Sequence& s) {
  std::vector<int64_t> ids;
  const auto deadline = std::chrono::steady_clock::now() + 300s;
  while (std::chrono::steady_clock::now() < deadline) {
    for (const TokenEvent& e : s.take(100ms)) {
      ids.push_back(e.token);
      if (e.finish) return ids;
    }
    if (s.error()) throw Error(*s.error());
  }
  throw Error("the sequence did not finish in time");
}

SamplingParams greedy(int max_tokens) {
  SamplingParams p;
  p.max_tokens = max_tokens;
  p.temperature = 0;
  return p;
}

TEST(PjrtServing, SequencesGiveTransformersGreedyIds) {
  if (!plugin()) GTEST_SKIP() << "no PJRT plugin";
  set_log_level(LogLevel::kWarn);
  CausalLM model = AutoModelForCausalLM::from_pretrained(
      testing::fixture_dir("qwen3"), {.dtype = DType::f32, .device_map = "pjrt"});
  GenerationConfig gc;
  gc.max_new_tokens = 16;
  std::vector<int64_t> long_prompt;
  for (int i = 0; i < 40; ++i) long_prompt.push_back((i * 37 + 11) % 1000);
  const std::vector<int64_t> want_long = model.generate({long_prompt}, gc)[0];

  // max_model_len 60: prompts of up to 64 tokens in one chunk, the 40-token one included; a
  // window of 64 slots, which 14 sequences on 2 rows pass more than once.
  Engine engine(CausalLMAccess::impl(model), {.max_num_seqs = 2, .max_model_len = 60});
  engine.start();
  std::vector<std::shared_ptr<Sequence>> sequences;
  for (int i = 0; i < 14; ++i) {
    sequences.push_back(std::make_shared<Sequence>(
        i == 5 ? long_prompt : unpadded_prompt(i % 2), greedy(16)));
    engine.submit(sequences.back());
  }
  for (int i = 0; i < 14; ++i) {
    const std::vector<int64_t> got = run_to_end(*sequences[static_cast<size_t>(i)]);
    if (i == 5) {
      EXPECT_EQ(got, std::vector<int64_t>(want_long.begin() + 40, want_long.end()));
    } else {
      EXPECT_EQ(got, greedy_16(i % 2)) << "sequence " << i;
    }
  }
  EXPECT_GE(engine.counts().compactions, 1);
}

TEST(PjrtServing, APromptOfTwoChunksBetweenDecodeSteps) {
  if (!plugin()) GTEST_SKIP() << "no PJRT plugin";
  set_log_level(LogLevel::kWarn);
  CausalLM model = AutoModelForCausalLM::from_pretrained(
      testing::fixture_dir("qwen3"), {.dtype = DType::f32, .device_map = "pjrt"});
  GenerationConfig gc;
  gc.max_new_tokens = 8;
  std::vector<int64_t> long_prompt;
  for (int i = 0; i < 1050; ++i) long_prompt.push_back((i * 37 + 11) % 1000);
  const std::vector<int64_t> want = model.generate({long_prompt}, gc)[0];

  // 1024-token chunks: the 1050-token prompt takes two, with a decode step of the other row
  // between them.
  Engine engine(CausalLMAccess::impl(model), {.max_num_seqs = 2, .max_model_len = 1100});
  engine.start();
  auto beside = std::make_shared<Sequence>(unpadded_prompt(0), greedy(16));
  engine.submit(beside);
  while (beside->take(100ms).empty()) {
  }
  auto long_one = std::make_shared<Sequence>(long_prompt, greedy(8));
  engine.submit(long_one);
  EXPECT_EQ(run_to_end(*long_one), std::vector<int64_t>(want.begin() + 1050, want.end()));
  run_to_end(*beside);
}

}  // namespace
}  // namespace tfm::serving
