// tfm generate MODEL PROMPT: streams the generated text, then a line of figures.
#include <cstdio>
#include <filesystem>
#include <iostream>
#include <memory>
#include <optional>

#include "cli/commands.h"
#include "cli/device_options.h"
#include "cli/distributed_options.h"
#include "cli/id_list.h"
#include "io/hub.h"
#include "tfm/error.h"
#include "tfm/log.h"
#include "tfm/model.h"
#include "tfm/tokenizer.h"

namespace tfm::cli {
namespace {

struct Options {
  std::string model, prompt, dtype;
  std::optional<std::string> ids;  // given, if only as ""
  DeviceOptions device;
  GenerationConfig gen;
  uint64_t seed = 0;
  bool chat = false, print_ids = false, quiet = false, disable_fusion = false;
  DistributedConfig distributed;
};

std::optional<Tokenizer> load_tokenizer(const Options& o) {
  const std::filesystem::path dir = resolve_pretrained(o.model);
  if (!std::filesystem::exists(dir / "tokenizer.json")) {
    if (!o.ids) {
      throw Error(dir.string() + " has no tokenizer.json: give the prompt as --ids 1,2,3");
    }
    return std::nullopt;
  }
  return AutoTokenizer::from_pretrained(dir.string());
}

std::vector<int64_t> prompt_ids(const Options& o, const std::optional<Tokenizer>& tok) {
  if (o.ids && !o.prompt.empty()) {
    throw Error("generate: give a PROMPT or --ids, not both (the prompt '" +
                o.prompt.substr(0, 40) + "' and --ids " + o.ids->substr(0, 40) + ")");
  }
  if (o.ids) return parse_id_list(*o.ids);
  if (o.prompt.empty()) throw Error("generate: give a PROMPT or --ids");
  const std::string text = o.chat ? tok->apply_chat_template({{"user", o.prompt}}, true) : o.prompt;
  const std::vector<int32_t> ids = tok->encode(text, /*add_special_tokens=*/true);
  return {ids.begin(), ids.end()};
}

void run(Options& o) {
  const bool prints = prints_results();
  if (o.quiet || !prints) set_log_level(LogLevel::kWarn);
  open_device_plugins(o.device);
  LoadOptions load{
      .device_map = o.device.device, .distributed = o.distributed, .fuse = !o.disable_fusion};
  if (!o.dtype.empty()) load.dtype = parse_dtype(o.dtype);
  CausalLM model = AutoModelForCausalLM::from_pretrained(o.model, load);
  const std::optional<Tokenizer> tok = load_tokenizer(o);
  const std::vector<int64_t> prompt = prompt_ids(o, tok);
  if (o.gen.do_sample) o.gen.seed = o.seed;

  std::unique_ptr<StreamingDecoder> stream;
  if (tok && prints) {
    stream = std::make_unique<StreamingDecoder>(*tok, /*skip_special_tokens=*/true);
    std::cout << tok->decode(std::vector<int32_t>(prompt.begin(), prompt.end()), true)
              << std::flush;
  }
  o.gen.streamer = [&](int, int64_t token) {
    if (stream) std::cout << stream->put(static_cast<int32_t>(token)) << std::flush;
  };
  GenerationStats stats;
  const std::vector<int64_t> out = model.generate({prompt}, o.gen, &stats).at(0);
  if (stream) std::cout << stream->flush() << "\n";
  if (!prints) return;
  if (o.print_ids) std::cout << json_id_list(out) << "\n";
  const double tok_per_s =
      stats.new_tokens > 1 ? (stats.new_tokens - 1) / (stats.decode_ms / 1e3) : 0;
  std::fprintf(
      stderr,
      "prompt tokens: %d, new tokens: %d, time to first token: %.1f ms, %.1f tokens/s, "
      "graphs compiled: %d%s (%s, %s)\n",
      stats.prompt_tokens, stats.new_tokens, stats.prefill_ms, tok_per_s, stats.graphs_compiled,
      stats.graphs_loaded > 0
          ? (", loaded from the compile cache: " + std::to_string(stats.graphs_loaded)).c_str()
          : "",
      model.device().str().c_str(), std::string(dtype_name(model.dtype())).c_str());
}

void add_generate_command(CLI::App& app) {
  auto o = std::make_shared<Options>();
  CLI::App* cmd = app.add_subcommand("generate", "Generate text with a causal language model");
  cmd->add_option("model", o->model, "Model folder or Org/Name in the Hugging Face cache")
      ->required();
  cmd->add_option("prompt", o->prompt, "Prompt text");
  cmd->add_option("--ids", o->ids, "Prompt as token ids, comma-separated");
  cmd->add_flag("--print-ids", o->print_ids, "Print the prompt and generated ids as JSON");
  cmd->add_flag("--chat", o->chat, "Wrap the prompt in the tokenizer's chat template");
  add_device_options(cmd, o->device);
  cmd->add_option("--dtype", o->dtype, "f32 or bf16 (default: the checkpoint's)");
  cmd->add_option("--max-new-tokens", o->gen.max_new_tokens, "Tokens to generate")
      ->capture_default_str();
  cmd->add_option("--min-new-tokens", o->gen.min_new_tokens, "Tokens before EOS is allowed");
  cmd->add_flag("--do-sample", o->gen.do_sample, "Sample instead of greedy decoding");
  cmd->add_option("--temperature", o->gen.temperature, "Sampling temperature")
      ->capture_default_str();
  cmd->add_option("--top-k", o->gen.top_k, "Keep the k most likely tokens (0: all)")
      ->capture_default_str();
  cmd->add_option("--top-p", o->gen.top_p, "Nucleus sampling mass")->capture_default_str();
  cmd->add_option("--repetition-penalty", o->gen.repetition_penalty, "Penalty for repeated tokens");
  cmd->add_option("--seed", o->seed, "Random seed for sampling")->capture_default_str();
  cmd->add_flag("--disable-compile", o->gen.disable_compile, "Run eagerly, op by op");
  cmd->add_flag("--disable-fusion", o->disable_fusion, "Compiled graphs of basic ops, unfused");
  cmd->add_flag("--quiet", o->quiet, "Do not log compilations");
  add_distributed_options(cmd, o->distributed);
  cmd->callback([o] { run(*o); });
}

const bool kRegistered = register_command(&add_generate_command);

}  // namespace
}  // namespace tfm::cli
