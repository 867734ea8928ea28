#include "training/trainer_checkpoint.h"

#include <algorithm>
#include <fstream>

#include "io/json_depth.h"
#include "tfm/error.h"
#include "training/checkpoint_manifest.h"

namespace tfm::training {
namespace fs = std::filesystem;

namespace {

constexpr const char* kStateFile = "trainer_state.json";
constexpr const char* kPrefix = "checkpoint-";

int64_t checkpoint_step(const fs::path& dir) {
  const std::string name = dir.filename().string();
  if (name.rfind(kPrefix, 0) != 0) return -1;
  const std::string digits = name.substr(std::string(kPrefix).size());
  if (digits.empty() || !std::all_of(digits.begin(), digits.end(), ::isdigit)) return -1;
  return std::stoll(digits);
}

}  // namespace

void write_trainer_state(const fs::path& dir, const TrainerState& state) {
  const nlohmann::json json = {
      {"global_step", state.global_step}, {"epoch", state.epoch},
      {"data_loader", state.data_loader}, {"log_history", state.log_history},
      {"tp_size", state.tp_size},         {"fsdp_size", state.fsdp_size}};
  const fs::path file = dir / kStateFile;
  std::ofstream out(file);
  out << json.dump(2) << "\n";
  if (!out) throw Error("cannot write '" + file.string() + "'");
}

TrainerState read_trainer_state(const fs::path& dir) {
  const fs::path file = dir / kStateFile;
  std::ifstream in(file);
  if (!in) throw Error("cannot resume: '" + file.string() + "' is missing");
  try {
    const nlohmann::json json = nlohmann::json::parse(in, json_depth_limit());
    TrainerState state;
    state.global_step = json.at("global_step").get<int64_t>();
    state.epoch = json.at("epoch").get<double>();
    state.data_loader = json.at("data_loader");
    state.log_history = json.at("log_history");
    state.tp_size = json.value("tp_size", 1);
    state.fsdp_size = json.value("fsdp_size", 1);
    return state;
  } catch (const nlohmann::json::exception& e) {
    throw Error("cannot resume: '" + file.string() + "' is not a trainer state (" + e.what() + ")");
  }
}

void copy_tokenizer_files(const fs::path& tokenizer_dir, const fs::path& dir) {
  for (const char* name : {"tokenizer.json", "tokenizer_config.json", "special_tokens_map.json",
                           "generation_config.json"}) {
    const fs::path src = tokenizer_dir / name;
    if (fs::exists(src)) fs::copy_file(src, dir / name, fs::copy_options::overwrite_existing);
  }
}

std::vector<fs::path> list_checkpoints(const fs::path& output_dir) {
  std::vector<std::pair<int64_t, fs::path>> found;
  if (fs::is_directory(output_dir)) {
    for (const auto& entry : fs::directory_iterator(output_dir)) {
      const int64_t step = checkpoint_step(entry.path());
      if (step >= 0 && entry.is_directory()) found.emplace_back(step, entry.path());
    }
  }
  std::sort(found.begin(), found.end());
  std::vector<fs::path> dirs;
  for (auto& [step, path] : found) dirs.push_back(path);
  return dirs;
}

void rotate_checkpoints(const fs::path& output_dir, int64_t limit, const fs::path& keep) {
  if (limit <= 0) return;
  std::vector<fs::path> dirs = list_checkpoints(output_dir);
  for (size_t i = 0; i < dirs.size() && dirs.size() > static_cast<size_t>(limit);) {
    if (dirs[i] == keep) {
      ++i;
      continue;
    }
    fs::remove_all(dirs[i]);
    dirs.erase(dirs.begin() + static_cast<std::ptrdiff_t>(i));
  }
}

fs::path resolve_checkpoint(const std::string& spec, const fs::path& output_dir) {
  if (spec == "last") {
    const std::vector<fs::path> dirs = list_checkpoints(output_dir);
    std::string skipped;
    for (auto it = dirs.rbegin(); it != dirs.rend(); ++it) {
      const std::optional<std::string> why = incomplete(*it);
      if (!why) return *it;
      skipped += "; " + it->filename().string() + ": " + *why;
    }
    throw Error("resume_from_checkpoint=last: no complete checkpoint-N folder in '" +
                output_dir.string() + "'" + skipped);
  }
  if (!fs::is_directory(spec)) {
    throw Error("resume_from_checkpoint: '" + spec + "' is not a folder");
  }
  if (const std::optional<std::string> why = incomplete(spec)) {
    throw Error("resume_from_checkpoint: '" + spec + "' is not a complete checkpoint: " + *why);
  }
  return spec;
}

std::string partial_name(const std::string& name) { return name + ".partial"; }

std::vector<fs::path> earlier_run_files(const fs::path& output_dir) {
  std::vector<fs::path> files = list_checkpoints(output_dir);
  for (const char* name : {kStateFile, "logs.jsonl"}) {
    if (fs::exists(output_dir / name)) files.push_back(output_dir / name);
  }
  return files;
}

void remove_partial_checkpoints(const fs::path& output_dir) {
  if (!fs::is_directory(output_dir)) return;
  for (const auto& entry : fs::directory_iterator(output_dir)) {
    const std::string name = entry.path().filename().string();
    if (name.rfind(kPrefix, 0) == 0 && name.size() > 8 &&
        name.compare(name.size() - 8, 8, ".partial") == 0) {
      fs::remove_all(entry.path());
    }
  }
}

void place_checkpoint(const fs::path& partial, const fs::path& dir) {
  write_manifest(partial);
  // A folder of that name (an earlier run's) is replaced whole: moved aside, the new one renamed
  // in, then the old one removed, so the name always holds one complete checkpoint or none.
  const fs::path replaced = dir.string() + ".replaced";
  fs::remove_all(replaced);
  if (fs::exists(dir)) fs::rename(dir, replaced);
  fs::rename(partial, dir);
  fs::remove_all(replaced);
}

}  // namespace tfm::training
