// tfm serve MODEL: an OpenAI-compatible server with continuous batching (vLLM's flag names).
#include <algorithm>
#include <filesystem>
#include <iostream>
#include <memory>
#include <thread>

#include "api/causal_lm_access.h"
#include "cli/commands.h"
#include "cli/device_options.h"
#include "generation/generate.h"
#include "io/hub.h"
#include "serving/engine.h"
#include "serving/server.h"
#include "tfm/error.h"
#include "tfm/log.h"
#include "tfm/model.h"
#include "tfm/tokenizer.h"

namespace tfm::cli {
namespace {

constexpr int64_t kDefaultMaxModelLen = 2048;

struct Options {
  std::string model, dtype;
  DeviceOptions device;
  serving::ServerOptions server;
  serving::EngineOptions engine;
  int64_t max_model_len = 0;  // 0: the model's max_position_embeddings, at most 2048
  bool disable_fusion = false;
};

void run(Options& o) {
  open_device_plugins(o.device);
  const std::filesystem::path dir = resolve_pretrained(o.model);
  if (!std::filesystem::exists(dir / "tokenizer.json")) {
    throw Error(dir.string() + " has no tokenizer.json: tfm serve needs one");
  }
  LoadOptions load{.device_map = o.device.device, .fuse = !o.disable_fusion};
  if (!o.dtype.empty()) load.dtype = parse_dtype(o.dtype);
  CausalLM model = AutoModelForCausalLM::from_pretrained(o.model, load);
  const Tokenizer tokenizer = AutoTokenizer::from_pretrained(dir.string());
  const int64_t positions = model.config().max_position_embeddings;
  o.engine.max_model_len =
      o.max_model_len > 0 ? o.max_model_len : std::min(positions, kDefaultMaxModelLen);
  if (positions > 0 && o.engine.max_model_len > positions) {
    throw Error("--max-model-len " + std::to_string(o.engine.max_model_len) +
                " is more than the model's max_position_embeddings (" + std::to_string(positions) +
                ")");
  }
  std::vector<int64_t> stop_ids = generation::stop_ids({}, model.config());
  if (stop_ids.empty() && tokenizer.eos_token_id()) stop_ids = {*tokenizer.eos_token_id()};
  if (o.server.served_model_name.empty()) o.server.served_model_name = o.model;

  serving::Engine engine(CausalLMAccess::impl(model), o.engine);
  serving::Server server(engine, tokenizer, o.server, stop_ids);
  const int port = server.bind();
  std::thread http([&] { server.listen(); });
  log_info("tfm serve: " + o.server.served_model_name + " on " + model.device().str() +
           ", listening on http://" + o.server.host + ":" + std::to_string(port) + " (compiling " +
           std::to_string(engine.shapes().size()) + " graphs first)");
  for (const std::string& shape : engine.shapes()) log_info("  " + shape);
  try {
    engine.start();
  } catch (...) {
    server.stop();
    http.join();
    throw;
  }
  // The line a script waits for before sending requests.
  std::cout << "tfm serve: ready on http://" << o.server.host << ":" << port << std::endl;
  http.join();
}

void add_serve_command(CLI::App& app) {
  auto o = std::make_shared<Options>();
  CLI::App* cmd = app.add_subcommand(
      "serve", "Serve a model with OpenAI's API (/v1/chat/completions, /v1/completions)");
  cmd->add_option("model", o->model, "Model folder or Org/Name in the Hugging Face cache")
      ->required();
  cmd->add_option("--host", o->server.host, "Address to listen on")->capture_default_str();
  cmd->add_option("--port", o->server.port, "Port to listen on (0: any free one)")
      ->capture_default_str()
      ->check(CLI::Range(0, 65535));
  add_device_options(cmd, o->device);
  cmd->add_option("--dtype", o->dtype, "f32 or bf16 (default: the checkpoint's)");
  cmd->add_option("--max-num-seqs", o->engine.max_num_seqs,
                  "Sequences decoded together (KV cache rows)")
      ->capture_default_str()
      ->check(CLI::Range(1, 1024));
  cmd->add_option("--max-model-len", o->max_model_len,
                  "Prompt and generated tokens of one sequence (default: the model's "
                  "max_position_embeddings, at most 2048)")
      ->check(CLI::Range(int64_t{2}, int64_t{1} << 24));
  cmd->add_option("--max-waiting", o->engine.max_waiting,
                  "Sequences queued at once, not yet running; more get 503")
      ->capture_default_str()
      ->check(CLI::Range(1, 1 << 20));
  cmd->add_option("--api-key", o->server.api_key, "Require 'Authorization: Bearer KEY' on /v1/");
  cmd->add_option("--served-model-name", o->server.served_model_name,
                  "The model's name in the API (default: MODEL as given)");
  cmd->add_flag("--disable-fusion", o->disable_fusion, "Compiled graphs of basic ops, unfused");
  cmd->callback([o] { run(*o); });
}

const bool kRegistered = register_command(&add_serve_command);

}  // namespace
}  // namespace tfm::cli
