#include "training/trainer.h"

#include <unistd.h>

#include <chrono>
#include <cmath>
#include <fstream>
#include <iostream>

#include "api/causal_lm_access.h"
#include "io/checkpoint.h"
#include "models/tensor_parallel.h"
#include "tfm/error.h"
#include "tfm/log.h"
#include "training/causal_lm_batch.h"
#include "training/grad_clip.h"
#include "training/progress.h"
#include "training/trainer_checkpoint.h"

namespace tfm::training {
namespace fs = std::filesystem;

namespace {

int64_t count_total_steps(const TrainingArguments& a, int64_t updates_per_epoch) {
  if (a.max_steps > 0) return a.max_steps;
  return static_cast<int64_t>(
      std::ceil(a.num_train_epochs * static_cast<double>(updates_per_epoch)));
}

TrainingArguments validated(TrainingArguments args) {
  args.validate();
  return args;
}

// Every token id of `rows` within the model's vocabulary, checked before the first step: a
// tokenizer that does not match the model is said as such, not found by the embedding.
void check_vocabulary(const TokenRows& rows, const char* which, int64_t vocab_size) {
  for (const int32_t id : rows.input_ids) {
    if (id < 0 || id >= vocab_size) {
      throw Error(std::string(which) + " data holds token id " + std::to_string(id) +
                  ", outside the model's vocab_size " + std::to_string(vocab_size) +
                  " (config.json): its tokenizer does not match the model");
    }
  }
}

}  // namespace

Trainer::Trainer(CausalLM& model, TrainingArguments args, TokenRows train,
                 std::optional<TokenRows> eval, std::string tokenizer_dir)
    : model_(model),
      args_(validated(std::move(args))),
      tokenizer_dir_(std::move(tokenizer_dir)),
      params_(CausalLMAccess::impl(model)),
      distributed_(CausalLMAccess::impl(model), params_),
      // A global batch holds every data-parallel rank's rows.
      train_(std::move(train),
             {.batch_size = args_.per_device_train_batch_size * distributed_.data_ranks(),
              .shuffle = true,
              .seed = args_.seed,
              .drop_last = args_.dataloader_drop_last}),
      eval_(std::move(eval)),
      updates_per_epoch_(
          std::max<int64_t>(1, train_.batches_per_epoch() / args_.gradient_accumulation_steps)),
      total_steps_(count_total_steps(args_, updates_per_epoch_)),
      schedule_(args_.lr_scheduler_type, args_.warmup_steps, total_steps_),
      optimizer_(params_.segments(), params_.size(),
                 {.lr = args_.learning_rate,
                  .beta1 = args_.adam_beta1,
                  .beta2 = args_.adam_beta2,
                  .eps = args_.adam_epsilon,
                  .weight_decay = args_.weight_decay},
                 params_.device(), CausalLMAccess::impl(model).partitioning()) {
  check_vocabulary(train_.rows(), "training", model.config().vocab_size);
  if (eval_) check_vocabulary(*eval_, "evaluation", model.config().vocab_size);
  // transformers' Trainer refuses an evaluation schedule without evaluation data.
  if (args_.eval_steps > 0 && !eval_) {
    throw Error("eval_steps " + std::to_string(args_.eval_steps) +
                " asks for evaluation, but there is no evaluation data (give --validation_file "
                "or --validation_split)");
  }
}

DType Trainer::autocast() const { return args_.bf16 ? DType::bf16 : DType::f32; }

double Trainer::epoch() const {
  return static_cast<double>(global_step_) / static_cast<double>(updates_per_epoch_);
}

double Trainer::train_window(int64_t* tokens) {
  std::vector<Batch> window;
  int64_t targets = 0;
  for (int64_t i = 0; i < args_.gradient_accumulation_steps; ++i) {
    window.push_back(train_.next());
    targets += count_targets(window.back().labels);
  }
  // The window's gradients add up to those of its mean loss per target, as transformers does
  // with num_items_in_batch.
  params_.zero_grads();
  double loss_sum = 0;
  for (const Batch& global : window) {
    const Batch b = distributed_.local_rows(global, args_.per_device_train_batch_size);
    const TrainInputs in = make_train_inputs(b.input_ids, b.attention_mask, b.labels, targets);
    loss_sum += CausalLMAccess::impl(model_).train_step_into(in, params_.grad_blocks(),
                                                             !args_.torch_compile, autocast());
    *tokens += global.input_ids.numel();
  }
  return distributed_.sum_over_data(loss_sum) / static_cast<double>(targets);
}

TrainOutput Trainer::train() {
  // Made before the first step, so an unusable folder is said now rather than at the first save.
  std::error_code error;
  fs::create_directories(args_.output_dir, error);
  if (error || !fs::is_directory(args_.output_dir)) {
    throw Error("output_dir '" + args_.output_dir + "' cannot be made a folder" +
                (error ? ": " + error.message() : ": a file is there"));
  }
  if (distributed_.writes_files()) remove_partial_checkpoints(args_.output_dir);
  if (args_.resume_from_checkpoint.empty()) start_over_in_output_dir();
  if (!args_.resume_from_checkpoint.empty()) {
    resume(resolve_checkpoint(args_.resume_from_checkpoint, args_.output_dir));
  }
  const int64_t first_step = global_step_;
  const int64_t eval_every = args_.eval_steps > 0 ? args_.eval_steps : args_.logging_steps;
  ProgressBar bar(first_step, total_steps_, !args_.disable_tqdm && distributed_.writes_files());
  const auto start = std::chrono::steady_clock::now();
  const auto seconds = [&] {
    return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  };
  TrainOutput result;
  double run_loss = 0, interval_loss = 0;
  int64_t interval_steps = 0, tokens = 0;
  while (global_step_ < total_steps_) {
    const double loss = train_window(&tokens);
    const double norm = distributed_.grad_norm(params_.grads());
    const float clip = args_.max_grad_norm > 0 ? clip_coefficient(norm, args_.max_grad_norm) : 1.f;
    const double lr = schedule_.lr(args_.learning_rate, global_step_);
    optimizer_.step(params_.values(), params_.grads(), lr, clip);
    params_.check_in_place(params_.values());
    ++global_step_;
    run_loss += loss;
    interval_loss += loss;
    ++interval_steps;
    const double tokens_per_s = static_cast<double>(tokens) / seconds();
    bar.update(global_step_, loss, tokens_per_s);
    if (global_step_ % args_.logging_steps == 0 || global_step_ == total_steps_) {
      log({{"loss", interval_loss / static_cast<double>(interval_steps)},
           {"grad_norm", norm},
           {"learning_rate", lr},
           {"tokens_per_s", tokens_per_s}});
      interval_loss = 0;
      interval_steps = 0;
    }
    if (eval_ && (global_step_ % eval_every == 0 || global_step_ == total_steps_)) {
      result.eval_loss = evaluate();
      log({{"eval_loss", *result.eval_loss}});
    }
    if (args_.save_steps > 0 && global_step_ % args_.save_steps == 0) save_checkpoint();
    if (on_step_) on_step_(global_step_);
  }
  bar.finish();
  save_final_model();
  result.global_step = global_step_;
  result.train_runtime_s = seconds();
  const int64_t steps_run = global_step_ - first_step;
  result.training_loss = steps_run > 0 ? run_loss / static_cast<double>(steps_run) : 0;
  result.tokens_per_s = static_cast<double>(tokens) / result.train_runtime_s;
  log({{"train_runtime", result.train_runtime_s},
       {"train_tokens_per_second", result.tokens_per_s},
       {"train_loss", result.training_loss}});
  return result;
}

double Trainer::evaluate() {
  TFM_CHECK(eval_.has_value(), "[train] evaluate() needs an eval dataset");
  const TokenRows& rows = *eval_;
  // Each FSDP rank evaluates its share of every global batch, as in training.
  const int64_t per_rank = args_.per_device_eval_batch_size;
  const int64_t batch = per_rank * distributed_.data_ranks(), cols = rows.max_length;
  double loss_sum = 0;
  int64_t targets = 0;
  for (int64_t first = 0; first < rows.num_rows(); first += batch) {
    // A short last batch is filled with rows that carry no target, so one graph serves it too.
    const int64_t n = std::min(batch, rows.num_rows() - first);
    std::vector<int32_t> ids(static_cast<size_t>(batch * cols), 0), mask(ids.size(), 1),
        labels(ids.size(), kIgnoreIndex);
    const auto copy = [&](const std::vector<int32_t>& src, std::vector<int32_t>& dst) {
      std::copy(src.begin() + first * cols, src.begin() + (first + n) * cols, dst.begin());
    };
    copy(rows.input_ids, ids);
    copy(rows.attention_mask, mask);
    copy(rows.labels, labels);
    const Batch global{.input_ids = Tensor::from_vector(ids, {batch, cols}),
                       .attention_mask = Tensor::from_vector(mask, {batch, cols}),
                       .labels = Tensor::from_vector(labels, {batch, cols})};
    // Counted over the global batch: every rank skips the same batches and runs the same steps.
    const int64_t count = count_targets(global.labels);
    if (count == 0) continue;
    const Batch b = distributed_.local_rows(global, per_rank);
    const TrainInputs in = make_train_inputs(b.input_ids, b.attention_mask, b.labels, count);
    loss_sum += CausalLMAccess::impl(model_).eval_step(in, !args_.torch_compile, autocast());
    targets += count;
  }
  if (targets == 0) throw Error("[train] the eval dataset has no target to compute a loss on");
  return distributed_.sum_over_data(loss_sum) / static_cast<double>(targets);
}

void Trainer::log(nlohmann::json entry) {
  entry["step"] = global_step_;
  entry["epoch"] = epoch();
  log_history_.push_back(entry);
  if (!distributed_.writes_files()) return;
  std::ofstream(fs::path(args_.output_dir) / "logs.jsonl", std::ios::app) << entry.dump() << "\n";
  if (args_.disable_tqdm || ::isatty(2) == 0) std::cout << entry.dump() << std::endl;
}

void Trainer::save_model(const fs::path& dir) {
  model_.save_pretrained(dir.string(), DType::f32);  // every rank: the slices are gathered
  if (!distributed_.writes_files()) return;
  if (!tokenizer_dir_.empty()) copy_tokenizer_files(tokenizer_dir_, dir);
  const DistributedConfig& layout = CausalLMAccess::impl(model_).distributed();
  write_trainer_state(dir, {global_step_, epoch(), train_.state().to_json(), log_history_,
                            layout.tp_size, layout.fsdp_size});
}

std::string Trainer::optimizer_file() const {
  // Each rank's optimizer state is that of its own shard.
  if (!distributed_.active()) return "optimizer.safetensors";
  return "optimizer-rank" + std::to_string(distributed_.world_rank()) + ".safetensors";
}

void Trainer::save_final_model() {
  try {
    save_model(args_.output_dir);
    return;
  } catch (const Error& e) {
    // The last step is kept where it can be: a checkpoint of it (unless one is there), which a
    // failure of the final files alone (a folder in the way, a file that cannot be replaced)
    // leaves room for. Across processes every rank would have to take part: said, not tried.
    const std::string name = "checkpoint-" + std::to_string(global_step_);
    std::string kept;
    if (fs::exists(fs::path(args_.output_dir) / name)) {
      kept = name + ", saved at this step, holds the run's last state";
    } else if (distributed_.active()) {
      kept = "the newest checkpoint in it is the last state kept";
    } else {
      try {
        save_checkpoint();
        kept = "the run's last state is saved as " + name + " instead";
      } catch (const Error& again) {
        kept = "saving the last state as " + name + " failed too (" + again.what() +
               "): the newest checkpoint in it, if any, is the last state kept";
      }
    }
    throw Error(std::string("the final save into output_dir '") + args_.output_dir +
                "' failed: " + e.what() + "; " + kept +
                " (--resume_from_checkpoint last continues from the newest)");
  }
}

void Trainer::save_checkpoint() {
  const std::string name = "checkpoint-" + std::to_string(global_step_);
  const fs::path dir = fs::path(args_.output_dir) / name;
  const fs::path partial = fs::path(args_.output_dir) / partial_name(name);
  if (distributed_.writes_files()) {
    fs::remove_all(partial);
    fs::create_directories(partial);
  }
  distributed_.barrier();  // the folder is there, empty, before any rank writes into it
  save_model(partial);
  optimizer_.save(partial / optimizer_file());
  distributed_.barrier();  // every rank's files are written
  if (!distributed_.writes_files()) return;
  place_checkpoint(partial, dir);
  rotate_checkpoints(args_.output_dir, args_.save_total_limit, dir);
}

void Trainer::start_over_in_output_dir() {
  const std::vector<fs::path> earlier = earlier_run_files(args_.output_dir);
  if (earlier.empty()) return;
  std::string names;
  for (const fs::path& p : earlier) names += (names.empty() ? "" : ", ") + p.filename().string();
  if (!args_.overwrite_output_dir) {
    throw Error("output_dir '" + args_.output_dir + "' holds an earlier training run (" + names +
                "): continue it with resume_from_checkpoint=last (--resume_from_checkpoint "
                "last), or start over with overwrite_output_dir (--overwrite_output_dir, which "
                "removes those), or choose another output_dir");
  }
  if (!distributed_.writes_files()) return;
  for (const fs::path& p : earlier) fs::remove_all(p);
  log_info("overwrite_output_dir: removed " + names + " from '" + args_.output_dir + "'");
}

void Trainer::resume(const fs::path& dir) {
  const TrainerState state = read_trainer_state(dir);
  CausalLMImpl& model = CausalLMAccess::impl(model_);
  const DistributedConfig& layout = model.distributed();
  if (state.tp_size != layout.tp_size || state.fsdp_size != layout.fsdp_size) {
    throw Error("cannot resume from '" + dir.string() + "': it was saved with tp_size=" +
                std::to_string(state.tp_size) + " fsdp_size=" + std::to_string(state.fsdp_size) +
                " and this run has tp_size=" + std::to_string(layout.tp_size) +
                " fsdp_size=" + std::to_string(layout.fsdp_size) +
                "; each rank's optimizer state is its own shard, so resume with the same layout");
  }
  const Checkpoint weights = Checkpoint::open(dir);
  // The model's weights are the flat master buffer's blocks: written in place, on its device.
  model.for_each_weight([&](const std::string& name, Tensor& weight, const Shape& whole) {
    const Tensor saved = weights.tensor(name);
    if (saved.shape() != whole || saved.dtype() != DType::f32) {
      throw Error("cannot resume from '" + dir.string() + "': '" + name + "' is " +
                  shape_str(saved.shape()) + " " + std::string(dtype_name(saved.dtype())) +
                  ", the model needs " + shape_str(whole) + " f32");
    }
    // Under a DistributedConfig each rank takes its slice of the gathered checkpoint.
    weight.copy_from(models::rank_slice(name, saved, model.config(), model.parallelism()));
  });
  optimizer_.load(dir / optimizer_file());
  train_.restore(DataLoaderState::from_json(state.data_loader));
  global_step_ = state.global_step;
  log_history_ = state.log_history;
}

}  // namespace tfm::training
