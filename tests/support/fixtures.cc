#include "support/fixtures.h"

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <map>

#include "io/checkpoint.h"
#include "io/safetensors.h"

namespace tfm::testing {

std::string fixture_dir(const std::string& arch) {
  return std::string(TFM_TEST_DATA_DIR) + "/fixtures/" + arch;
}

std::vector<int64_t> fixture_prompt(const std::string& arch, int row) {
  const nlohmann::json& ref = reference(arch);
  std::vector<int64_t> ids;
  for (size_t j = 0; j < ref["padded_input_ids"][row].size(); ++j) {
    if (ref["padded_attention_mask"][row][j] == 1) ids.push_back(ref["padded_input_ids"][row][j]);
  }
  return ids;
}

std::vector<int64_t> fixture_greedy(const std::string& arch, int row) {
  const nlohmann::json& ref = reference(arch);
  const auto all = ref["greedy_16"][row].get<std::vector<int64_t>>();
  return {all.begin() + static_cast<std::ptrdiff_t>(ref["padded_input_ids"][row].size()),
          all.end()};
}

std::string test_name(std::string arch) {
  std::replace(arch.begin(), arch.end(), '-', '_');
  return arch;
}

const nlohmann::json& reference(const std::string& arch) {
  static std::map<std::string, nlohmann::json> cache;
  auto it = cache.find(arch);
  if (it == cache.end()) {
    std::ifstream in(fixture_dir(arch) + "/reference.json");
    it = cache.emplace(arch, nlohmann::json::parse(in)).first;
  }
  return it->second;
}

void write_fixture_with_vocabulary(const std::string& arch, int64_t vocab_size,
                                   const std::string& dir) {
  std::filesystem::create_directories(dir);
  nlohmann::json config = nlohmann::json::parse(std::ifstream(fixture_dir(arch) + "/config.json"));
  config["vocab_size"] = vocab_size;
  std::ofstream(dir + "/config.json") << config.dump(2);
  const Checkpoint checkpoint = Checkpoint::open(fixture_dir(arch));
  std::vector<std::pair<std::string, Tensor>> tensors;
  for (const std::string& name : checkpoint.names()) {
    const Tensor t = checkpoint.tensor(name);
    const bool vocabulary = name == "model.embed_tokens.weight" || name == "lm_head.weight";
    tensors.emplace_back(name, vocabulary ? t.slice(0, vocab_size).clone() : t.clone());
  }
  save_safetensors(dir + "/model.safetensors", tensors);
}

Tensor int_matrix(const nlohmann::json& rows) {
  const auto r = static_cast<int64_t>(rows.size()), c = static_cast<int64_t>(rows[0].size());
  std::vector<int64_t> values;
  for (const auto& row : rows) {
    for (const auto& v : row) values.push_back(v.get<int64_t>());
  }
  return Tensor::from_vector(values, {r, c});
}

FixtureBatch fixture_batch(const std::string& arch) {
  FixtureBatch batch;
  batch.input_ids = int_matrix(reference(arch)["input_ids"]);
  const auto count = static_cast<size_t>(batch.input_ids.numel());
  batch.attention_mask =
      Tensor::from_vector(std::vector<int64_t>(count, 1), batch.input_ids.shape());
  const int64_t cols = batch.input_ids.dim(1);
  batch.targets = batch.input_ids.dim(0) * (cols - 1);
  return batch;
}

const char* mode_name(Mode mode) {
  switch (mode) {
    case Mode::kCompiled:
      return "compiled";
    case Mode::kEager:
      return "eager";
    case Mode::kUnfused:
      return "unfused";
  }
  return "?";
}

}  // namespace tfm::testing
