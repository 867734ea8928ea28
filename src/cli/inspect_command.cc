// `tfm inspect MODEL_OR_FILE [--json]`: what a checkpoint holds, without loading it.
#include <iostream>
#include <memory>
#include <nlohmann/json.hpp>

#include "cli/commands.h"
#include "io/checkpoint.h"
#include "io/hub.h"
#include "io/model_config.h"

namespace tfm::cli {
namespace {

struct InspectOptions {
  std::string model;
  bool json = false;
};

// config.json beside the weights, when there is one; a bare .safetensors file has no architecture.
std::optional<ModelConfig> find_config(const std::filesystem::path& resolved) {
  const std::filesystem::path folder =
      std::filesystem::is_directory(resolved) ? resolved : resolved.parent_path();
  const std::filesystem::path config = folder / "config.json";
  if (!std::filesystem::exists(config)) return std::nullopt;
  return load_model_config(config);
}

nlohmann::json describe(const std::filesystem::path& resolved) {
  const Checkpoint checkpoint = Checkpoint::open(resolved);
  const std::optional<ModelConfig> config = find_config(resolved);
  nlohmann::json out = {{"path", resolved.string()},
                        {"architecture", config ? nlohmann::json(config->architecture) : nullptr}};
  int64_t parameters = 0;
  nlohmann::json tensors = nlohmann::json::array();
  for (const std::string& name : checkpoint.names()) {
    const TensorInfo& info = checkpoint.info(name);
    parameters += shape_numel(info.shape);
    tensors.push_back({{"name", name}, {"dtype", dtype_name(info.dtype)}, {"shape", info.shape}});
  }
  out["parameters"] = parameters;
  out["tensors"] = std::move(tensors);
  return out;
}

void print_text(const nlohmann::json& d) {
  std::cout << "path: " << d["path"].get<std::string>() << "\n"
            << "architecture: "
            << (d["architecture"].is_null() ? "(no config.json)"
                                            : d["architecture"].get<std::string>())
            << "\n"
            << "parameters: " << d["parameters"].get<int64_t>() << "\n"
            << "tensors: " << d["tensors"].size() << "\n";
  for (const nlohmann::json& t : d["tensors"]) {
    std::cout << "  " << t["name"].get<std::string>() << "\t" << t["dtype"].get<std::string>()
              << "\t" << shape_str(t["shape"].get<Shape>()) << "\n";
  }
}

void add_inspect_command(CLI::App& app) {
  auto options = std::make_shared<InspectOptions>();
  CLI::App* command =
      app.add_subcommand("inspect", "Show a checkpoint's architecture, size and tensors");
  command
      ->add_option("model", options->model,
                   "Hub id (Org/Name, from the local cache), folder or .safetensors file")
      ->required();
  command->add_flag("--json", options->json, "Print JSON instead of text");
  command->callback([options] {
    const nlohmann::json d = describe(resolve_pretrained(options->model));
    if (options->json) {
      std::cout << d.dump(2) << "\n";
    } else {
      print_text(d);
    }
  });
}

const bool kRegistered = register_command(&add_inspect_command);

}  // namespace
}  // namespace tfm::cli
