// A Trainer checkpoint folder, output_dir/checkpoint-N: the model as save_pretrained writes it
// (f32 master weights, so training resumes exactly), the tokenizer files, the optimizer moments,
// trainer_state.json (step, epoch, data-loader position, log history) and, written last, the
// manifest that makes it complete (checkpoint_manifest.h).
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
// Deletes the oldest checkpoints beyond `limit` (0 keeps all), never `keep` (the one just saved:
// an earlier run's checkpoint of a later step is deleted before it).
void rotate_checkpoints(const std::filesystem::path& output_dir, int64_t limit,
                        const std::filesystem::path& keep = {});
// `spec` is a folder or "last" (the newest complete checkpoint in output_dir, passing over
// incomplete ones). Throws naming what is missing or why a checkpoint is not complete
// (checkpoint_manifest.h).
std::filesystem::path resolve_checkpoint(const std::string& spec,
                                         const std::filesystem::path& output_dir);

// A checkpoint is written into "NAME.partial" beside where it goes, then placed: its manifest
// written last, then renamed into place (replacing a folder of that name whole).
std::string partial_name(const std::string& name);
void place_checkpoint(const std::filesystem::path& partial, const std::filesystem::path& dir);
// What an earlier training run left in output_dir that a run starting afresh would mix with its
// own: its checkpoint-N folders, trainer_state.json and logs.jsonl.
std::vector<std::filesystem::path> earlier_run_files(const std::filesystem::path& output_dir);
// Removes the ".partial" folders an interrupted save left in output_dir.
void remove_partial_checkpoints(const std::filesystem::path& output_dir);

}  // namespace tfm::training
