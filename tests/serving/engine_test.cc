// The serving engine against transformers' greedy ids (the fixtures' greedy_16) and against
// generate() (itself checked against transformers) where no fixture covers the case: sequences
// batched together, queued, spanning a move of the cache's entries, a long prompt's chunks run
// between other rows' decode steps, seeded sampling, and a cancelled sequence's row freed.
#include "serving/engine.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <random>
#include <thread>

#include "api/causal_lm_access.h"
#include "support/fixtures.h"
#include "support/sequences.h"
#include "tfm/log.h"
#include "tfm/model.h"

namespace tfm::serving {
namespace {

using namespace std::chrono_literals;

using testing::greedy;
using testing::run_to_end;

// A fixture prompt and transformers' 16 greedy ids after it.
struct Case {
  std::vector<int64_t> prompt, greedy;
};

Case fixture_case(const std::string& arch, int row) {
  return {testing::fixture_prompt(arch, row), testing::fixture_greedy(arch, row)};
}

class EngineTest : public ::testing::Test {
 protected:
  void SetUp() override { set_log_level(LogLevel::kWarn); }
  CausalLM load(const std::string& arch) {
    return AutoModelForCausalLM::from_pretrained(testing::fixture_dir(arch),
                                                 {.dtype = DType::f32, .device_map = "cpu"});
  }
};

TEST_F(EngineTest, BatchedAndQueuedSequencesGiveTransformersGreedyIds) {
  for (const char* arch : {"qwen3", "llama", "qwen2", "mixtral", "qwen3-moe"}) {
    CausalLM model = load(arch);
    Engine engine(CausalLMAccess::impl(model), {.max_num_seqs = 2, .max_model_len = 64});
    engine.start();
    // Six sequences on two rows: four wait, and rows are reused as sequences end.
    std::vector<std::shared_ptr<Sequence>> sequences;
    for (int i = 0; i < 6; ++i) {
      sequences.push_back(std::make_shared<Sequence>(fixture_case(arch, i % 2).prompt, greedy(16)));
      engine.submit(sequences.back());
    }
    for (int i = 0; i < 6; ++i) {
      EXPECT_EQ(run_to_end(*sequences[static_cast<size_t>(i)]), fixture_case(arch, i % 2).greedy)
          << arch << " sequence " << i;
    }
  }
}

TEST_F(EngineTest, SequencesSpanningAMoveOfTheCacheKeepTheirIds) {
  CausalLM model = load("qwen3");
  // A 128-slot window: the cursor reaches the cache's end after 128 steps.
  Engine engine(CausalLMAccess::impl(model), {.max_num_seqs = 3, .max_model_len = 40});
  engine.start();
  std::vector<std::shared_ptr<Sequence>> sequences;
  for (int i = 0; i < 30; ++i) {
    sequences.push_back(
        std::make_shared<Sequence>(fixture_case("qwen3", i % 2).prompt, greedy(16)));
    engine.submit(sequences.back());
  }
  for (int i = 0; i < 30; ++i) {
    EXPECT_EQ(run_to_end(*sequences[static_cast<size_t>(i)]), fixture_case("qwen3", i % 2).greedy)
        << "sequence " << i;
  }
  EXPECT_GE(engine.counts().compactions, 1);
}

TEST_F(EngineTest, APrefillBatchAroundADecodingRowLeavesItAlone) {
  CausalLM model = load("qwen3");
  Engine engine(CausalLMAccess::impl(model), {.max_num_seqs = 3, .max_model_len = 64});
  engine.start();
  const Case a = fixture_case("qwen3", 0), b = fixture_case("qwen3", 1);
  // Rows 0 and 2 end after 2 tokens while row 1 runs on; the two prompts that follow take rows 0
  // and 2 and run as one batch over rows 0 to 2, row 1's included.
  auto first = std::make_shared<Sequence>(a.prompt, greedy(2));
  auto middle = std::make_shared<Sequence>(b.prompt, greedy(16));
  auto last = std::make_shared<Sequence>(a.prompt, greedy(2));
  for (const auto& s : {first, middle, last}) engine.submit(s);
  EXPECT_EQ(run_to_end(*first), std::vector<int64_t>(a.greedy.begin(), a.greedy.begin() + 2));
  EXPECT_EQ(run_to_end(*last), std::vector<int64_t>(a.greedy.begin(), a.greedy.begin() + 2));
  auto next_a = std::make_shared<Sequence>(a.prompt, greedy(16));
  auto next_b = std::make_shared<Sequence>(b.prompt, greedy(16));
  engine.submit(next_a);
  engine.submit(next_b);
  EXPECT_EQ(run_to_end(*middle), b.greedy);
  EXPECT_EQ(run_to_end(*next_a), a.greedy);
  EXPECT_EQ(run_to_end(*next_b), b.greedy);
}

std::vector<int64_t> random_prompt(size_t length, uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::vector<int64_t> ids(length);
  for (int64_t& id : ids) id = static_cast<int64_t>(rng() % 1000);
  return ids;
}

TEST_F(EngineTest, ALongPromptBetweenDecodeStepsMatchesGenerate) {
  CausalLM model = load("qwen3");
  GenerationConfig gc;
  gc.max_new_tokens = 24;
  const std::vector<int64_t> short_prompt = random_prompt(5, 1),
                             long_prompt = random_prompt(300, 2);
  const std::vector<int64_t> want_short = model.generate({short_prompt}, gc)[0];
  const std::vector<int64_t> want_long = model.generate({long_prompt}, gc)[0];

  Engine engine(CausalLMAccess::impl(model), {.max_num_seqs = 4, .max_model_len = 400});
  engine.start();
  // The long prompt (three 128-token chunks) arrives while two short sequences decode, on the
  // row after theirs, so every decode step also covers its row.
  auto first = std::make_shared<Sequence>(short_prompt, greedy(24));
  auto second = std::make_shared<Sequence>(short_prompt, greedy(24));
  engine.submit(first);
  engine.submit(second);
  std::vector<TokenEvent> started;
  while (started.empty()) started = first->take(100ms);
  auto long_one = std::make_shared<Sequence>(long_prompt, greedy(24));
  engine.submit(long_one);
  std::vector<int64_t> first_ids;
  for (const TokenEvent& e : started) first_ids.push_back(e.token);
  for (int64_t id : run_to_end(*first)) first_ids.push_back(id);
  const auto tail = [](const std::vector<int64_t>& all, size_t prompt) {
    return std::vector<int64_t>(all.begin() + static_cast<std::ptrdiff_t>(prompt), all.end());
  };
  EXPECT_EQ(first_ids, tail(want_short, short_prompt.size()));
  EXPECT_EQ(run_to_end(*second), tail(want_short, short_prompt.size()));
  EXPECT_EQ(run_to_end(*long_one), tail(want_long, long_prompt.size()));
}

TEST_F(EngineTest, SeededSamplingMatchesGenerate) {
  CausalLM model = load("llama");
  const Case c = fixture_case("llama", 0);
  GenerationConfig gc;
  gc.max_new_tokens = 12;
  gc.do_sample = true;
  gc.temperature = 0.9f;
  gc.top_k = 20;
  gc.top_p = 0.9f;
  gc.seed = 7;
  const std::vector<int64_t> want = model.generate({c.prompt}, gc)[0];

  Engine engine(CausalLMAccess::impl(model), {.max_num_seqs = 2, .max_model_len = 64});
  engine.start();
  SamplingParams p;
  p.max_tokens = 12;
  p.temperature = 0.9f;
  p.top_k = 20;
  p.top_p = 0.9f;
  p.seed = 7;
  auto sampled = std::make_shared<Sequence>(c.prompt, p);
  auto beside = std::make_shared<Sequence>(fixture_case("llama", 1).prompt, greedy(12));
  engine.submit(beside);
  engine.submit(sampled);
  EXPECT_EQ(run_to_end(*sampled),
            std::vector<int64_t>(want.begin() + static_cast<std::ptrdiff_t>(c.prompt.size()),
                                 want.end()));
  const std::vector<int64_t> greedy_ids = fixture_case("llama", 1).greedy;
  EXPECT_EQ(run_to_end(*beside), std::vector<int64_t>(greedy_ids.begin(), greedy_ids.begin() + 12));
}

// The reference: the model's last-position logits for the whole text so far (forward(), checked
// against transformers), penalized as vLLM does in closed form: transformers' repetition penalty
// over prompt and output (divide a positive logit, multiply a negative one), then OpenAI's
// presence and frequency penalties over the output, then argmax.
std::vector<int64_t> penalized_greedy(CausalLM& model, std::vector<int64_t> ids, int steps,
                                      float repetition, float presence, float frequency) {
  const size_t prompt = ids.size();
  for (int t = 0; t < steps; ++t) {
    const Tensor input = Tensor::from_vector(ids, {1, static_cast<int64_t>(ids.size())});
    const std::vector<float> logits = model.forward(input, nullptr, false).to_f32_vector();
    std::vector<double> scores(logits.begin(), logits.end());
    for (size_t id = 0; id < scores.size(); ++id) {
      const auto seen = std::count(ids.begin(), ids.end(), static_cast<int64_t>(id));
      const auto generated = std::count(ids.begin() + static_cast<std::ptrdiff_t>(prompt),
                                        ids.end(), static_cast<int64_t>(id));
      if (seen > 0) scores[id] = scores[id] > 0 ? scores[id] / repetition : scores[id] * repetition;
      if (generated > 0) scores[id] -= presence + frequency * static_cast<double>(generated);
    }
    ids.push_back(std::max_element(scores.begin(), scores.end()) - scores.begin());
  }
  return std::vector<int64_t>(ids.begin() + static_cast<std::ptrdiff_t>(prompt), ids.end());
}

TEST_F(EngineTest, PenaltiesAsVllmAppliesThem) {
  CausalLM model = load("qwen3");
  const Case c = fixture_case("qwen3", 0);  // greedy repeats one id: the penalties change that
  const std::vector<int64_t> want = penalized_greedy(model, c.prompt, 12, 1.3f, 0.4f, 0.3f);
  ASSERT_NE(want, std::vector<int64_t>(c.greedy.begin(), c.greedy.begin() + 12));
  Engine engine(CausalLMAccess::impl(model), {.max_num_seqs = 2, .max_model_len = 64});
  engine.start();
  SamplingParams p = greedy(12);
  p.repetition_penalty = 1.3f;
  p.presence_penalty = 0.4f;
  p.frequency_penalty = 0.3f;
  auto s = std::make_shared<Sequence>(c.prompt, p);
  engine.submit(s);
  EXPECT_EQ(run_to_end(*s), want);
}

TEST_F(EngineTest, StopIdsEndASequenceWithReasonStop) {
  CausalLM model = load("qwen3");
  Engine engine(CausalLMAccess::impl(model), {.max_num_seqs = 1, .max_model_len = 64});
  engine.start();
  const Case c = fixture_case("qwen3", 1);
  SamplingParams p = greedy(16);
  p.stop_token_ids = {c.greedy[3]};
  auto s = std::make_shared<Sequence>(c.prompt, p);
  engine.submit(s);
  std::vector<TokenEvent> events;
  while (events.empty() || !events.back().finish) {
    for (TokenEvent& e : s->take(100ms)) events.push_back(std::move(e));
  }
  const auto stop_at = std::find(c.greedy.begin(), c.greedy.end(), c.greedy[3]) - c.greedy.begin();
  ASSERT_EQ(static_cast<int64_t>(events.size()), stop_at + 1);
  EXPECT_EQ(events.back().finish, FinishReason::kStop);
}

TEST_F(EngineTest, ACancelledSequenceFreesItsRow) {
  CausalLM model = load("qwen3");
  Engine engine(CausalLMAccess::impl(model), {.max_num_seqs = 1, .max_model_len = 4096});
  engine.start();
  auto endless = std::make_shared<Sequence>(fixture_case("qwen3", 0).prompt, greedy(4000));
  engine.submit(endless);
  while (endless->take(100ms).empty()) {
  }
  endless->cancel();
  // The one row serves the next sequence.
  auto next = std::make_shared<Sequence>(fixture_case("qwen3", 1).prompt, greedy(16));
  engine.submit(next);
  EXPECT_EQ(run_to_end(*next), fixture_case("qwen3", 1).greedy);
  const auto deadline = std::chrono::steady_clock::now() + 10s;
  while (engine.counts().running > 0 && std::chrono::steady_clock::now() < deadline) {
    std::this_thread::sleep_for(10ms);
  }
  EXPECT_EQ(engine.counts().running, 0);
}

TEST_F(EngineTest, RefusesWhatItCannotServe) {
  CausalLM model = load("qwen3");
  Engine engine(CausalLMAccess::impl(model),
                {.max_num_seqs = 1, .max_model_len = 32, .max_waiting = 1});
  const auto refused = [&](std::vector<int64_t> prompt, int max_tokens, const char* words) {
    try {
      engine.submit(std::make_shared<Sequence>(std::move(prompt), greedy(max_tokens)));
      ADD_FAILURE() << "accepted";
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find(words), std::string::npos) << e.what();
    }
  };
  refused(std::vector<int64_t>(20, 1), 13, "maximum context length is 32 tokens");
  refused({}, 4, "empty");
  refused({1}, 0, "max_tokens");
  // Not started: the one queued sequence stays queued and the next finds the queue full.
  engine.submit(std::make_shared<Sequence>(std::vector<int64_t>{1, 2}, greedy(2)));
  EXPECT_THROW(engine.submit(std::make_shared<Sequence>(std::vector<int64_t>{1, 2}, greedy(2))),
               EngineFull);
  EXPECT_THROW(Engine(CausalLMAccess::impl(model), {.max_num_seqs = 0}), Error);
}

// Mistral's sliding window (8 tokens here) hides nothing from sequences no longer than it: the
// engine's rows, spread over a cache longer than the window, give each token the log-probability
// a forward pass over the whole sequence gives it.
TEST_F(EngineTest, SequencesWithinASlidingWindowMatchAForwardPass) {
  CausalLM model = load("mistral");
  SamplingParams params = greedy(6);
  params.logprobs = true;
  std::vector<std::shared_ptr<Sequence>> sequences;
  std::vector<std::vector<TokenEvent>> events(5);
  {
    Engine engine(CausalLMAccess::impl(model), {.max_num_seqs = 2, .max_model_len = 8});
    engine.start();
    for (int i = 0; i < 5; ++i) {
      sequences.push_back(std::make_shared<Sequence>(random_prompt(2, 3 + i), params));
      engine.submit(sequences.back());
    }
    for (size_t i = 0; i < sequences.size(); ++i) {
      while (events[i].empty() || !events[i].back().finish) {
        for (TokenEvent& e : sequences[i]->take(100ms)) events[i].push_back(std::move(e));
        ASSERT_FALSE(sequences[i]->error()) << *sequences[i]->error();
      }
    }
  }  // the engine stops before the model runs anything else: it holds the model's KV cache
  const int64_t vocab = model.config().vocab_size;
  for (size_t i = 0; i < sequences.size(); ++i) {
    std::vector<int64_t> ids = sequences[i]->prompt();
    for (const TokenEvent& e : events[i]) ids.push_back(e.token);
    const Tensor ids_tensor = Tensor::from_vector(ids, {1, static_cast<int64_t>(ids.size())});
    const std::vector<float> logits = model.forward(ids_tensor).to_f32_vector();
    for (size_t t = 0; t < events[i].size(); ++t) {
      // The log-softmax of the logits at the position before token t.
      const float* row = logits.data() + (sequences[i]->prompt().size() + t - 1) * vocab;
      double sum = 0;
      const float top = *std::max_element(row, row + vocab);
      for (int64_t v = 0; v < vocab; ++v) sum += std::exp(static_cast<double>(row[v] - top));
      const double want = row[events[i][t].token] - top - std::log(sum);
      EXPECT_NEAR(events[i][t].logprob, want, 1e-4) << "sequence " << i << " token " << t;
    }
  }
}

TEST_F(EngineTest, RefusesASlidingWindowItCannotApply) {
  CausalLM model = load("mistral");  // sliding_window 8
  try {
    Engine engine(CausalLMAccess::impl(model), {.max_num_seqs = 1, .max_model_len = 64});
    ADD_FAILURE() << "accepted";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("sliding_window of 8"), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace tfm::serving
