#include "training/lr_schedule.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <string>

#include "tfm/error.h"
#include "training/optimizer_goldens.h"

namespace tfm::training {
namespace {

using testing::AllOf;
using testing::HasSubstr;
using testing::ThrowsMessage;
using testing_training::optimizer_goldens;

// Each schedule's multipliers from transformers.get_scheduler, past num_training_steps too (where
// "cosine" rises again). Same operations on the same doubles: equal to within rounding of cos.
TEST(LrScheduleTest, MatchesTransformersGetScheduler) {
  for (const nlohmann::json& golden : optimizer_goldens()["schedules"]) {
    const std::string name = golden["name"];
    const LrSchedule schedule(name, golden["warmup"], golden["total"]);
    EXPECT_EQ(schedule.name(), name);
    const nlohmann::json& multipliers = golden["multipliers"];
    for (size_t step = 0; step < multipliers.size(); ++step) {
      EXPECT_DOUBLE_EQ(schedule.multiplier(static_cast<int64_t>(step)),
                       multipliers[step].get<double>())
          << name << " warmup " << golden["warmup"] << " total " << golden["total"] << " step "
          << step;
    }
  }
}

TEST(LrScheduleTest, RateIsBaseTimesMultiplier) {
  const LrSchedule schedule("linear", 2, 10);
  EXPECT_DOUBLE_EQ(schedule.lr(1e-3, 1), 0.5e-3);
  EXPECT_DOUBLE_EQ(schedule.lr(1e-3, 10), 0.0);
}

TEST(LrScheduleTest, UnknownNameListsTheAcceptedOnes) {
  EXPECT_THAT(
      [] { LrSchedule("cosine_with_restarts", 0, 10); },
      ThrowsMessage<Error>(AllOf(HasSubstr("'cosine_with_restarts'"),
                                 HasSubstr("constant, constant_with_warmup, linear, cosine"))));
}

TEST(LrScheduleTest, RejectsNegativeStepCounts) {
  EXPECT_THAT([] { LrSchedule("linear", -1, 10); },
              ThrowsMessage<Error>(HasSubstr("negative step count")));
  EXPECT_THAT([] { LrSchedule("cosine", 0, -5); },
              ThrowsMessage<Error>(HasSubstr("negative step count")));
}

}  // namespace
}  // namespace tfm::training
