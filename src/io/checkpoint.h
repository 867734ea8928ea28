// A checkpoint as published on the Hub: one model.safetensors, or model.safetensors.index.json and
// its shards. Every file is mapped at open (cheap: nothing is read until a tensor is touched) and
// every header checked, so a broken checkpoint fails at open, naming the file.
#pragma once

#include <filesystem>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "io/mapped_file.h"
#include "io/safetensors.h"
#include "io/safetensors_header.h"
#include "tfm/tensor.h"

namespace tfm {

class Checkpoint {
 public:
  // `path`: a folder holding model.safetensors or model.safetensors.index.json (+ shards), an index
  // .json file, or one .safetensors file.
  static Checkpoint open(const std::filesystem::path& path);

  std::vector<std::string> names() const;  // sorted
  bool contains(const std::string& name) const;
  const TensorInfo& info(const std::string& name) const;  // throws naming the checkpoint
  Tensor tensor(const std::string& name) const;           // borrowed view of the mapping
  // Rows [begin, end) of axis 0, touching only their bytes (a tensor-parallel rank's shard).
  Tensor tensor_rows(const std::string& name, int64_t begin, int64_t end) const;
  // Drops the tensor's file pages from this process's memory after a loader copied it, so peak
  // memory while loading stays near the weights' size instead of twice it.
  void release(const std::string& name) const;
  const std::filesystem::path& path() const { return path_; }

 private:
  // Adds the tensors of one file: all of them, or for a shard only those its index places there.
  void add_file(const std::filesystem::path& file, const std::vector<std::string>* wanted = nullptr,
                const std::filesystem::path& index = {});

  std::filesystem::path path_;
  std::map<std::string, TensorInfo> tensors_;
  std::map<std::filesystem::path, std::shared_ptr<const MappedFile>> files_;
};

}  // namespace tfm
