// Learning-rate schedules as transformers.get_scheduler builds them: a multiplier of the base rate
// for each optimizer step, the LambdaLR factor the Trainer applies.
#pragma once

#include <cstdint>
#include <string_view>

namespace tfm::training {

class LrSchedule {
 public:
  // `name` is a transformers lr_scheduler_type: "constant", "constant_with_warmup", "linear"
  // (warmup, then linear decay to 0 at num_training_steps) or "cosine" (warmup, then half a cosine
  // wave to 0). Other names, or negative step counts, throw tfm::Error.
  LrSchedule(std::string_view name, int64_t num_warmup_steps, int64_t num_training_steps);

  // The factor for the update made after `step` updates have been taken (LambdaLR's last_epoch):
  // step 0 is the first update, so with warmup it runs at rate 0, as in the Trainer.
  double multiplier(int64_t step) const;
  double lr(double base_lr, int64_t step) const { return base_lr * multiplier(step); }

  std::string_view name() const;
  int64_t num_warmup_steps() const { return warmup_; }
  int64_t num_training_steps() const { return total_; }

 private:
  enum class Kind { kConstant, kConstantWithWarmup, kLinear, kCosine };

  Kind kind_;
  int64_t warmup_;
  int64_t total_;
};

}  // namespace tfm::training
