#include "training/adamw.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <omp.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <string>
#include <vector>

#include "io/io_test_util.h"
#include "io/safetensors.h"
#include "support/devices.h"
#include "tfm/error.h"
#include "training/grad_clip.h"
#include "training/lr_schedule.h"
#include "training/optimizer_goldens.h"

namespace tfm::training {
namespace {

using ::testing::AllOf;
using ::testing::HasSubstr;
using ::testing::ThrowsMessage;
using testing_io::TempDir;
using testing_training::floats;
using testing_training::optimizer_goldens;

const nlohmann::json& adamw_goldens() { return optimizer_goldens()["adamw"]; }

// The same f32 operations as torch, except that torch's vectorized sqrt is up to ~0.75 ulp off
// where ours is correctly rounded: about 3% of elements differ by an ulp or so. An element passing
// near zero keeps only the precision of the lr-sized terms that cancelled there, so the tolerance
// is relative to at least the learning rate.
constexpr double kRelTol = 1e-6;

void expect_close(const std::vector<float>& actual, const nlohmann::json& expected,
                  const std::string& what) {
  const std::vector<float> want = floats(expected);
  ASSERT_EQ(actual.size(), want.size()) << what;
  const double scale_floor = adamw_goldens()["lr"];
  int mismatches = 0;
  for (size_t i = 0; i < want.size(); ++i) {
    const double tolerance = kRelTol * std::max<double>(std::abs(want[i]), scale_floor);
    if (std::abs(double{actual[i]} - want[i]) > tolerance && mismatches++ < 5) {
      ADD_FAILURE() << what << ", element " << i << ": " << actual[i] << " vs torch " << want[i];
    }
  }
  EXPECT_EQ(mismatches, 0) << what;
}

// The golden layout: one flat buffer of the three tensors in order, the middle one without decay.
std::vector<ParamSegment> golden_segments() {
  std::vector<ParamSegment> segments;
  int64_t offset = 0;
  const nlohmann::json& g = adamw_goldens();
  for (size_t i = 0; i < g["shapes"].size(); ++i) {
    int64_t numel = 1;
    for (int64_t d : g["shapes"][i]) numel *= d;
    segments.push_back({offset, numel, g["decay"][i].get<bool>()});
    offset += numel;
  }
  return segments;
}

AdamWOptions golden_options() {
  const nlohmann::json& g = adamw_goldens();
  return {.lr = g["lr"],
          .beta1 = g["beta1"],
          .beta2 = g["beta2"],
          .eps = g["eps"],
          .weight_decay = g["weight_decay"]};
}

AdamW golden_optimizer() {
  const std::vector<ParamSegment> segments = golden_segments();
  return AdamW(segments, segments.back().offset + segments.back().numel, golden_options());
}

LrSchedule golden_schedule() {
  const nlohmann::json& s = adamw_goldens()["scheduled"];
  return LrSchedule(s["name"].get<std::string>(), s["warmup"], s["total"]);
}

// How a step clips: not at all, the gradients scaled in place first (as torch's clip_grad_norm_
// does: grads.mul_(coef)), or by the update reading them times the coefficient (as the Trainer
// does).
enum class Clip { kNone, kInPlace, kInStep };

// One training step as the golden cases take it: optional clipping, then the update at the rate
// the schedule gives for the steps already taken. Returns the norm clipping saw (or 0).
double golden_step(AdamW& opt, std::vector<float>& params, int step, Clip clip, bool scheduled) {
  std::vector<float> grads = floats(adamw_goldens()["grads"][step]);
  const double max_norm = adamw_goldens()["max_norm"];
  double norm = 0.0;
  float grad_scale = 1.f;
  if (clip != Clip::kNone) norm = grad_norm(grads);
  if (clip == Clip::kInPlace) {
    for (float& g : grads) g *= clip_coefficient(norm, max_norm);
  }
  if (clip == Clip::kInStep) grad_scale = clip_coefficient(norm, max_norm);
  const double base = opt.options().lr;
  opt.step(params, grads, scheduled ? golden_schedule().lr(base, opt.steps_taken()) : base,
           grad_scale);
  return norm;
}

TEST(AdamWTest, MatchesTorchAdamW) {
  const nlohmann::json& expected = adamw_goldens()["cases"]["plain"];
  AdamW opt = golden_optimizer();
  std::vector<float> params = floats(adamw_goldens()["init"]);
  for (int step = 0; step < 5; ++step) {
    golden_step(opt, params, step, Clip::kNone, false);
    expect_close(params, expected["params"][step], "params after step " + std::to_string(step));
  }
  EXPECT_EQ(opt.steps_taken(), 5);
  expect_close(opt.exp_avg(), expected["exp_avg"], "exp_avg");
  expect_close(opt.exp_avg_sq(), expected["exp_avg_sq"], "exp_avg_sq");
}

// Steps 1 and 3 have gradient norms far above 1 and are scaled; the others pass unchanged. The
// gradients scaled in place or as the update reads them: the same parameters, bit for bit.
TEST(AdamWTest, MatchesTorchWithClipGradNorm) {
  const nlohmann::json& expected = adamw_goldens()["cases"]["clipped"];
  AdamW in_place = golden_optimizer(), in_step = golden_optimizer();
  std::vector<float> params = floats(adamw_goldens()["init"]);
  std::vector<float> params_in_step = params;
  for (int step = 0; step < 5; ++step) {
    const double norm = golden_step(in_place, params, step, Clip::kInPlace, false);
    const double want = expected["norms"][step];
    EXPECT_NEAR(norm, want, kRelTol * want) << "step " << step;
    expect_close(params, expected["params"][step], "params after step " + std::to_string(step));
    EXPECT_EQ(golden_step(in_step, params_in_step, step, Clip::kInStep, false), norm);
    EXPECT_EQ(params_in_step, params) << "step " << step;
  }
  EXPECT_EQ(in_step.exp_avg(), in_place.exp_avg());
  EXPECT_EQ(in_step.exp_avg_sq(), in_place.exp_avg_sq());
}

// torch's coefficient: max_norm / (norm + 1e-6) in f32 below 1, else 1; NaN and infinite norms
// give NaN and 0, as torch's clamp-and-multiply scales by. The values torch 2.15 gives for
// clamp(max_norm / (torch.tensor(norm) + 1e-6), max=1.0): its reciprocal-then-multiply differs
// from a division in the last bit at these two.
TEST(AdamWTest, ClipCoefficient) {
  EXPECT_EQ(clip_coefficient(4.0, 1.0), 1.0f / (4.0f + 1e-6f));
  EXPECT_EQ(clip_coefficient(0.5, 1.0), 1.0f);
  EXPECT_EQ(clip_coefficient(1.0, 1.0), 1.0f / (1.0f + 1e-6f));
  EXPECT_EQ(clip_coefficient(7.1, 0.3), 0.0422535203397274f);
  EXPECT_EQ(clip_coefficient(2.9, 0.7), 0.24137923121452332f);
  EXPECT_TRUE(std::isnan(clip_coefficient(std::nan(""), 1.0)));
  EXPECT_EQ(clip_coefficient(std::numeric_limits<double>::infinity(), 1.0), 0.0f);
}

// The rate changes every step (0 first, during warmup), and weight decay scales with it.
TEST(AdamWTest, MatchesTorchUnderTransformersLinearSchedule) {
  const nlohmann::json& expected = adamw_goldens()["cases"]["scheduled"];
  AdamW opt = golden_optimizer();
  const LrSchedule schedule = golden_schedule();
  std::vector<float> params = floats(adamw_goldens()["init"]);
  for (int step = 0; step < 5; ++step) {
    EXPECT_DOUBLE_EQ(schedule.lr(opt.options().lr, step), expected["lrs"][step].get<double>());
    golden_step(opt, params, step, Clip::kNone, true);
    expect_close(params, expected["params"][step], "params after step " + std::to_string(step));
  }
}

// The optimizer and clipping's norm as graphs compiled for an accelerator (where one is present:
// cuda with a GPU, pjrt with the test plugin), the flat buffers on it: torch's parameters after
// each step, clipped as the Trainer clips (the coefficient read by the update), and torch's
// moments after the last.
class AdamWOnDevice : public ::testing::TestWithParam<std::string> {};

TEST_P(AdamWOnDevice, MatchesTorchWithClipping) {
  const std::string kind = GetParam();
  if (!tfm::testing::device_present(kind)) GTEST_SKIP() << "no " << kind << " device present";
  const Device device{kind, 0};
  const nlohmann::json& expected = adamw_goldens()["cases"]["clipped"];
  const std::vector<ParamSegment> segments = golden_segments();
  const int64_t total = segments.back().offset + segments.back().numel;
  AdamW opt(segments, total, golden_options(), device);
  const GradSquares squares(segments, total, device);
  const std::vector<float> init = floats(adamw_goldens()["init"]);
  Tensor params = Tensor::from_vector(init, {total}).to(device);
  for (int step = 0; step < 5; ++step) {
    const Tensor grads =
        Tensor::from_vector(floats(adamw_goldens()["grads"][step]), {total}).to(device);
    const double norm = std::sqrt(static_cast<double>(squares(grads)));
    const double want = expected["norms"][step];
    EXPECT_NEAR(norm, want, kRelTol * want) << "step " << step;
    opt.step(params, grads, opt.options().lr, clip_coefficient(norm, adamw_goldens()["max_norm"]));
    expect_close(params.to_f32_vector(), expected["params"][step],
                 kind + ": params after step " + std::to_string(step));
  }
  expect_close(opt.exp_avg(), expected["exp_avg"], kind + ": exp_avg");
  expect_close(opt.exp_avg_sq(), expected["exp_avg_sq"], kind + ": exp_avg_sq");
}

INSTANTIATE_TEST_SUITE_P(Accelerators, AdamWOnDevice, ::testing::Values("cuda", "pjrt"),
                         [](const auto& info) { return info.param; });

TEST(AdamWTest, ClippingBelowMaxNormLeavesGradientsUnchanged) {
  const std::vector<float> grads = floats(adamw_goldens()["grads"][0]);  // norm ~0.17
  EXPECT_EQ(clip_coefficient(grad_norm(grads), 1.0), 1.0f);
}

// Chunks of the norm are summed in a fixed order, so a buffer spanning many chunks still gives
// the exact norm of a known vector: 2^20 elements of 0.5 have norm 512.
TEST(AdamWTest, GradNormOverManyChunks) {
  const std::vector<float> grads(size_t{1} << 20, 0.5f);
  EXPECT_EQ(grad_norm(grads), 512.0);
}

// Resumed or re-run steps must clip identically whatever the thread count.
TEST(AdamWTest, GradNormIsTheSameForAnyThreadCount) {
  std::vector<float> grads(size_t{1} << 18);
  for (size_t i = 0; i < grads.size(); ++i) grads[i] = std::sin(static_cast<float>(i)) * 1e-3f;
  const int threads = omp_get_max_threads();
  omp_set_num_threads(1);
  const double one = grad_norm(grads);
  omp_set_num_threads(3);
  const double three = grad_norm(grads);
  omp_set_num_threads(threads);
  EXPECT_EQ(one, three);
}

// Elements outside every segment belong to frozen parameters: untouched, their state zero.
TEST(AdamWTest, ElementsOutsideSegmentsStayFrozen) {
  AdamW opt({{6, 2, true}, {1, 3, false}}, 10, {.lr = 0.1, .weight_decay = 0.5});
  std::vector<float> params(10, 1.0f);
  const std::vector<float> grads(10, 1.0f);
  opt.step(params, grads);
  for (int i : {0, 4, 5, 8, 9}) {
    EXPECT_EQ(params[i], 1.0f) << i;
    EXPECT_EQ(opt.exp_avg()[i], 0.0f) << i;
  }
  // First step: m_hat / sqrt(v_hat) = 1, so the update is lr; decay takes lr * wd first.
  for (int i : {1, 2, 3}) EXPECT_FLOAT_EQ(params[i], 1.0f - 0.1f) << i;
  for (int i : {6, 7}) EXPECT_FLOAT_EQ(params[i], 1.0f * (1 - 0.05f) - 0.1f) << i;
}

TEST(AdamWTest, RejectsBadSegmentsOptionsAndSizes) {
  EXPECT_THAT(
      [] {
        AdamW({{0, 5, true}, {4, 2, true}}, 10);
      },
      ThrowsMessage<Error>(HasSubstr("overlaps")));
  EXPECT_THAT(
      [] {
        AdamW({{8, 5, true}}, 10);
      },
      ThrowsMessage<Error>(HasSubstr("outside the 10 parameters")));
  EXPECT_THAT(
      [] {
        AdamW({{0, 10, true}}, 10, {.beta2 = 1.0});
      },
      ThrowsMessage<Error>(HasSubstr("beta2")));
  AdamW opt({{0, 10, true}}, 10);
  std::vector<float> params(10), grads(9);
  EXPECT_THAT([&] { opt.step(params, grads); },
              ThrowsMessage<Error>(AllOf(HasSubstr("9 gradients"), HasSubstr("expected 10"))));
  EXPECT_EQ(opt.steps_taken(), 0);
}

// The resume contract: 2 steps, save, load into a fresh optimizer, 3 more steps gives the bits of
// 5 uninterrupted steps, with clipping and a schedule that reads the restored step count.
TEST(AdamWTest, SaveAndLoadResumesBitForBit) {
  TempDir dir;
  const std::vector<float> init = floats(adamw_goldens()["init"]);
  AdamW straight = golden_optimizer();
  std::vector<float> straight_params = init;
  for (int step = 0; step < 5; ++step)
    golden_step(straight, straight_params, step, Clip::kInStep, true);

  std::vector<float> params = init;
  {
    AdamW first = golden_optimizer();
    for (int step = 0; step < 2; ++step) golden_step(first, params, step, Clip::kInStep, true);
    first.save(dir / "optimizer.safetensors");
  }
  AdamW resumed = golden_optimizer();
  resumed.load(dir / "optimizer.safetensors");
  EXPECT_EQ(resumed.steps_taken(), 2);
  for (int step = 2; step < 5; ++step) golden_step(resumed, params, step, Clip::kInStep, true);

  EXPECT_EQ(resumed.steps_taken(), 5);
  EXPECT_EQ(std::memcmp(params.data(), straight_params.data(), params.size() * 4), 0);
  EXPECT_EQ(resumed.exp_avg(), straight.exp_avg());
  EXPECT_EQ(resumed.exp_avg_sq(), straight.exp_avg_sq());
}

TEST(AdamWTest, LoadRejectsStateOfAnotherSize) {
  TempDir dir;
  const std::filesystem::path file = dir / "small.safetensors";
  AdamW({{0, 10, true}}, 10).save(file);
  AdamW opt = golden_optimizer();
  EXPECT_THAT([&] { opt.load(file); },
              ThrowsMessage<Error>(AllOf(HasSubstr(file.string()), HasSubstr("'exp_avg'"),
                                         HasSubstr("F32 [10]"), HasSubstr("expected F32 [293]"))));
  EXPECT_EQ(opt.steps_taken(), 0);
}

TEST(AdamWTest, LoadRejectsMissingTensorsAndFiles) {
  TempDir dir;
  const std::filesystem::path file = dir / "partial.safetensors";
  save_safetensors(file, {{"exp_avg", Tensor::zeros({10}, f32)}});
  AdamW opt({{0, 10, true}}, 10);
  EXPECT_THAT([&] { opt.load(file); },
              ThrowsMessage<Error>(
                  AllOf(HasSubstr(file.string()), HasSubstr("tensor 'exp_avg_sq' is missing"))));
  EXPECT_THAT([&] { opt.load(dir / "absent.safetensors"); },
              ThrowsMessage<Error>(HasSubstr("absent.safetensors")));
}

}  // namespace
}  // namespace tfm::training
