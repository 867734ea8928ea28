#include "io/checkpoint.h"

#include <algorithm>

#include "io/safetensors_index.h"
#include "tfm/error.h"

namespace tfm {
namespace {

constexpr const char* kSingleFile = "model.safetensors";
constexpr const char* kIndexFile = "model.safetensors.index.json";

std::string folder_listing(const std::filesystem::path& folder) {
  std::vector<std::string> names;
  for (const auto& entry : std::filesystem::directory_iterator(folder)) {
    names.push_back(entry.path().filename().string());
  }
  std::sort(names.begin(), names.end());
  std::string listing;
  for (const std::string& name : names) listing += (listing.empty() ? "" : ", ") + name;
  return listing.empty() ? "nothing" : listing;
}

}  // namespace

Checkpoint Checkpoint::open(const std::filesystem::path& path) {
  Checkpoint checkpoint;
  checkpoint.path_ = path;
  std::filesystem::path file = path;
  if (std::filesystem::is_directory(path)) {
    if (std::filesystem::exists(path / kSingleFile)) {
      file = path / kSingleFile;
    } else if (std::filesystem::exists(path / kIndexFile)) {
      file = path / kIndexFile;
    } else {
      throw Error("no " + std::string(kSingleFile) + " or " + kIndexFile + " in '" + path.string() +
                  "' (it holds: " + folder_listing(path) + ")");
    }
  } else if (!std::filesystem::exists(path)) {
    throw Error("checkpoint '" + path.string() + "' does not exist");
  }
  if (file.extension() == ".json") {
    for (const auto& [shard, names] : read_safetensors_index(file)) {
      if (!std::filesystem::exists(shard)) {
        throw Error("safetensors index '" + file.string() + "' names shard '" +
                    shard.filename().string() + "' (for tensor '" + names.front() +
                    "'), which does not exist");
      }
      checkpoint.add_file(shard, &names, file);
    }
  } else {
    checkpoint.add_file(file);
  }
  return checkpoint;
}

void Checkpoint::add_file(const std::filesystem::path& file, const std::vector<std::string>* wanted,
                          const std::filesystem::path& index) {
  SafetensorsFile contents = open_safetensors(file);
  std::map<std::string, TensorInfo> found;
  for (TensorInfo& info : contents.header.tensors) found.emplace(info.name, std::move(info));
  if (wanted == nullptr) {
    tensors_.merge(found);
  } else {
    for (const std::string& name : *wanted) {
      auto it = found.find(name);
      if (it == found.end()) {
        throw Error("safetensors index '" + index.string() + "' places tensor '" + name + "' in '" +
                    file.string() + "', which does not hold it");
      }
      tensors_.emplace(name, std::move(it->second));
    }
  }
  files_.emplace(file, std::move(contents.mapping));
}

std::vector<std::string> Checkpoint::names() const {
  std::vector<std::string> names;
  for (const auto& entry : tensors_) names.push_back(entry.first);
  return names;
}

bool Checkpoint::contains(const std::string& name) const { return tensors_.count(name) > 0; }

const TensorInfo& Checkpoint::info(const std::string& name) const {
  auto it = tensors_.find(name);
  if (it == tensors_.end()) {
    throw Error("tensor '" + name + "' is not in checkpoint '" + path_.string() + "' (" +
                std::to_string(tensors_.size()) + " tensors)");
  }
  return it->second;
}

Tensor Checkpoint::tensor(const std::string& name) const {
  const TensorInfo& i = info(name);
  return borrow_tensor_rows(files_.at(i.file), i, 0, i.shape.empty() ? 1 : i.shape[0]);
}

void Checkpoint::release(const std::string& name) const {
  const TensorInfo& i = info(name);
  files_.at(i.file)->release(i.begin, i.end - i.begin);
}

Tensor Checkpoint::tensor_rows(const std::string& name, int64_t begin, int64_t end) const {
  const TensorInfo& i = info(name);
  if (i.shape.empty()) {
    throw Error("tensor '" + name + "' in checkpoint '" + path_.string() +
                "' is a scalar: no rows");
  }
  return borrow_tensor_rows(files_.at(i.file), i, begin, end);
}

}  // namespace tfm
