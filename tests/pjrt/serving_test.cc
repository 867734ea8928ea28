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
#include "support/sequences.h"
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

using testing::greedy;
using testing::run_to_end;

std::vector<int64_t> unpadded_prompt(int row) { return testing::fixture_prompt("qwen3", row); }
std::vector<int64_t> greedy_16(int row) { return testing::fixture_greedy("qwen3", row); }

// The qwen3 fixture on the pjrt device.
class PjrtServing : public ::testing::Test {
 protected:
  void SetUp() override {
    if (!plugin()) GTEST_SKIP() << "no PJRT plugin";
    set_log_level(LogLevel::kWarn);
    model_ = std::make_unique<CausalLM>(AutoModelForCausalLM::from_pretrained(
        testing::fixture_dir("qwen3"), {.dtype = DType::f32, .device_map = "pjrt"}));
  }
  // A prompt of `length` ids and generate()'s `tokens` greedy ids after it.
  std::pair<std::vector<int64_t>, std::vector<int64_t>> long_prompt(int length, int tokens) {
    std::vector<int64_t> prompt;
    for (int i = 0; i < length; ++i) prompt.push_back((i * 37 + 11) % 1000);
    GenerationConfig gc;
    gc.max_new_tokens = tokens;
    const std::vector<int64_t> all = model_->generate({prompt}, gc)[0];
    return {prompt, std::vector<int64_t>(all.begin() + length, all.end())};
  }
  std::unique_ptr<CausalLM> model_;
};

TEST_F(PjrtServing, SequencesGiveTransformersGreedyIds) {
  const auto [long_ids, want_long] = long_prompt(40, 16);

  // max_model_len 60: prompts of up to 64 tokens in one chunk, the 40-token one included; a
  // window of 64 slots, which 14 sequences on 2 rows pass more than once.
  Engine engine(CausalLMAccess::impl(*model_), {.max_num_seqs = 2, .max_model_len = 60});
  engine.start();
  std::vector<std::shared_ptr<Sequence>> sequences;
  for (int i = 0; i < 14; ++i) {
    sequences.push_back(
        std::make_shared<Sequence>(i == 5 ? long_ids : unpadded_prompt(i % 2), greedy(16)));
    engine.submit(sequences.back());
  }
  for (int i = 0; i < 14; ++i) {
    const std::vector<int64_t> got = run_to_end(*sequences[static_cast<size_t>(i)]);
    if (i == 5) {
      EXPECT_EQ(got, want_long);
    } else {
      EXPECT_EQ(got, greedy_16(i % 2)) << "sequence " << i;
    }
  }
  EXPECT_GE(engine.counts().compactions, 1);
}

TEST_F(PjrtServing, APromptOfTwoChunksBetweenDecodeSteps) {
  const auto [long_ids, want] = long_prompt(1050, 8);

  // 1024-token chunks: the 1050-token prompt takes two, with a decode step of the other row
  // between them.
  Engine engine(CausalLMAccess::impl(*model_), {.max_num_seqs = 2, .max_model_len = 1100});
  engine.start();
  auto beside = std::make_shared<Sequence>(unpadded_prompt(0), greedy(16));
  engine.submit(beside);
  while (beside->take(100ms).empty()) {
  }
  auto long_one = std::make_shared<Sequence>(long_ids, greedy(8));
  engine.submit(long_one);
  EXPECT_EQ(run_to_end(*long_one), want);
  run_to_end(*beside);
}

}  // namespace
}  // namespace tfm::serving
