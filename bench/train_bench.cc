// Training throughput: a model from a config.json with fresh weights, trained on random token
// rows (compiled step, clipping, AdamW), the same loop as the anchor (bench/anchor_train.py) runs
// with transformers + PyTorch on the same config. Prints JSON.
//   train_bench CONFIG_JSON [--batch 16] [--seq 256] [--steps 8] [--device cpu] [--bf16]
//               [--saved-ds-mib 512] [--no-flash-grad] [--profile]
// The last three set the kernel backend's choices (tfm::KernelOptions), to time what each is
// worth.
#include <sys/resource.h>

#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <random>
#include <string>

#include "api/causal_lm_access.h"
#include "core/device_registry.h"
#include "models/causal_lm.h"
#include "report_errors.h"
#include "tfm/device.h"
#include "tfm/log.h"
#include "tfm/model.h"
#include "training/adamw.h"
#include "training/causal_lm_batch.h"
#include "training/dataset_rows.h"
#include "training/flat_parameters.h"
#include "training/grad_clip.h"

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

const char* flag(int argc, char** argv, const char* name, const char* fallback) {
  for (int i = 2; i + 1 < argc; ++i) {
    if (std::strcmp(argv[i], name) == 0) return argv[i + 1];
  }
  return fallback;
}

bool has_flag(int argc, char** argv, const char* name) {
  for (int i = 2; i < argc; ++i) {
    if (std::strcmp(argv[i], name) == 0) return true;
  }
  return false;
}

// As the anchor's torch.cuda.max_memory_allocated: "null" on the CPU.
std::string peak_device_mib(const std::string& device) {
  const tfm::DeviceKind* cuda = tfm::find_device_kind("cuda");
  if (device == "cpu" || cuda == nullptr) return "null";
  return std::to_string(static_cast<double>(cuda->peak_allocated(0)) / (1 << 20));
}

struct Setup {
  int64_t batch, seq, steps;
  std::string device;
  tfm::DType autocast;  // bf16: TrainingArguments.bf16
  tfm::KernelOptions kernels;
};

struct Timing {
  double first_step_ms = 0, tokens_per_s = 0;
};

// The loop of the anchor: step 0 (compilation included) timed alone, then `steps` more.
Timing run(const std::string& config, const Setup& setup) {
  using tfm::training::FlatParameters;
  const int64_t batch = setup.batch, seq = setup.seq, steps = setup.steps;
  tfm::CausalLM model = tfm::AutoModelForCausalLM::from_config(
      config, {.dtype = tfm::DType::f32, .device_map = setup.device, .kernels = setup.kernels});
  FlatParameters params(tfm::CausalLMAccess::impl(model));
  tfm::training::AdamW optimizer(params.segments(), params.size(), {.lr = 1e-3}, params.device());
  const tfm::training::GradSquares squares({{0, params.size(), true}}, params.size(),
                                           params.device());
  const tfm::training::TokenRows rows =
      random_rows(batch * (steps + 1), seq, model.config().vocab_size);
  const auto step = [&](int64_t i) {
    const auto slice = [&](const std::vector<int32_t>& v) {
      return tfm::Tensor::from_vector(
          std::vector<int32_t>(v.begin() + i * batch * seq, v.begin() + (i + 1) * batch * seq),
          {batch, seq});
    };
    const tfm::Tensor ids = slice(rows.input_ids), mask = slice(rows.attention_mask);
    const tfm::TrainInputs in =
        tfm::training::make_train_inputs(ids, mask, ids, tfm::training::count_targets(ids));
    params.zero_grads();
    tfm::CausalLMAccess::impl(model).train_step_into(in, params.grad_blocks(), false,
                                                     setup.autocast);
    // As the Trainer clips: the optimizer scales each gradient as it reads it.
    const double norm = std::sqrt(static_cast<double>(squares(params.grads())));
    optimizer.step(params.values(), params.grads(), optimizer.options().lr,
                   tfm::training::clip_coefficient(norm, 1.0));
  };
  using clock = std::chrono::steady_clock;
  Timing t;
  auto start = clock::now();
  step(0);
  t.first_step_ms = std::chrono::duration<double, std::milli>(clock::now() - start).count();
  start = clock::now();
  for (int64_t i = 1; i <= steps; ++i) step(i);
  const double seconds = std::chrono::duration<double>(clock::now() - start).count();
  t.tokens_per_s = static_cast<double>(batch * seq * steps) / seconds;
  return t;
}

int bench_main(int argc, char** argv) {
  if (argc < 2) {
    std::fprintf(stderr,
                 "usage: train_bench CONFIG_JSON [--batch N] [--seq N] [--steps N] "
                 "[--device cpu|cuda] [--bf16] [--saved-ds-mib N] [--no-flash-grad] "
                 "[--profile]\n");
    return 2;
  }
  tfm::set_log_level(tfm::LogLevel::kWarn);
  const Setup setup{std::atoll(flag(argc, argv, "--batch", "16")),
                    std::atoll(flag(argc, argv, "--seq", "256")),
                    std::atoll(flag(argc, argv, "--steps", "8")),
                    flag(argc, argv, "--device", "cpu"),
                    has_flag(argc, argv, "--bf16") ? tfm::DType::bf16 : tfm::DType::f32,
                    {.flash_attention_grad = !has_flag(argc, argv, "--no-flash-grad"),
                     .saved_score_grad_mib = std::atoll(flag(argc, argv, "--saved-ds-mib", "512")),
                     .profile = has_flag(argc, argv, "--profile")}};
  const Timing t = run(argv[1], setup);
  std::printf(
      "{\"batch\": %ld, \"seq\": %ld, \"steps\": %ld, \"device\": \"%s\", \"bf16\": %s, "
      "\"tokens_per_s\": %.1f, \"first_step_ms\": %.1f, \"peak_rss_mib\": %.1f, "
      "\"peak_device_mib\": %s}\n",
      static_cast<long>(setup.batch), static_cast<long>(setup.seq), static_cast<long>(setup.steps),
      setup.device.c_str(), setup.autocast == tfm::DType::bf16 ? "true" : "false", t.tokens_per_s,
      t.first_step_ms, peak_rss_mib(), peak_device_mib(setup.device).c_str());
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  return tfm::bench::report_errors("train_bench", bench_main, argc, argv);
}
