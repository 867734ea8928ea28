// tfm train --model PATH_OR_CONFIG --data FILE [TrainingArguments as flags]: transformers'
// run_clm.py in one command. Flags take the TrainingArguments names (--learning_rate, and the
// same with dashes).
#include <filesystem>
#include <iostream>
#include <memory>

#include "cli/commands.h"
#include "cli/device_options.h"
#include "cli/distributed_options.h"
#include "io/hub.h"
#include "tfm/error.h"
#include "tfm/log.h"
#include "tfm/model.h"
#include "tfm/tokenizer.h"
#include "training/dataset.h"
#include "training/dataset_split.h"
#include "training/trainer.h"

namespace tfm::cli {
namespace {
namespace fs = std::filesystem;

struct Options {
  std::string model, data, validation_file, tokenizer, sample_by = "line";
  DeviceOptions device;
  double validation_split = 0;
  int64_t max_length = 1024;
  bool padding = false, append_eos = false, disable_fusion = false;
  uint64_t init_seed = 0;
  TrainingArguments args;
  DistributedConfig distributed;
};

training::SampleBy parse_sample_by(const std::string& name) {
  if (name == "line") return training::SampleBy::kLine;
  if (name == "paragraph") return training::SampleBy::kParagraph;
  if (name == "document") return training::SampleBy::kDocument;
  throw Error("train: --sample_by '" + name + "' is not one of line, paragraph, document");
}

bool is_config_file(const std::string& model) {
  return fs::path(model).extension() == ".json" && fs::is_regular_file(model);
}

std::string tokenizer_dir(const Options& o) {
  if (!o.tokenizer.empty()) return o.tokenizer;
  const fs::path dir =
      is_config_file(o.model) ? fs::path(o.model).parent_path() : resolve_pretrained(o.model);
  return fs::exists(dir / "tokenizer.json") ? dir.string() : std::string();
}

void run(Options& o) {
  if (!prints_results()) set_log_level(LogLevel::kWarn);
  open_device_plugins(o.device);
  LoadOptions load{.dtype = DType::f32,
                   .device_map = o.device.device,
                   .distributed = o.distributed,
                   .fuse = !o.disable_fusion};
  CausalLM model = is_config_file(o.model)
                       ? AutoModelForCausalLM::from_config(o.model, load, o.init_seed)
                       : AutoModelForCausalLM::from_pretrained(o.model, load);
  const std::string tok_dir = tokenizer_dir(o);
  std::optional<Tokenizer> tokenizer;
  if (!tok_dir.empty()) tokenizer = AutoTokenizer::from_pretrained(tok_dir);

  training::DatasetOptions data;
  data.max_length = o.max_length;
  data.shaping = o.padding ? training::RowShaping::kPadded : training::RowShaping::kPacked;
  data.text_file.sample_by = parse_sample_by(o.sample_by);
  data.jsonl.vocab_size = model.config().vocab_size;
  data.tokenize.append_eos = o.append_eos;
  const auto read = [&](const std::string& path) {
    return training::read_dataset(path, data.text_file, data.jsonl);
  };
  training::Examples train_examples = read(o.data);
  std::optional<training::Examples> eval_examples;
  if (!o.validation_file.empty()) {
    eval_examples = read(o.validation_file);
  } else if (o.validation_split > 0) {
    training::DatasetSplit split =
        data.text_file.sample_by == training::SampleBy::kDocument
            ? training::split_document(train_examples, o.validation_split)
            : training::split_examples(train_examples, o.validation_split);
    train_examples = std::move(split.train);
    eval_examples = std::move(split.validation);
  }
  const Tokenizer* tok = tokenizer ? &*tokenizer : nullptr;
  training::TokenRows train_rows = training::make_rows(std::move(train_examples), tok, data);
  std::optional<training::TokenRows> eval_rows;
  if (eval_examples) eval_rows = training::make_rows(std::move(*eval_examples), tok, data);
  log_info("train: " + std::to_string(train_rows.num_rows()) + " rows of " +
           std::to_string(o.max_length) + " tokens" +
           (eval_rows ? ", eval: " + std::to_string(eval_rows->num_rows()) + " rows" : ""));

  training::Trainer trainer(model, o.args, std::move(train_rows), std::move(eval_rows), tok_dir);
  const training::TrainOutput out = trainer.train();
  if (!prints_results()) return;
  std::fprintf(stderr, "steps: %ld, train loss: %.4f, %s%.0f tokens/s, %.1f s; model saved to %s\n",
               static_cast<long>(out.global_step), out.training_loss,
               out.eval_loss ? ("eval loss: " + std::to_string(*out.eval_loss) + ", ").c_str() : "",
               out.tokens_per_s, out.train_runtime_s, o.args.output_dir.c_str());
}

// "--name,--name-with-dashes": the TrainingArguments spelling and the CLI's usual one.
std::string both(const std::string& name) {
  std::string dashed = name;
  for (char& c : dashed) c = c == '_' ? '-' : c;
  return "--" + name + (dashed == name ? "" : ",--" + dashed);
}

void add_train_command(CLI::App& app) {
  auto o = std::make_shared<Options>();
  TrainingArguments& a = o->args;
  CLI::App* cmd = app.add_subcommand("train", "Train or fine-tune a causal language model");
  cmd->add_option("--model", o->model,
                  "Model folder, Org/Name in the Hugging Face cache, or a config.json to start "
                  "from fresh weights")
      ->required();
  cmd->add_option(both("data"), o->data, "Training data: .txt, or .jsonl with text or input_ids")
      ->required();
  cmd->add_option(both("validation_file"), o->validation_file, "Evaluation data");
  cmd->add_option(both("validation_split"), o->validation_split,
                  "Fraction of --data held out for evaluation, taken from its end")
      ->check(CLI::Validator(
          [](std::string& text) -> std::string {
            double fraction = 0;
            try {
              fraction = std::stod(text);
            } catch (const std::exception&) {
              return "'" + text + "' is not a number";
            }
            return fraction >= 0 && fraction < 1 ? "" : "must be in [0, 1), got " + text;
          },
          "in [0, 1)"));
  cmd->add_option(both("tokenizer"), o->tokenizer, "Tokenizer folder (default: the model's)");
  cmd->add_option(both("max_length") + ",--block_size", o->max_length,
                  "Tokens per row (one compiled graph serves the run)")
      ->capture_default_str();
  cmd->add_flag(both("padding"), o->padding,
                "One example per row, padded to max_length (default: packed, as run_clm)");
  cmd->add_option(both("sample_by"), o->sample_by, "Text files: line, paragraph or document")
      ->capture_default_str();
  cmd->add_flag(both("append_eos"), o->append_eos, "End every example with the EOS token");
  add_device_options(cmd, o->device);
  cmd->add_option(both("init_seed"), o->init_seed, "Seed of the fresh weights (config start)");
  cmd->add_flag(both("disable_fusion"), o->disable_fusion, "Compiled steps of basic ops, unfused");
  add_distributed_options(cmd, o->distributed);

  cmd->add_option(both("output_dir"), a.output_dir)->capture_default_str();
  cmd->add_flag(both("bf16"), a.bf16, "bf16 compute, f32 master weights");
  cmd->add_option(both("torch_compile"), a.torch_compile, "Compiled step (true) or eager")
      ->capture_default_str();
  cmd->add_option(both("per_device_train_batch_size"), a.per_device_train_batch_size)
      ->capture_default_str();
  cmd->add_option(both("per_device_eval_batch_size"), a.per_device_eval_batch_size)
      ->capture_default_str();
  cmd->add_option(both("gradient_accumulation_steps"), a.gradient_accumulation_steps)
      ->capture_default_str();
  cmd->add_option(both("learning_rate"), a.learning_rate)->capture_default_str();
  cmd->add_option(both("weight_decay"), a.weight_decay)->capture_default_str();
  cmd->add_option(both("adam_beta1"), a.adam_beta1)->capture_default_str();
  cmd->add_option(both("adam_beta2"), a.adam_beta2)->capture_default_str();
  cmd->add_option(both("adam_epsilon"), a.adam_epsilon)->capture_default_str();
  cmd->add_option(both("max_grad_norm"), a.max_grad_norm)->capture_default_str();
  cmd->add_option(both("num_train_epochs"), a.num_train_epochs)->capture_default_str();
  cmd->add_option(both("max_steps"), a.max_steps)->capture_default_str();
  cmd->add_option(both("warmup_steps"), a.warmup_steps)->capture_default_str();
  cmd->add_option(both("lr_scheduler_type"), a.lr_scheduler_type)->capture_default_str();
  cmd->add_option(both("logging_steps"), a.logging_steps)->capture_default_str();
  cmd->add_option(both("eval_steps"), a.eval_steps)->capture_default_str();
  cmd->add_option(both("save_steps"), a.save_steps)->capture_default_str();
  cmd->add_option(both("save_total_limit"), a.save_total_limit)->capture_default_str();
  cmd->add_option(both("seed"), a.seed)->capture_default_str();
  cmd->add_option(both("dataloader_drop_last"), a.dataloader_drop_last)->capture_default_str();
  cmd->add_option(both("resume_from_checkpoint"), a.resume_from_checkpoint,
                  "A checkpoint folder, or 'last' for the newest in output_dir");
  cmd->add_flag(both("overwrite_output_dir"), a.overwrite_output_dir,
                "Remove an earlier run's checkpoints, state and log from output_dir and start over "
                "(without it such a folder is refused unless the run resumes)");
  cmd->add_flag(both("disable_tqdm"), a.disable_tqdm, "No progress bar");
  cmd->callback([o] { run(*o); });
}

const bool kRegistered = register_command(&add_train_command);

}  // namespace
}  // namespace tfm::cli
