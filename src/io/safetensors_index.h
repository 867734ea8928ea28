// model.safetensors.index.json: which shard file holds each tensor of a sharded checkpoint.
#pragma once

#include <filesystem>
#include <map>
#include <string>
#include <vector>

namespace tfm {

// Shard path (in the index's folder) -> names of the tensors the index places in it. Throws
// tfm::Error naming the index for malformed JSON or a shard name that leaves the folder.
std::map<std::filesystem::path, std::vector<std::string>> read_safetensors_index(
    const std::filesystem::path& index_json);

}  // namespace tfm
