#include "tfm/training_args.h"

#include <cmath>

#include "tfm/error.h"

namespace tfm {
namespace {

void require(bool ok, const std::string& what) {
  if (!ok) throw Error("TrainingArguments: " + what);
}

}  // namespace

void TrainingArguments::validate() const {
  require(!output_dir.empty(), "output_dir must be set");
  require(per_device_train_batch_size > 0, "per_device_train_batch_size must be > 0");
  require(per_device_eval_batch_size > 0, "per_device_eval_batch_size must be > 0");
  require(gradient_accumulation_steps > 0, "gradient_accumulation_steps must be > 0");
  // A non-finite setting trains to NaN and saves it: refused, though torch's AdamW takes inf.
  require(std::isfinite(learning_rate) && learning_rate >= 0,
          "learning_rate must be a finite number >= 0, got " + std::to_string(learning_rate));
  require(std::isfinite(weight_decay) && weight_decay >= 0,
          "weight_decay must be a finite number >= 0, got " + std::to_string(weight_decay));
  require(adam_beta1 >= 0 && adam_beta1 < 1, "adam_beta1 must be in [0, 1)");
  require(adam_beta2 >= 0 && adam_beta2 < 1, "adam_beta2 must be in [0, 1)");
  require(std::isfinite(adam_epsilon) && adam_epsilon > 0,
          "adam_epsilon must be a finite number > 0");
  require(std::isfinite(max_grad_norm) && max_grad_norm >= 0,
          "max_grad_norm must be a finite number >= 0");
  require(max_steps > 0 || num_train_epochs > 0, "set num_train_epochs > 0 or max_steps > 0");
  require(warmup_steps >= 0, "warmup_steps must be >= 0");
  require(logging_steps > 0, "logging_steps must be > 0");
  require(eval_steps >= 0, "eval_steps must be >= 0");
  require(save_steps >= 0, "save_steps must be >= 0");
  require(save_total_limit >= 0, "save_total_limit must be >= 0");
  require(!overwrite_output_dir || resume_from_checkpoint.empty(),
          "overwrite_output_dir (start over) and resume_from_checkpoint (continue) contradict "
          "each other");
}

}  // namespace tfm
