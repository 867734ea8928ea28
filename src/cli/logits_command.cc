// tfm logits MODEL --ids 1,2,3 [--all] [--dtype] [--disable-compile]: the logits and causal-LM
// loss of the ids as JSON, for comparing with transformers.
#include <cmath>
#include <iostream>
#include <nlohmann/json.hpp>

#include "cli/commands.h"
#include "cli/device_options.h"
#include "cli/distributed_options.h"
#include "cli/id_list.h"
#include "tfm/log.h"
#include "tfm/model.h"

namespace tfm::cli {
namespace {

// Mean cross-entropy of predicting ids[i+1] from position i (the usual label shift).
double causal_lm_loss(const float* logits, const std::vector<int64_t>& ids, int64_t vocab) {
  double total = 0;
  for (size_t i = 0; i + 1 < ids.size(); ++i) {
    const float* row = logits + static_cast<int64_t>(i) * vocab;
    double max = row[0];
    for (int64_t v = 1; v < vocab; ++v) max = std::max(max, static_cast<double>(row[v]));
    double sum = 0;
    for (int64_t v = 0; v < vocab; ++v) sum += std::exp(row[v] - max);
    total += std::log(sum) + max - row[ids[i + 1]];
  }
  return ids.size() > 1 ? total / static_cast<double>(ids.size() - 1) : NAN;
}

struct Options {
  std::string model, ids, dtype;
  DeviceOptions device;
  bool all = false, disable_compile = false, disable_fusion = false;
  DistributedConfig distributed;
};

void run(const Options& o) {
  set_log_level(LogLevel::kWarn);
  open_device_plugins(o.device);
  LoadOptions load{
      .device_map = o.device.device, .distributed = o.distributed, .fuse = !o.disable_fusion};
  if (!o.dtype.empty()) load.dtype = parse_dtype(o.dtype);
  CausalLM model = AutoModelForCausalLM::from_pretrained(o.model, load);
  const std::vector<int64_t> ids = parse_id_list(o.ids);
  const auto seq = static_cast<int64_t>(ids.size());
  const Tensor logits =
      model.forward(Tensor::from_vector(ids, {1, seq}), nullptr, true, o.disable_compile);
  const int64_t vocab = logits.dim(2);
  const float* data = logits.data_as<float>();
  nlohmann::json out;
  const auto row = [&](int64_t s) {
    return std::vector<float>(data + s * vocab, data + (s + 1) * vocab);
  };
  if (o.all) {
    for (int64_t s = 0; s < seq; ++s) out["logits"].push_back(row(s));
  } else {
    out["logits"] = row(seq - 1);
  }
  const double loss = causal_lm_loss(data, ids, vocab);
  out["loss"] = std::isnan(loss) ? nlohmann::json() : nlohmann::json(loss);
  out["shape"] = o.all ? std::vector<int64_t>{1, seq, vocab} : std::vector<int64_t>{vocab};
  if (prints_results()) std::cout << out.dump() << "\n";
}

void add_logits_command(CLI::App& app) {
  auto options = std::make_shared<Options>();
  CLI::App* cmd =
      app.add_subcommand("logits", "Print logits and causal-LM loss of token ids as JSON");
  cmd->add_option("model", options->model, "Model folder or Org/Name in the Hugging Face cache")
      ->required();
  cmd->add_option("--ids", options->ids, "Token ids, comma-separated")->required();
  cmd->add_flag("--all", options->all, "Logits of every position (default: the last)");
  cmd->add_option("--dtype", options->dtype, "f32 or bf16 (default: the checkpoint's)");
  add_device_options(cmd, options->device);
  cmd->add_flag("--disable-compile", options->disable_compile, "Run eagerly, op by op");
  cmd->add_flag("--disable-fusion", options->disable_fusion,
                "Compiled graphs of basic ops, unfused");
  add_distributed_options(cmd, options->distributed);
  cmd->callback([options] { run(*options); });
}

const bool kRegistered = register_command(&add_logits_command);

}  // namespace
}  // namespace tfm::cli
