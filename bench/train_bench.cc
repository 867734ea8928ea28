// Training throughput: a model from a config.json with fresh weights, trained on random token
// rows by the Trainer (compiled step + AdamW), as the anchor (bench/anchor_train.py) trains the
// same config with transformers + PyTorch. Prints JSON.
//   train_bench CONFIG_JSON [--batch 16] [--seq 256] [--steps 8]
#include <sys/resource.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <random>
#include <string>

#include "tfm/log.h"
#include "tfm/model.h"
#include "training/trainer.h"

namespace {

double peak_rss_mib() {
  rusage usage{};
  getrusage(RUSAGE_SELF, &usage);
  return static_cast<double>(usage.ru_maxrss) / 1024.0;
}

tfm::training::TokenRows random_rows(int64_t rows, int64_t length, int64_t vocab) {
  std::mt19937 rng(0);
  std::uniform_int_distribution<int32_t> id(0, static_cast<int32_t>(vocab - 1));
  tfm::training::TokenRows out;
  out.max_length = length;
  for (int64_t i = 0; i < rows * length; ++i) out.input_ids.push_back(id(rng));
  out.attention_mask.assign(out.input_ids.size(), 1);
  out.labels = out.input_ids;
  return out;
}

int64_t flag(int argc, char** argv, const char* name, int64_t fallback) {
  for (int i = 2; i + 1 < argc; ++i) {
    if (std::strcmp(argv[i], name) == 0) return std::atoll(argv[i + 1]);
  }
  return fallback;
}

double run(const std::string& config, int64_t batch, int64_t seq, int64_t steps) {
  tfm::CausalLM model =
      tfm::AutoModelForCausalLM::from_config(config, {.dtype = tfm::DType::f32, .device_map = "cpu"});
  tfm::TrainingArguments args;
  args.output_dir = (std::filesystem::temp_directory_path() / "tfm_train_bench").string();
  args.per_device_train_batch_size = batch;
  args.max_steps = steps;
  args.logging_steps = steps;
  args.save_steps = 0;
  args.learning_rate = 1e-3;
  args.disable_tqdm = true;
  tfm::training::Trainer trainer(model, args,
                                 random_rows(batch * steps, seq, model.config().vocab_size));
  const double tokens_per_s = trainer.train().tokens_per_s;
  std::filesystem::remove_all(args.output_dir);
  return tokens_per_s;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 2) {
    std::fprintf(stderr, "usage: train_bench CONFIG_JSON [--batch N] [--seq N] [--steps N]\n");
    return 2;
  }
  tfm::set_log_level(tfm::LogLevel::kWarn);
  const int64_t batch = flag(argc, argv, "--batch", 16), seq = flag(argc, argv, "--seq", 256),
                steps = flag(argc, argv, "--steps", 8);
  const auto start = std::chrono::steady_clock::now();
  // The first step includes the compilation; a second run times the steady state.
  run(argv[1], batch, seq, 1);
  const double first_ms =
      std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start).count();
  const double tokens_per_s = run(argv[1], batch, seq, steps);
  std::printf(
      "{\"batch\": %ld, \"seq\": %ld, \"steps\": %ld, \"tokens_per_s\": %.1f, "
      "\"first_step_ms\": %.1f, \"peak_rss_mib\": %.1f}\n",
      static_cast<long>(batch), static_cast<long>(seq), static_cast<long>(steps), tokens_per_s,
      first_ms, peak_rss_mib());
  return 0;
}
