// A Trainer checkpoint folder, output_dir/checkpoint-N: the model as save_pretrained writes it
// (f32 master weights, so training resumes exactly), the tokenizer files, the optimizer moments
// and trainer_state.json (step, epoch, data-loader position, log history).
#pragma once

#include <filesystem>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>

namespace tfm::training {

struct TrainerState {
  int64_t global_step = 0;
  double epoch = 0;
  nlohmann::json data_loader;  // DataLoaderState::to_json()
  nlohmann::json log_history = nlohmann::json::array();
  // The DistributedConfig that saved it: each rank's optimizer file holds its own shard, so a
  // resume needs the same layout.
  int tp_size = 1;
  int fsdp_size = 1;
};

void write_trainer_state(const std::filesystem::path& dir, const TrainerState& state);
TrainerState read_trainer_state(const std::filesystem::path& dir);

// Copies tokenizer.json and the tokenizer's companion files found in `tokenizer_dir`.
void copy_tokenizer_files(const std::filesystem::path& tokenizer_dir,
                          const std::filesystem::path& dir);

// checkpoint-N folders of `output_dir`, oldest (smallest N) first.
std::vector<std::filesystem::path> list_checkpoints(const std::filesystem::path& output_dir);
// Deletes the oldest checkpoints beyond `limit` (0 keeps all).
void rotate_checkpoints(const std::filesystem::path& output_dir, int64_t limit);
// `spec` is a folder or "last" (the newest checkpoint in output_dir). Throws naming what is
// missing.
std::filesystem::path resolve_checkpoint(const std::string& spec,
                                         const std::filesystem::path& output_dir);

}  // namespace tfm::training
