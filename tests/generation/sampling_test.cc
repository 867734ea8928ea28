// Token choice against transformers' logits processors, plus closed forms for the sampling itself.
#include "generation/sampling.h"

#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <optional>
#include <random>
#include <span>
#include <string>
#include <vector>

#include "support/devices.h"
#include "support/fixtures.h"
#include "tfm/error.h"
#include "tfm/log.h"
#include "tfm/model.h"

namespace tfm::generation {
namespace {

constexpr float kInf = std::numeric_limits<float>::infinity();

// Inputs of tools/make_sampling_goldens.py: LOGITS, TIED, HISTORY and EOS there.
constexpr float kLogits[] = {1.5f, -0.25f, 3.f, 0.75f, -2.f, 2.25f, 0.f, -1.f, 1.f, 0.5f};
constexpr float kTied[] = {0.5f, 2.f, -1.f, 3.f, 2.f, 1.f, -0.5f, 0.25f};
const std::vector<int64_t> kHistory = {1, 3, 3, 7, 0};
const std::vector<int64_t> kEos = {2, 5};

// Pasted from `python3 tools/make_sampling_goldens.py` (transformers 5.24, torch 2.15): the
// processors' output scores on the inputs above.
constexpr float kRepetition1_3[] = {1.15384614f, -0.324999988f, 3.f,          0.576923072f, -2.f,
                                    2.25f,       0.f,           -1.29999995f, 1.f,          0.5f};
constexpr float kRepetition0_5[] = {3.f, -0.125f, 3.f, 1.5f, -2.f, 2.25f, 0.f, -0.5f, 1.f, 0.5f};
constexpr float kTopK3[] = {1.5f, -kInf, 3.f, -kInf, -kInf, 2.25f, -kInf, -kInf, -kInf, -kInf};
constexpr float kTopK1[] = {-kInf, -kInf, 3.f, -kInf, -kInf, -kInf, -kInf, -kInf, -kInf, -kInf};
constexpr float kTopK20[] = {1.5f, -0.25f, 3.f, 0.75f, -2.f, 2.25f, 0.f, -1.f, 1.f, 0.5f};
constexpr float kTiedTopK3[] = {-kInf, 2.f, -kInf, 3.f, 2.f, -kInf, -kInf, -kInf};
constexpr float kTopP0_5[] = {-kInf, -kInf, 3.f, -kInf, -kInf, 2.25f, -kInf, -kInf, -kInf, -kInf};
constexpr float kTopP0_9[] = {1.5f, -kInf, 3.f, 0.75f, -kInf, 2.25f, -kInf, -kInf, 1.f, -kInf};
constexpr float kTopP0_99[] = {1.5f, -0.25f, 3.f, 0.75f, -kInf, 2.25f, 0.f, -1.f, 1.f, 0.5f};
constexpr float kTopP0_01[] = {-kInf, -kInf, 3.f, -kInf, -kInf, -kInf, -kInf, -kInf, -kInf, -kInf};
constexpr float kTemperature0_7[] = {2.14285707f,  -0.357142866f, 4.28571415f, 1.07142854f,
                                     -2.85714293f, 3.21428585f,   0.f,         -1.42857146f,
                                     1.42857146f,  0.714285731f};
constexpr float kTemperature1_5[] = {1.f,          -0.166666672f, 2.f, 0.5f,
                                     -1.33333337f, 1.5f,          0.f, -0.666666687f,
                                     0.666666687f, 0.333333343f};
constexpr float kMinNewAfter1[] = {1.5f, -0.25f, -kInf, 0.75f, -2.f, -kInf, 0.f, -1.f, 1.f, 0.5f};
constexpr float kMinNewAfter3[] = {1.5f, -0.25f, 3.f, 0.75f, -2.f, 2.25f, 0.f, -1.f, 1.f, 0.5f};
constexpr float kPipeline[] = {1.5625f, -kInf, -kInf, 0.78125f, -kInf,
                               -kInf,   0.f,   -kInf, 1.25f,    0.520833313f};

std::vector<float> copy(std::span<const float> values) { return {values.begin(), values.end()}; }

// Masked entries must be exactly -inf (they get probability 0); kept ones equal up to float
// rounding of the division order.
void expect_scores(std::span<const float> got, std::span<const float> want) {
  ASSERT_EQ(got.size(), want.size());
  for (size_t i = 0; i < want.size(); ++i) {
    if (std::isinf(want[i])) {
      EXPECT_EQ(got[i], want[i]) << "at index " << i;
    } else {
      EXPECT_NEAR(got[i], want[i], 1e-6f * std::max(1.f, std::fabs(want[i]))) << "at index " << i;
    }
  }
}

// What transformers' generate() refuses, refused with its message; and two settings it accepts
// (sampling settings without sampling; top_p of 1 or more, which turns it off). Pasted from
// `python3 tools/make_sampling_goldens.py` (transformers 5.25, torch 2.15): the cases' names are
// the settings, the messages those generate() raised ("accepted": none).
struct Refusal {
  const char* settings;
  const char* message;
};
constexpr Refusal kRefusals[] = {
    {"do_sample = true, temperature = NaN",
     "`temperature` (=nan) has to be a strictly positive float, otherwise your next token scores "
     "will be invalid."},
    {"do_sample = true, temperature = 0",
     "`temperature` (=0.0) has to be a strictly positive float, otherwise your next token scores "
     "will be invalid. If you're looking for greedy decoding strategies, set `do_sample=False`."},
    {"repetition_penalty = 0", "`penalty` has to be a strictly positive float, but is 0.0"},
    {"repetition_penalty = -1", "`penalty` has to be a strictly positive float, but is -1.0"},
    {"do_sample = true, top_k = -3", "`top_k` has to be a strictly positive integer, but is -3"},
    {"do_sample = true, top_p = -0.5", "`top_p` has to be a float > 0 and < 1, but is -0.5"},
    {"max_new_tokens = 0", "`max_new_tokens` must be greater than 0, but is 0."},
    {"do_sample = false, temperature = NaN, top_k = -3", "accepted"},
    {"do_sample = true, top_p = 1.5", "accepted"},
};

GenerationConfig settings_of(const std::string& name) {
  GenerationConfig gc;
  gc.max_new_tokens = 2;
  const float nan = std::numeric_limits<float>::quiet_NaN();
  if (name.find("do_sample = true") != std::string::npos) gc.do_sample = true;
  if (name.find("temperature = NaN") != std::string::npos) gc.temperature = nan;
  if (name.find("temperature = 0") != std::string::npos) gc.temperature = 0.f;
  if (name.find("repetition_penalty = 0") != std::string::npos) gc.repetition_penalty = 0.f;
  if (name.find("repetition_penalty = -1") != std::string::npos) gc.repetition_penalty = -1.f;
  if (name.find("top_k = -3") != std::string::npos) gc.top_k = -3;
  if (name.find("top_p = -0.5") != std::string::npos) gc.top_p = -0.5f;
  if (name.find("top_p = 1.5") != std::string::npos) gc.top_p = 1.5f;
  if (name.find("max_new_tokens = 0") != std::string::npos) gc.max_new_tokens = 0;
  return gc;
}

TEST(GenerationConfigTest, RefusesWhatTransformersRefuses) {
  set_log_level(LogLevel::kWarn);
  CausalLM model =
      AutoModelForCausalLM::from_pretrained(testing::fixture_dir("qwen3"), {.dtype = DType::f32});
  for (const Refusal& r : kRefusals) {
    std::string message = "accepted";
    try {
      model.generate({{5, 6, 7}}, settings_of(r.settings));
    } catch (const Error& e) {
      message = e.what();
    }
    EXPECT_EQ(message, r.message) << r.settings;
  }
}

TEST(RepetitionPenaltyTest, MatchesTransformers) {
  std::vector<float> scores = copy(kLogits);
  apply_repetition_penalty(scores, kHistory, 1.3f);
  expect_scores(scores, kRepetition1_3);
  scores = copy(kLogits);
  apply_repetition_penalty(scores, kHistory, 0.5f);
  expect_scores(scores, kRepetition0_5);
}

TEST(TopKTest, MatchesTransformers) {
  std::vector<float> scores = copy(kLogits);
  apply_top_k(scores, 3);
  expect_scores(scores, kTopK3);
  scores = copy(kLogits);
  apply_top_k(scores, 1);
  expect_scores(scores, kTopK1);
  scores = copy(kLogits);
  apply_top_k(scores, 20);
  expect_scores(scores, kTopK20);
}

TEST(TopKTest, KeepsTiesAtTheBoundaryAsTransformers) {
  std::vector<float> scores = copy(kTied);
  apply_top_k(scores, 3);
  expect_scores(scores, kTiedTopK3);
}

// generate()'s top_k = 0 means no top-k warper at all, as in transformers' GenerationConfig.
TEST(TopKTest, ZeroTurnsItOff) {
  std::vector<float> scores = copy(kLogits);
  apply_top_k(scores, 0);
  expect_scores(scores, kLogits);
}

TEST(TopPTest, MatchesTransformers) {
  const std::pair<float, std::span<const float>> cases[] = {
      {0.5f, kTopP0_5}, {0.9f, kTopP0_9}, {0.99f, kTopP0_99}, {0.01f, kTopP0_01}, {1.f, kLogits}};
  for (const auto& [top_p, want] : cases) {
    SCOPED_TRACE(top_p);
    std::vector<float> scores = copy(kLogits);
    apply_top_p(scores, top_p);
    expect_scores(scores, want);
  }
}

GenerationConfig sampling_config() {
  GenerationConfig gc;
  gc.do_sample = true;
  gc.top_k = 0;
  gc.top_p = 1.f;
  return gc;
}

// Temperature has no function of its own; TokenChooser leaves the warped scores in `logits`.
TEST(TemperatureTest, MatchesTransformers) {
  const std::pair<float, std::span<const float>> cases[] = {{0.7f, kTemperature0_7},
                                                            {1.5f, kTemperature1_5}};
  for (const auto& [temperature, want] : cases) {
    SCOPED_TRACE(temperature);
    GenerationConfig gc = sampling_config();
    gc.temperature = temperature;
    std::mt19937_64 rng(1);
    std::vector<float> scores = copy(kLogits);
    TokenChooser{gc, kEos, rng}.choose(scores, kHistory, 0);
    expect_scores(scores, want);
  }
}

TEST(MinNewTokensTest, MatchesTransformers) {
  GenerationConfig gc;
  gc.min_new_tokens = 3;
  std::mt19937_64 rng(1);
  const TokenChooser chooser{gc, kEos, rng};
  std::vector<float> scores = copy(kLogits);
  // Greedy: the most likely token that is not an EOS id (index 0, 1.5, once 3.0 and 2.25 are out).
  EXPECT_EQ(chooser.choose(scores, kHistory, 1), 0);
  expect_scores(scores, kMinNewAfter1);
  scores = copy(kLogits);
  EXPECT_EQ(chooser.choose(scores, kHistory, 3), 2);
  expect_scores(scores, kMinNewAfter3);
}

// All processors in generate()'s order on one row, as transformers' LogitsProcessorList.
TEST(TokenChooserTest, PipelineMatchesTransformers) {
  GenerationConfig gc;
  gc.do_sample = true;
  gc.repetition_penalty = 1.2f;
  gc.min_new_tokens = 2;
  gc.temperature = 0.8f;
  gc.top_k = 6;
  gc.top_p = 0.9f;
  std::vector<int64_t> history = kHistory;
  history.push_back(9);
  std::mt19937_64 rng(7);
  std::vector<float> scores = copy(kLogits);
  const int64_t token = TokenChooser{gc, kEos, rng}.choose(scores, history, 1);
  expect_scores(scores, kPipeline);
  EXPECT_FALSE(std::isinf(kPipeline[token])) << "sampled a masked token " << token;
}

TEST(SampleTest, EqualSeedsGiveEqualDraws) {
  std::mt19937_64 a(1234), b(1234), c(99);
  std::vector<int64_t> from_a, from_b, from_c;
  for (int i = 0; i < 200; ++i) {
    from_a.push_back(sample(kLogits, a));
    from_b.push_back(sample(kLogits, b));
    from_c.push_back(sample(kLogits, c));
  }
  EXPECT_EQ(from_a, from_b);
  EXPECT_NE(from_a, from_c);  // 200 draws over 10 tokens: equal by chance has negligible odds.
}

TEST(SampleTest, TopKOneIsArgmax) {
  std::mt19937_64 data_rng(5);
  std::normal_distribution<float> normal(0.f, 3.f);
  GenerationConfig gc = sampling_config();
  gc.top_k = 1;
  for (int trial = 0; trial < 50; ++trial) {
    std::vector<float> scores(37);
    for (float& v : scores) v = normal(data_rng);
    const int64_t want = std::max_element(scores.begin(), scores.end()) - scores.begin();
    std::mt19937_64 rng(static_cast<uint64_t>(trial));
    const TokenChooser chooser{gc, kEos, rng};
    EXPECT_EQ(chooser.choose(scores, {}, 0), want) << "trial " << trial;
  }
}

// Each token's frequency over many draws approaches softmax(logits / T) restricted to the top k;
// the tolerance is about 5 standard deviations of a frequency estimate (sqrt(p(1-p)/n) <= 1.1e-3).
TEST(SampleTest, FrequenciesApproachSoftmax) {
  constexpr int kDraws = 200000;
  constexpr float kTemperature = 1.3f;
  constexpr int kTopK = 6;
  GenerationConfig gc = sampling_config();
  gc.temperature = kTemperature;
  gc.top_k = kTopK;
  std::mt19937_64 rng(2024);
  const TokenChooser chooser{gc, kEos, rng};
  const size_t vocab = std::size(kLogits);
  std::vector<int64_t> counts(vocab, 0);
  for (int i = 0; i < kDraws; ++i) {
    std::vector<float> scores = copy(kLogits);
    ++counts[static_cast<size_t>(chooser.choose(scores, {}, 0))];
  }
  // The 6 largest of kLogits are 3, 2.25, 1.5, 1, 0.75 and 0.5: indices 2, 5, 0, 8, 3, 9.
  const std::vector<bool> kept = {true, false, true, true, false, true, false, false, true, true};
  double total = 0;
  for (size_t i = 0; i < vocab; ++i) {
    if (kept[i]) total += std::exp(static_cast<double>(kLogits[i]) / kTemperature);
  }
  for (size_t i = 0; i < vocab; ++i) {
    const double want =
        kept[i] ? std::exp(static_cast<double>(kLogits[i]) / kTemperature) / total : 0;
    EXPECT_NEAR(static_cast<double>(counts[i]) / kDraws, want, 5e-3) << "token " << i;
  }
}

// Sampling on each device that computes the logits: the cpu, and XLA's CPU plugin through PJRT
// where the tests installed it (the draws are the host's either way).
class SeededGenerateTest : public ::testing::TestWithParam<std::string> {
 protected:
  void SetUp() override {
    set_log_level(LogLevel::kWarn);
    if (!testing::device_present(GetParam())) GTEST_SKIP() << "no " << GetParam() << " device";
    model_ = AutoModelForCausalLM::from_pretrained(testing::fixture_dir("qwen3"),
                                                   {.dtype = DType::f32, .device_map = GetParam()});
  }
  std::optional<CausalLM> model_;
  const nlohmann::json& ref_ = testing::reference("qwen3");
  Tensor ids_ = testing::int_matrix(ref_["padded_input_ids"]);
  Tensor mask_ = testing::int_matrix(ref_["padded_attention_mask"]);
};

std::vector<int64_t> values(const Tensor& t) {
  return {t.data_as<int64_t>(), t.data_as<int64_t>() + t.numel()};
}

TEST_P(SeededGenerateTest, EqualSeedsGiveEqualIds) {
  GenerationConfig gc;
  gc.max_new_tokens = 16;
  gc.do_sample = true;
  gc.temperature = 2.f;  // flatter than the random model's logits, so the draws vary
  gc.top_k = 0;
  gc.seed = 42;
  const std::vector<int64_t> first = values(model_->generate(ids_, &mask_, gc));
  EXPECT_EQ(values(model_->generate(ids_, &mask_, gc)), first);
}

// With only the most likely token left, sampling is greedy decoding: transformers' greedy_16.
TEST_P(SeededGenerateTest, TopKOneSamplingEqualsTransformersGreedy) {
  GenerationConfig gc;
  gc.max_new_tokens = 16;
  gc.do_sample = true;
  gc.top_k = 1;
  gc.seed = 3;
  EXPECT_EQ(values(model_->generate(ids_, &mask_, gc)),
            values(testing::int_matrix(ref_["greedy_16"])));
}

INSTANTIATE_TEST_SUITE_P(Devices, SeededGenerateTest, ::testing::Values("cpu", "pjrt"),
                         [](const auto& info) { return info.param; });

}  // namespace
}  // namespace tfm::generation
