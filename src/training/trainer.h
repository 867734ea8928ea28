// transformers' Trainer for causal LMs: the loop of micro-batches, gradient accumulation,
// clipping, AdamW with a learning-rate schedule, logging, evaluation, checkpoints and resume.
// Each micro-batch runs as one compiled graph (forward, loss, backward); the optimizer runs
// eagerly on the flat f32 master weights. Under a DistributedConfig (the model's) each FSDP rank
// trains on its share of every batch and each tensor-parallel rank updates its own slices.
#pragma once

#include <functional>
#include <optional>
#include <string>

#include "tfm/model.h"
#include "tfm/training_args.h"
#include "training/adamw.h"
#include "training/dataset_loader.h"
#include "training/distributed_training.h"
#include "training/flat_parameters.h"
#include "training/lr_schedule.h"

namespace tfm::training {

struct TrainOutput {
  int64_t global_step = 0;
  double training_loss = 0;  // mean of the step losses of this run
  double train_runtime_s = 0;
  double tokens_per_s = 0;
  std::optional<double> eval_loss;
};

class Trainer {
 public:
  // `tokenizer_dir`, when set, is copied into every checkpoint and the final model folder.
  Trainer(CausalLM& model, TrainingArguments args, TokenRows train,
          std::optional<TokenRows> eval = std::nullopt, std::string tokenizer_dir = {});

  TrainOutput train();
  // Called after each optimizer step (its logging, evaluation and checkpoint done) with the step
  // number, as transformers' TrainerCallback.on_step_end; an exception it throws ends the run
  // there, the checkpoints already written whole (the Python package stops on Ctrl-C so).
  void set_step_callback(std::function<void(int64_t step)> on_step) {
    on_step_ = std::move(on_step);
  }
  // Mean loss per target over the eval rows.
  double evaluate();

  int64_t total_steps() const { return total_steps_; }

 private:
  double train_window(int64_t* tokens);  // one optimizer step's micro-batches; returns the loss
  void log(nlohmann::json entry);
  void save_checkpoint();
  // save_model into output_dir; when that fails, the last step kept as a checkpoint where it can
  // be, and the error says what is kept.
  void save_final_model();
  void resume(const std::filesystem::path& checkpoint);
  // A run that does not resume: refuses an earlier run's files in output_dir, or removes them
  // under overwrite_output_dir.
  void start_over_in_output_dir();
  std::string optimizer_file() const;  // within a checkpoint folder
  void save_model(const std::filesystem::path& dir);
  double epoch() const;
  DType autocast() const;

  CausalLM& model_;
  TrainingArguments args_;
  std::string tokenizer_dir_;
  FlatParameters params_;
  DistributedTraining distributed_;
  DataLoader train_;
  std::optional<TokenRows> eval_;
  int64_t updates_per_epoch_;
  int64_t total_steps_;
  LrSchedule schedule_;
  AdamW optimizer_;
  int64_t global_step_ = 0;
  std::function<void(int64_t)> on_step_;
  nlohmann::json log_history_ = nlohmann::json::array();
};

}  // namespace tfm::training
