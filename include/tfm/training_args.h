// transformers' TrainingArguments, with the same names and defaults where tfm supports the
// option. One difference: torch_compile defaults to true, because a compiled step per shape is
// what tfm is built for (false runs the same kernels eagerly, node by node).
#pragma once

#include <cstdint>
#include <string>

namespace tfm {

struct TrainingArguments {
  std::string output_dir = "trainer_output";
  bool bf16 = false;  // bf16 compute, f32 master weights and optimizer state
  bool torch_compile = true;
  int64_t per_device_train_batch_size = 8;
  int64_t per_device_eval_batch_size = 8;
  int64_t gradient_accumulation_steps = 1;
  double learning_rate = 5e-5;
  double weight_decay = 0.0;  // not applied to biases and norm weights
  double adam_beta1 = 0.9;
  double adam_beta2 = 0.999;
  double adam_epsilon = 1e-8;
  double max_grad_norm = 1.0;  // 0 turns clipping off
  double num_train_epochs = 3.0;
  int64_t max_steps = -1;  // > 0 overrides num_train_epochs
  int64_t warmup_steps = 0;
  std::string lr_scheduler_type = "linear";
  int64_t logging_steps = 500;
  int64_t eval_steps = 0;  // 0: evaluate (when there is an eval set) every logging_steps
  int64_t save_steps = 500;
  int64_t save_total_limit = 0;  // 0: keep every checkpoint
  uint64_t seed = 42;
  bool dataloader_drop_last = false;
  // A checkpoint-N folder, or "last" for the newest one in output_dir; empty starts afresh.
  std::string resume_from_checkpoint;
  // A run that does not resume refuses an output_dir holding an earlier run's checkpoints, state
  // or log (its checkpoints would be taken for this run's by `last` and by rotation); with this
  // set it removes them first, as run_clm.py's --overwrite_output_dir lets a run start over.
  bool overwrite_output_dir = false;
  bool disable_tqdm = false;  // no progress bar (logs still go to output_dir/logs.jsonl)

  // Throws tfm::Error naming the first argument out of range.
  void validate() const;
};

}  // namespace tfm
