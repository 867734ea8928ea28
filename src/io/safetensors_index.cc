#include "io/safetensors_index.h"

#include <fstream>
#include <nlohmann/json.hpp>

#include "io/json_depth.h"
#include "tfm/error.h"

namespace tfm {
namespace {

[[noreturn]] void fail(const std::filesystem::path& file, const std::string& problem) {
  throw Error("safetensors index '" + file.string() + "': " + problem);
}

}  // namespace

std::map<std::filesystem::path, std::vector<std::string>> read_safetensors_index(
    const std::filesystem::path& index_json) {
  std::ifstream in(index_json);
  if (!in) fail(index_json, "cannot be opened");
  nlohmann::json root;
  try {
    root = nlohmann::json::parse(in, json_depth_limit());
  } catch (const nlohmann::json::exception& e) {
    fail(index_json, std::string("not valid JSON: ") + e.what());
  }
  if (!root.is_object() || !root.contains("weight_map") || !root["weight_map"].is_object()) {
    fail(index_json, "has no 'weight_map' object");
  }
  std::map<std::filesystem::path, std::vector<std::string>> shards;
  for (const auto& [name, shard] : root["weight_map"].items()) {
    if (!shard.is_string()) fail(index_json, "shard of tensor '" + name + "' is not a string");
    const std::filesystem::path relative = shard.get<std::string>();
    // The index comes from the network; it must not point readers outside its folder.
    if (relative.empty() || relative.is_absolute() || relative.filename() != relative) {
      fail(index_json, "tensor '" + name + "' names shard '" + relative.string() +
                           "', not a file name in the index's folder");
    }
    shards[index_json.parent_path() / relative].push_back(name);
  }
  return shards;
}

}  // namespace tfm
